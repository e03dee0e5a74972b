"""The statistics of one comparison: a shift, its confidence interval, a rank test, and whether the
repeats can reach the level at all.

- The shift is the Hodges-Lehmann estimate (the median of every pairwise difference new - base):
  robust to one bad trial, and the estimate that goes with the Mann-Whitney U test.
- The interval is a percentile bootstrap of that estimate (each side resampled on its own), seeded
  so a comparison printed twice says the same thing.
- The p-value is scipy's two-sided Mann-Whitney U (exact for small samples without ties).
- Like asv, a test is only asked where it can answer: with n + m trials and no ties the smallest
  two-sided p-value there is is 2 / C(n+m, n) (5 + 5 gives 0.0079, never below 0.002; 6 + 6 gives
  0.0022), so a level below it is "too few repeats", with the count that would do.
- Holm's step-down keeps the whole comparison's false-alarm rate at the level, however many cells
  and metrics it tests (docs/regression.md says why: a nightly suite tests dozens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import mannwhitneyu

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261124


def hodges_lehmann(base: Sequence[float], new: Sequence[float]) -> float:
    """Median of all pairwise differences new[j] - base[i]."""
    a, b = np.asarray(base, float), np.asarray(new, float)
    return float(np.median(b[None, :] - a[:, None]))


def bootstrap_ci(base: Sequence[float], new: Sequence[float], confidence: float = 0.95,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile interval of the Hodges-Lehmann shift, each sample resampled with replacement."""
    a, b = np.asarray(base, float), np.asarray(new, float)
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(resamples, len(a)))
    ib = rng.integers(0, len(b), size=(resamples, len(b)))
    diffs = b[ib][:, None, :] - a[ia][:, :, None]          # resample x |a| x |b|
    shifts = np.median(diffs.reshape(resamples, -1), axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(shifts, [tail, 100 - tail])
    return float(low), float(high)


def rank_p(base: Sequence[float], new: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (1.0 when both samples are one constant)."""
    a, b = list(map(float, base)), list(map(float, new))
    if len(set(a + b)) == 1:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


def min_p(n: int, m: int) -> float:
    """The smallest two-sided p-value Mann-Whitney U can give for n + m distinct values."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n + m, n))


def repeats_needed(alpha: float) -> int:
    """The fewest trials a side (equal sides) whose smallest p-value reaches `alpha`."""
    n = 1
    while min_p(n, n) > alpha:
        n += 1
    return n


def holm_thresholds(count: int, level: float) -> list[float]:
    """Holm's per-rank thresholds: level/count for the smallest p-value, ..., level for the largest."""
    return [level / (count - rank) for rank in range(count)]


def holm_reject(pvalues: Sequence[float], level: float) -> list[bool]:
    """Which hypotheses Holm's step-down rejects at family-wise `level`."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    reject = [False] * len(pvalues)
    for threshold, i in zip(holm_thresholds(len(pvalues), level), order):
        if pvalues[i] > threshold:
            break
        reject[i] = True
    return reject
