"""Synthetic labelled RTT datasets for the OPS tests and the DTW k-NN benchmark.

Not a network simulator: a cheap, seeded caricature of what the probe sees on Overlay-1
(128 ms base RTT, 6 MB queue at 500 Mb/s = at most 96 ms of queueing delay), one value per second:
  - CUBIC fills the queue in a concave-convex sawtooth (tens of seconds per cycle) and backs off
    on loss; two CUBIC flows keep a higher floor and cycle faster;
  - BBR (v1, cwnd up to 2 BDP > BDP + queue) keeps the queue near full, with a PROBE_RTT dip every
    10 s; two BBR flows dip together and sit a little higher;
  - CUBIC + BBR looks like BBR with a weak sawtooth riding on it;
  - active probing adds the probe pair's bursts (CUBIC 5 s, BBR 5 s, CUBIC 5 s, none 5 s) whose
    effect depends on what already fills the queue.
Classes differ in level, spread and rhythm, with the paper's hard pairs (one vs two streams of
the same CCA) deliberately close.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from longhaul.collectors.studies.ops import dataset as ops_dataset

BASE_MS = 128.0
QMAX_MS = 96.0
ACTIVE_CYCLE = (("cubic", 5), ("bbr", 5), ("cubic", 5), (None, 5))
# Extra queueing delay (ms) a probe burst adds on top of each background, per burst CCA.
BURST_MS = {"none": {"cubic": 45.0, "bbr": 70.0}, "cubic": {"cubic": 12.0, "bbr": 30.0},
            "cubic2": {"cubic": 8.0, "bbr": 22.0}, "bbr": {"cubic": 3.0, "bbr": 9.0},
            "bbr2": {"cubic": 2.0, "bbr": 5.0}, "cubic_bbr": {"cubic": 6.0, "bbr": 14.0}}


def _sawtooth(n: int, rng, period: tuple[float, float], lo: float, hi: float) -> np.ndarray:
    """CUBIC-like cycles: fast rise, plateau near the middle, rise again to the loss at `hi`."""
    out = np.empty(n)
    i = -int(rng.uniform(0, period[1]))  # random phase at the start of the run
    while i < n:
        p = int(rng.uniform(*period))
        ph = np.arange(p) / p
        c_lo, c_hi = lo + rng.normal(0, 8), hi - abs(rng.normal(0, 8))  # no two cycles alike
        shape = c_lo + (c_hi - c_lo) * (0.5 + 0.5 * (2 * ph - 1) ** 3)
        a, b = max(i, 0), min(i + p, n)
        if b > a:
            out[a:b] = shape[a - i:b - i]
        i += p
    return out


def _bbr(n: int, rng, level: float, dip: float) -> np.ndarray:
    """Queue near a drifting `level`, dropping by `dip` in the second holding each 10 s PROBE_RTT."""
    drift = np.convolve(rng.normal(0, 3.0, n + 59), np.ones(60) / np.sqrt(60), mode="valid")
    q = level + drift + rng.normal(0, 2.0, n)
    q[int(rng.integers(0, 10))::10] -= dip
    return q


def queue_ms(cls: str, n: int, rng) -> np.ndarray:
    """Queueing delay (ms) per second for a background class."""
    if cls == "none":
        return np.abs(rng.normal(0.4, 0.3, n))
    if cls == "cubic":
        return _sawtooth(n, rng, (22, 34), 18.0, QMAX_MS)
    if cls == "cubic2":
        return _sawtooth(n, rng, (14, 22), 36.0, QMAX_MS)
    if cls == "bbr":
        return _bbr(n, rng, 84.0, 30.0)
    if cls == "bbr2":
        return _bbr(n, rng, 88.0, 38.0)
    if cls == "cubic_bbr":
        return _bbr(n, rng, 78.0, 26.0) + 0.25 * _sawtooth(n, rng, (22, 34), -20.0, 20.0)
    raise ValueError(f"unknown class {cls!r}")


def active_ms(cls: str, n: int, rng) -> np.ndarray:
    """The probe's own bursts: each ramps up over its first seconds, by the class's response."""
    period = sum(secs for _, secs in ACTIVE_CYCLE)
    t = (np.arange(n) + int(rng.integers(0, period))) % period  # random place in the cycle
    out = np.zeros(n)
    start = 0
    for cca, secs in ACTIVE_CYCLE:
        inside = (t >= start) & (t < start + secs)
        if cca is not None:
            out[inside] = BURST_MS[cls][cca] * np.minimum(1.0, 0.3 + (t[inside] - start) / 3.0)
        start += secs
    return out


def series(cls: str, probing: str, seconds: int, rng, noise_ms: float = 2.0) -> np.ndarray:
    """One run's RTT (ms) per second."""
    q = queue_ms(cls, seconds, rng)
    if probing == "active":
        q = q + active_ms(cls, seconds, rng)
    q = np.clip(q, 0.0, QMAX_MS)
    return BASE_MS + q + rng.normal(0, noise_ms, seconds)


def rows(minutes: float = 5, classes=None, probings=ops_dataset.PROBING, seed: int = 0,
         runs_per_class: int = 1, noise_ms: float = 2.0):
    """Rows (class, probing, run, t_s, rtt_ms): runs_per_class runs of `minutes` each."""
    rng = np.random.default_rng(seed)
    seconds = int(round(minutes * 60))
    out = []
    for probing in probings:
        for cls in classes or ops_dataset.CLASSES:
            for r in range(runs_per_class):
                rtt = series(cls, probing, seconds, rng, noise_ms)
                run = f"{probing}-{cls}-{r}"
                out.extend((cls, probing, run, float(t), float(v)) for t, v in enumerate(rtt))
    return out


def write(path: Path, **kwargs) -> Path:
    """Write a synthetic dataset (CSV + sidecar) under the Overlay-1 conditions."""
    lab = {"name": "synthetic (tests/support/ops_synthetic.py)", "bottleneck_rate_mbps": 500, "rtt_ms": 128,
           "queue_bytes": 6_000_000}
    meta = ops_dataset.default_meta(lab, synthetic=True, seed=kwargs.get("seed", 0))
    return ops_dataset.write(Path(path), rows(**kwargs), meta)
