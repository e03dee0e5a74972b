"""Numbers as the report prints them, shared by render.py and the studies' sections.

Text in, text out, never HTML: the templates escape whatever these return. DASH stands in for a
value that is missing or not a finite number, so a partial store shows "–" rather than "nan".
"""
from __future__ import annotations

import math
from typing import Callable

DASH = "–"


def num(value) -> float | None:
    """The value as a float when it is a finite number (bools are not numbers here), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def finite(value) -> bool:
    """Whether the value is a finite number (num)."""
    return num(value) is not None


def mean(values) -> float | None:
    """The mean of the values that are finite numbers (num), or None where there are none (or no values)."""
    nums = [v for v in map(num, values or ()) if v is not None]
    return sum(nums) / len(nums) if nums else None


def fmt_mbps(value) -> str:
    """Three significant figures like the paper's table (474, 75.6), never scientific notation."""
    v = num(value)
    if v is None:
        return DASH
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def fmt_std(value) -> str:
    """A spread needs no more precision than its mean, and one decimal is plenty below 100."""
    v = num(value)
    return DASH if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def fmt(value, digits: int = 1, unit: str = "") -> str:
    v = num(value)
    return DASH if v is None else f"{v:.{digits}f}{unit}"


def spread(std, n, formatter: Callable[[object], str] = fmt_std) -> str | None:
    """The standard deviation as text, or None when fewer than two samples measured it.

    The store writes std 0.0 for a single trial (compute_stats); printed, "± 0.0" would claim a
    precision nobody measured, so the count decides, never the value.
    """
    return formatter(std) if isinstance(n, int) and n >= 2 else None


def mean_std(mean, std, n, fmt_mean: Callable[[object], str] = fmt_mbps,
             fmt_spread: Callable[[object], str] = fmt_std) -> str:
    """"mean ± std" over n samples; the mean alone when n < 2 (see spread)."""
    sd = spread(std, n, fmt_spread)
    return fmt_mean(mean) if sd is None else f"{fmt_mean(mean)} ± {sd}"
