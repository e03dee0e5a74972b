"""Seed 002's second fairness test (sections VI.B, VII.C-D): bandwidth appropriated from 5 competing
single TCP streams, and the companion numbers its Table III and Figure 4 report.

The test: a transfer method (1 unmodified stream = the baseline, or N parallel or combined streams)
runs for 4 minutes against 5 unmodified single TCP streams on the same bottleneck. Per run, Iperf
gives each competing stream's throughput; their sum is the run's *competing aggregate* (Figure 4's
bars are the median of it over runs: 75.3 Mb/s against the baseline single stream).

Appropriation (our reading, the paper prints no formula) is the relative drop of the competing
aggregate from the baseline, in percent:

    appropriation = (B - A) / B * 100

B = median competing aggregate against one unmodified stream, A = the same against the method.
Why relative to B, not to the link (percent of M = 100 Mb/s): the paper says "a decrease in the
aggregate throughput of the competing TCP streams indicates ... stealing bandwidth" and gives only
B = 75.3 Mb/s as the reference. With (B - A)/B, the implied A plus the method's own Table III
throughput totals 90.9-93.0 Mb/s for all five printed cases, close to the baseline's 75.3 + 15.65
= 90.95 Mb/s, as a full link should. Read as percent of the link, Parallel 9 would leave the 5
streams 17.3 Mb/s and the link only 78.6 Mb/s used by 14 streams, which is implausible.

Units: throughputs in Mb/s, bytes in bytes, percentages as 0-100.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def _rate(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number in Mb/s, not {value!r}")  # noqa: TRY004 - one error type
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite rate >= 0 Mb/s, not {value!r}")
    return x


def aggregate_mbps(per_stream_mbps: Sequence[float]) -> float:
    """One run's competing aggregate: the sum of the competing streams' throughputs (Mb/s)."""
    if isinstance(per_stream_mbps, (str, bytes)) or not isinstance(per_stream_mbps, Iterable):
        raise ValueError(f"per_stream_mbps must be a sequence of Mb/s, not {per_stream_mbps!r}")  # noqa: TRY004
    rates = [_rate("stream throughput", r) for r in per_stream_mbps]
    if not rates:
        raise ValueError("a run needs at least one competing stream")
    return float(sum(rates))


def median_aggregate_mbps(runs: Iterable[Sequence[float]]) -> float:
    """Median over runs of the per-run competing aggregate (Mb/s): a Figure 4 bar, e.g. 75.3."""
    aggregates = [aggregate_mbps(run) for run in runs]
    if not aggregates:
        raise ValueError("no runs")
    return float(np.median(aggregates))


def appropriation_pct(baseline_aggregate_mbps: float, competing_aggregate_mbps: float) -> float:
    """Bandwidth appropriated from the competing streams, % of the baseline: (B - A) / B * 100.

    baseline_aggregate_mbps (B): median competing aggregate against one unmodified stream (Mb/s).
    competing_aggregate_mbps (A): the same against the method under test (Mb/s).
    Negative when the competitors did better than against the baseline (the method took less than
    a single stream); kept signed, since that is a measurement, not an error.
    """
    base = _rate("baseline_aggregate_mbps", baseline_aggregate_mbps)
    if base == 0:
        raise ValueError("baseline_aggregate_mbps must be > 0")
    return (base - _rate("competing_aggregate_mbps", competing_aggregate_mbps)) / base * 100.0


def competing_aggregate_from_pct(baseline_aggregate_mbps: float, appropriation: float) -> float:
    """Inverse of `appropriation_pct`: the competing aggregate A (Mb/s) = B (1 - appropriation/100).

    Recovers the unprinted Figure 4 bars from the text: 75.3 Mb/s and 38.7% give 46.16 Mb/s.
    """
    base = _rate("baseline_aggregate_mbps", baseline_aggregate_mbps)
    pct = float(appropriation)
    if not math.isfinite(pct) or pct > 100:
        raise ValueError(f"appropriation must be a finite percentage <= 100, not {appropriation!r}")
    return base * (1.0 - pct / 100.0)


@dataclass(frozen=True)
class CrossTrafficResult:
    """One method in the 5-cross test, medians over runs.

    throughput_mbps, measured_bytes: the method's own transfer (Table III "Throughput Mb/sec",
    "Measured MB"); competing_mbps: the 5 streams' aggregate (Figure 4 bar);
    baseline_competing_mbps: B; appropriation_pct: (B - A)/B * 100; total_mbps: method + competitors
    (how full the bottleneck was); runs: number of runs.
    """

    throughput_mbps: float
    measured_bytes: float
    competing_mbps: float
    baseline_competing_mbps: float
    appropriation_pct: float
    total_mbps: float
    runs: int


def cross_traffic_result(method_mbps: Sequence[float], method_bytes: Sequence[float],
                         competing_runs: Sequence[Sequence[float]],
                         baseline_competing_runs: Sequence[Sequence[float]] | float) -> CrossTrafficResult:
    """Summarise a method's runs against 5 competing streams, as the paper reports them.

    method_mbps[i], method_bytes[i]: the method's aggregate throughput (Mb/s, all its streams) and
    bytes moved in run i; competing_runs[i]: per-stream Mb/s of the competing streams in run i;
    baseline_competing_runs: per-run per-stream Mb/s of the competitors when the method was one
    unmodified stream, or directly B in Mb/s (e.g. the paper's 75.3). Each figure is the median
    over runs, separately (as the paper's medians are: its Throughput and Measured MB columns do
    not come from the same run).
    """
    rates = [_rate("method_mbps", r) for r in method_mbps]
    sizes = [_rate("method_bytes", b) for b in method_bytes]
    runs = list(competing_runs)
    if not rates or not (len(rates) == len(sizes) == len(runs)):
        raise ValueError(f"need one throughput, byte count and competitor list per run, got "
                         f"{len(rates)}, {len(sizes)}, {len(runs)}")
    if isinstance(baseline_competing_runs, (int, float)):
        base = _rate("baseline_competing_runs", baseline_competing_runs)
    else:
        base = median_aggregate_mbps(baseline_competing_runs)
    competing = median_aggregate_mbps(runs)
    throughput = float(np.median(rates))
    return CrossTrafficResult(throughput, float(np.median(sizes)), competing, base,
                              appropriation_pct(base, competing), throughput + competing, len(rates))


def parallel_share(n_streams: int, k_competing: int) -> float:
    """Fraction of the bottleneck an application with N parallel streams gets against k single
    streams, N / (N + k), as section III quotes from the authors' earlier work [22]."""
    n, k = _count("n_streams", n_streams), _count("k_competing", k_competing, allow_zero=True)
    return n / (n + k)


def predicted_appropriation_pct(n_streams: int, k_competing: int = 5, baseline_streams: int = 1) -> float:
    """Appropriation predicted by the N/(N+k) share (ours, not printed by the paper).

    The k competitors hold k/(N+k) against N streams and k/(1+k) against the baseline stream, so
    appropriation = (1 - (k/(N+k)) / (k/(1+k))) * 100. For k = 5: 40.0% for N = 5 and 57.1% for
    N = 9, against the measured 38.7% and 58% for unmodified parallel streams (section VII.C).
    Combined streams are meant to fall well below this (measured 6.2% and 17.5%).
    """
    k = _count("k_competing", k_competing)
    ours = k / (_count("n_streams", n_streams) + k)
    base = k / (_count("baseline_streams", baseline_streams) + k)
    return (1.0 - ours / base) * 100.0


def _count(name: str, value, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (0 if allow_zero else 1):
        raise ValueError(f"{name} must be an integer >= {0 if allow_zero else 1}, not {value!r}")
    return int(value)
