"""A synthetic transfer trace for a facility with no logs of its own, shaped like the paper's four
GridFTP traces (section 5.2, Figure 2, section 5.5).

What the paper gives, which generate() reproduces (how closely: the numbers at the end):
  - one day of transfers between two endpoints; aggregate throughput in 60 s bins (each transfer's
    bytes spread evenly over its runtime) with a mean 10-25 % of the peak (peaks 5.7-16 Gb/s,
    means 1.4-2.5 Gb/s, peak ~4x, 8x, 5x, 6x the mean);
  - coefficients of variation of concurrency and of throughput in 1-minute intervals of about
    0.6-1.1 (0.67/0.69 for trace 3, 0.87/1.07 for trace 4).
The paper does not give the traces themselves, so the model below is ours, chosen to be plausible
for a data transfer node, not fitted to data it never had:
  - sessions: a user submits a batch of files (a Globus task). Sessions arrive as a Poisson process
    whose rate follows the day (diurnal: a cosine, highest mid-afternoon). The number of files per
    session is heavy-tailed (1 + lognormal), so a few sessions hold most of the files;
  - file sizes are lognormal around a per-session median (users move files of a kind);
  - rates: each session has a per-transfer rate drawn lognormal (its path and storage), each file
    varies around it, bigger files a little faster (rate ~ size^0.3: per-file startup and TCP
    ramp-up are amortised); no transfer is faster than rate_cap of the peak;
  - a session runs 1 + Poisson(concurrency_mean) files at a time, each worker starting its next file
    a short gap after the last ends: the bursts of many overlapping files that make the peaks.
Calibration: the bytes are fixed first (mean_fraction * peak_gbps over the period; the number of
sessions follows from the mean files and size per session). Faster transfers crowd the same bytes
into shorter, more overlapping bursts, so the peak of the 60 s profile grows with the rates: one
factor on every rate is bisected until the peak is peak_gbps. Transfers still running at the end
of the period stretch the span a little, so mean/peak lands within about 0.015 (below, mostly) of
mean_fraction. Over 40 seeds of the defaults (a day, 10 Gb/s, 15 %): 17,000-22,000 transfers,
mean/peak 0.145-0.151, CoV of throughput 0.6-1.17 (median 0.99), of concurrency 0.44-1.14 (median
0.82, 90 % of seeds above 0.56). At 25 % the CoVs are lower (about 0.5-0.7, as smooth as the
paper's trace 3); at 10 % higher (about 0.8-1.5).
"""

from __future__ import annotations

import math

import numpy as np

from longhaul.collectors.studies.planning import metrics
from longhaul.collectors.studies.planning.trace import Trace, Transfer

BIN_S = metrics.BIN_S
DAY_S = 86400.0


def stats(trace: Trace, bin_s: float = BIN_S) -> dict:
    """The paper's numbers for a trace: mean and peak Gb/s in bins, their ratio, the two CoVs."""
    start, seconds, nbytes = trace.arrays()
    gbps = metrics.spread(start, start + seconds, nbytes, bin_s) * 8 / bin_s / 1e9
    mean, peak = float(gbps.mean()), float(gbps.max())
    return {"transfers": len(trace.transfers), "bytes": float(nbytes.sum()), "mean_gbps": mean, "peak_gbps": peak,
            "mean_fraction": mean / peak if peak else 0.0,
            "cov_throughput": float(gbps.std() / mean) if mean else 0.0,
            "cov_concurrency": metrics.concurrency_cov(start, start + seconds, bin_s) or 0.0}


def _session_starts(rng: np.random.Generator, n: int, period_s: float, diurnal: float, busiest_hour: float) -> np.ndarray:
    """n times in [0, period_s) with density 1 + diurnal*cos(time of day - busiest hour), by rejection."""
    out = np.empty(0)
    while len(out) < n:
        t = rng.uniform(0.0, period_s, 2 * n + 16)
        w = (1 + diurnal * np.cos(2 * np.pi * (t / DAY_S - busiest_hour / 24))) / (1 + diurnal)
        out = np.concatenate([out, t[rng.uniform(size=len(t)) < w]])
    return out[:n]


def generate(seed: int = 0, hours: float = 24, peak_gbps: float = 10.0, mean_fraction: float = 0.15, *,
             file_mb: float = 300.0, files_per_session: float = 8.0, concurrency_mean: float = 2.0,
             rate_cap: float = 0.25, diurnal: float = 0.6, busiest_hour: float = 15.0) -> Trace:
    """A trace of `hours` whose 60 s throughput peaks at peak_gbps with a mean of mean_fraction of
    it (the module docstring has the model). file_mb: median file size of a typical session;
    files_per_session: median files per session (the mean is about 2.4x: heavy tail);
    concurrency_mean: files a session runs at once, beyond the first; rate_cap: the fastest a
    single transfer may go, as a fraction of the peak; diurnal: the day's swing in session
    arrivals (0: none; 0.6: the busiest hour has 4x the sessions of the quietest), busiest at
    busiest_hour of trace time (0 is midnight). Same arguments, same trace."""
    if not 0 < mean_fraction < 1:
        raise ValueError("mean_fraction must be between 0 and 1")
    if hours <= 0 or peak_gbps <= 0 or not 0 < rate_cap <= 1:
        raise ValueError("hours, peak_gbps and rate_cap must be positive (rate_cap at most 1)")
    rng = np.random.default_rng(seed)
    period = hours * 3600.0
    files_sigma, session_size_sigma, size_sigma, session_rate_sigma, rate_sigma = 1.3, 1.2, 0.8, 0.8, 0.3
    total = mean_fraction * peak_gbps * 1e9 / 8 * period          # bytes, so the mean is mean_fraction
    mean_files = 0.5 + files_per_session * math.exp(files_sigma ** 2 / 2)
    mean_size = file_mb * 1e6 * math.exp((session_size_sigma ** 2 + size_sigma ** 2) / 2)
    n_sess = max(1, round(total / (mean_files * mean_size)))

    t0 = _session_starts(rng, n_sess, period, diurnal, busiest_hour)
    nfiles = 1 + np.floor(rng.lognormal(math.log(files_per_session), files_sigma, n_sess)).astype(np.int64)
    session_size = rng.lognormal(math.log(file_mb * 1e6), session_size_sigma, n_sess)
    session_rate = rng.lognormal(0.0, session_rate_sigma, n_sess)       # relative; scaled below
    workers = 1 + rng.poisson(concurrency_mean, n_sess)
    sess = np.repeat(np.arange(n_sess), nfiles)
    j = np.arange(len(sess)) - np.repeat(np.cumsum(nfiles) - nfiles, nfiles)    # file index in its session
    size = np.maximum(rng.lognormal(np.log(session_size[sess]), size_sigma), 1.0)
    size *= total / size.sum()
    # bigger files go faster (per-file startup and TCP ramp-up are amortised)
    rel_rate = session_rate[sess] * (size / (file_mb * 1e6)) ** 0.3 * rng.lognormal(0.0, rate_sigma, len(sess))
    gap = rng.exponential(2.0, len(sess))          # s between a worker's files (listing, checksums)
    worker = j % workers[sess]

    # each worker runs its files back to back: a file starts after the ones before it on its worker
    order = np.lexsort((j, worker, sess))
    key = sess[order] * (int(workers.max()) + 1) + worker[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
    cap = rate_cap * peak_gbps * 1e9 / 8

    def build(scale: float) -> tuple[np.ndarray, np.ndarray]:
        seconds = size / np.minimum(rel_rate * scale, cap)
        step = (seconds + gap)[order]
        done = np.cumsum(step)
        before = done - step - (done[group_start] - step[group_start])
        start = np.empty(len(sess))
        start[order] = t0[sess[order]] + before
        # a session still running at the end of the period goes on from its start: the period is
        # one turn of a steady cycle, as a day's log holds the tails of the day before's sessions
        return np.mod(start, period), seconds

    def peak(scale: float) -> float:
        start, seconds = build(scale)
        return float(metrics.spread(start, start + seconds, size, BIN_S).max()) * 8 / BIN_S / 1e9

    # faster transfers crowd the same bytes into shorter bursts: the peak grows with the rate scale
    lo, hi = math.log(1e4), math.log(1e12)         # bytes/s of a median session
    for _ in range(20):                             # to 2e-5 of the scale: the peak to about 1e-4
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if peak(math.exp(mid)) < peak_gbps else (lo, mid)
    scale = math.exp((lo + hi) / 2)
    start, seconds = build(scale)

    idx = np.argsort(start, kind="stable")
    columns = (np.round(start[idx], 6).tolist(), np.round(seconds[idx], 6).tolist(),
               np.maximum(np.round(size[idx]), 1).astype(np.int64).tolist())
    transfers = [Transfer(s, d, b, None, f"synthetic:{i}") for i, (s, d, b) in enumerate(zip(*columns), 1)]
    params = {"model": "sessions", "seed": seed, "hours": hours, "peak_gbps": peak_gbps,
              "mean_fraction": mean_fraction, "file_mb": file_mb, "files_per_session": files_per_session,
              "concurrency_mean": concurrency_mean, "rate_cap": rate_cap, "diurnal": diurnal,
              "busiest_hour": busiest_hour, "sessions": n_sess, "median_session_rate_gbps": scale * 8 / 1e9}
    return Trace(transfers, origin=None, name=f"synthetic-{seed}", sources=["synthetic"], generator=params)
