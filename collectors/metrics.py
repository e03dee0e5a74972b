"""The numbers seed 000 reports: Jain fairness, RTT inflation, mean and spread over repeats."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def jain(values: Iterable[float]) -> float | None:
    """Jain's index, seed 000 equation (1): (sum x)^2 / (n * sum x^2); None with fewer than 2."""
    xs = np.asarray([v for v in values if v is not None], dtype=float)
    if xs.size < 2:
        return None
    denom = xs.size * float(np.sum(xs ** 2))
    if denom == 0:
        return None
    return float(np.sum(xs) ** 2 / denom)


def rtt_stats(rtts_ms: Iterable[float | None], idle_ms: float | None) -> dict:
    xs = np.asarray([r for r in rtts_ms if r is not None], dtype=float)
    out = {"idle_ms": idle_ms, "samples": int(xs.size), "median_ms": None, "p95_ms": None, "max_ms": None,
           "inflation_median_ms": None, "inflation_p95_ms": None, "inflation_max_ms": None}
    if xs.size == 0:
        return out
    out.update(median_ms=float(np.median(xs)), p95_ms=float(np.percentile(xs, 95)), max_ms=float(xs.max()))
    if idle_ms is not None:
        for key in ("median", "p95", "max"):
            out[f"inflation_{key}_ms"] = out[f"{key}_ms"] - idle_ms
    return out


def mean_std(values: Iterable[float | None]) -> dict:
    xs = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return {"mean": None, "std": None, "n": 0}
    arr = np.asarray(xs, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0, "n": int(arr.size)}


def mbps(nbytes: float, seconds: float) -> float | None:
    return nbytes * 8 / seconds / 1e6 if seconds > 0 else None
