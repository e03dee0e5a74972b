"""Seed 003's metrics, from per-transfer times and per-interval bytes alike (the simulation's and
the lab replay's): average and maximum bounded slowdown per class (equations 2-3), peak and mean
throughput and the gap between them (section 5.4), and the coefficients of variation of
concurrency and throughput in 1-minute intervals (section 5.5, equations 5-6)."""

from __future__ import annotations

import math

import numpy as np

BIN_S = 60.0   # section 5.5's 1-minute intervals; peak and mean throughput use the same bins


def _avg_max(values: np.ndarray) -> tuple[float | None, float | None]:
    if len(values) == 0:
        return None, None
    return float(np.mean(values)), float(np.max(values))


def class_slowdowns(slowdown: np.ndarray, od: np.ndarray) -> dict:
    """Avg_BS and Max_BS of the OD and BE transfers and of all of them (None for an empty class)."""
    od = np.asarray(od, dtype=bool)
    out = {"transfers": {"od": int(od.sum()), "be": int((~od).sum())}}
    for name, mask in (("od", od), ("be", ~od), ("all", np.ones_like(od))):
        out[f"avg_bs_{name}"], out[f"max_bs_{name}"] = _avg_max(np.asarray(slowdown)[mask])
    return out


def rebin(delivered: np.ndarray, interval_s: float, bin_s: float = BIN_S) -> np.ndarray:
    """Bytes per bin from bytes per interval (bin_s a whole number of intervals; the last bin partial)."""
    per = max(1, round(bin_s / interval_s))
    padded = np.zeros(math.ceil(len(delivered) / per) * per)
    padded[:len(delivered)] = delivered
    return padded.reshape(-1, per).sum(axis=1)


def throughput_stats(delivered: np.ndarray, interval_s: float, bin_s: float = BIN_S) -> dict:
    """Peak and mean aggregate throughput (b/s) over bin_s bins from the origin to the last byte,
    the gap between them, and the throughput's coefficient of variation (equation 6)."""
    bins = rebin(np.asarray(delivered, dtype=float), interval_s, bin_s) * 8 / bin_s
    if len(bins) == 0 or bins.sum() == 0:
        return {"peak_bps": 0.0, "mean_bps": 0.0, "gap_bps": 0.0, "mean_to_peak": None, "cov_throughput": None}
    peak, mean = float(bins.max()), float(bins.mean())
    return {"peak_bps": peak, "mean_bps": mean, "gap_bps": peak - mean, "mean_to_peak": mean / peak,
            "cov_throughput": float(bins.std() / mean)}


def concurrency(begin_s: np.ndarray, end_s: np.ndarray, bin_s: float = BIN_S) -> np.ndarray:
    """Transfers active at some time in each bin (the paper's concurrency intervals), over the bins
    from the origin to the last end."""
    if len(begin_s) == 0:
        return np.zeros(0)
    nbins = max(1, math.ceil(float(np.max(end_s)) / bin_s))
    edges = np.arange(nbins + 1) * bin_s
    started = np.searchsorted(np.sort(begin_s), edges[1:], side="left")      # began before the bin's end
    ended = np.searchsorted(np.sort(end_s), edges[:-1], side="right")        # ended by the bin's start
    return (started - ended).astype(float)


def concurrency_cov(begin_s: np.ndarray, end_s: np.ndarray, bin_s: float = BIN_S) -> float | None:
    """Equation 5: the coefficient of variation of concurrency()."""
    counts = concurrency(begin_s, end_s, bin_s)
    mean = counts.mean() if len(counts) else 0.0
    return float(counts.std() / mean) if mean > 0 else None


def gap_change(gap_bps: float, baseline_gap_bps: float) -> float | None:
    """Relative change of the peak-mean gap against the baseline's (negative: the gap shrank)."""
    return (gap_bps - baseline_gap_bps) / baseline_gap_bps if baseline_gap_bps > 0 else None


def spread(begin_s: np.ndarray, end_s: np.ndarray, nbytes: np.ndarray, interval_s: float) -> np.ndarray:
    """Bytes per interval of transfers that moved at a steady rate from begin to end: the trace
    as logged (its own contention), for its peak, mean and CoV."""
    begin, end, nbytes = (np.asarray(a, dtype=float) for a in (begin_s, end_s, nbytes))
    end = np.maximum(end, begin + 1e-9)
    n = max(1, math.ceil(float(end.max(initial=0)) / interval_s))
    rate = nbytes / (end - begin)
    edges = np.arange(n + 1) * interval_s
    # cumulative bytes moved by each edge = sum over transfers of rate x overlap([begin, end], [0, edge])
    order_b, order_e = np.argsort(begin), np.argsort(end)
    # sum_i rate_i * (min(edge, end_i) - begin_i)^+ = [sum over begun] rate*(edge-begin) - [sum over ended] rate*(edge-end)
    rb, bb = rate[order_b], begin[order_b]
    re_, ee = rate[order_e], end[order_e]
    cb_rate, cb_rb = np.concatenate([[0], np.cumsum(rb)]), np.concatenate([[0], np.cumsum(rb * bb)])
    ce_rate, ce_re = np.concatenate([[0], np.cumsum(re_)]), np.concatenate([[0], np.cumsum(re_ * ee)])
    nb = np.searchsorted(bb, edges, side="right")
    ne = np.searchsorted(ee, edges, side="right")
    cum = (cb_rate[nb] * edges - cb_rb[nb]) - (ce_rate[ne] * edges - ce_re[ne])
    return np.diff(cum)
