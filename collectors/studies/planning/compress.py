"""A testbed trace from a facility trace, as seed 003 derived trace5 from trace2 (section 6.2).

1. Thin: the transfers (in start order) in sequential chunks of `keep_one_in` (the paper: 12);
   one transfer of each chunk chosen at random (a seeded numpy Generator), the last, partial
   chunk included, so about 1/k of the transfers remain and the demand keeps its shape over the
   day.
2. Compress time: every start time x `time_factor` = span_s / period_s (the paper: 2 h / 24 h),
   so a transfer that started half-way through the original period starts half-way through the
   new one. Each transfer keeps its duration and its throughput ("the same duration and
   throughput as in trace2").
3. Scale rates: every transfer's throughput x `rate_factor` (the paper: 1/10, the testbed's
   bottleneck over the compressed trace's peak demand; `rate_factor_for` computes it). The
   durations stay, so the bytes scale: a transfer's trace runtime, the reference of its
   slowdown, is the same in the compressed trace as in the original, and the load over time keeps
   its shape at the lab's scale.

Pure: the same trace, parameters and seed give the same result. The new Trace's `generator`
records what was done (and the original trace's own generator, if any).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from longhaul.collectors.studies.planning.metrics import spread
from longhaul.collectors.studies.planning.trace import Trace, TraceError

PAPER_KEEP_ONE_IN = 12
PAPER_TIME_FACTOR = 2 / 24
PAPER_RATE_FACTOR = 1 / 10
COMPRESSION = "compress/1"      # names the `generator` record's layout
PEAK_INTERVAL_S = 1.0


def thin(n: int, keep_one_in: int, rng: np.random.Generator) -> np.ndarray:
    """Indices (ascending) of one transfer of each sequential chunk of keep_one_in."""
    if keep_one_in < 1:
        raise ValueError("keep_one_in must be at least 1")
    starts = np.arange(0, n, keep_one_in)
    sizes = np.minimum(keep_one_in, n - starts)
    return starts + (rng.random(len(starts)) * sizes).astype(np.int64)


def peak_demand_bps(trace: Trace, interval_s: float = PEAK_INTERVAL_S) -> float:
    """The trace's peak aggregate demand as logged: each transfer at its own rate from its start
    to its end, summed over interval_s intervals."""
    if not trace.transfers:
        return 0.0
    start, seconds, nbytes = trace.arrays()
    delivered = spread(start, start + seconds, nbytes, interval_s)
    return float(delivered.max(initial=0.0)) * 8 / interval_s


def rate_factor_for(trace: Trace, capacity_bps: float, interval_s: float = PEAK_INTERVAL_S) -> float:
    """capacity / peak demand: the factor that makes the trace's peak fill the lab's bottleneck
    (the paper's 1/10 for its 0.5 Gb/s server link)."""
    peak = peak_demand_bps(trace, interval_s)
    if peak <= 0:
        raise TraceError("the trace has no demand to scale")
    return capacity_bps / peak


def compress(trace: Trace, *, keep_one_in: int = PAPER_KEEP_ONE_IN, span_s: float | None = None,
             period_s: float | None = None, time_factor: float | None = None,
             rate_factor: float = 1.0, seed: int = 1) -> Trace:
    """The testbed trace: thinned to one in keep_one_in, start times x time_factor, rates (bytes,
    at kept durations) x rate_factor.

    time_factor: given, or span_s / period_s, period_s defaulting to the trace's span (origin to
    the last end; a day's log gives about 24 h); neither given: times are kept. The compressed
    trace's origin is the original's (instants are no longer wall-clock times; the generator
    says so)."""
    if not trace.transfers:
        raise TraceError(f"{trace.name}: no transfer to compress")
    if time_factor is None:
        if span_s is None:
            time_factor = 1.0
        else:
            period = period_s if period_s is not None else trace.span_s()
            if period <= 0:
                raise ValueError("the trace's period must be positive")
            time_factor = span_s / period
    if time_factor <= 0 or rate_factor <= 0:
        raise ValueError("time_factor and rate_factor must be positive")
    rng = np.random.default_rng(seed)
    kept = thin(len(trace.transfers), keep_one_in, rng)
    transfers = [replace(t, start_s=t.start_s * time_factor, nbytes=max(1, round(t.nbytes * rate_factor)))
                 for t in (trace.transfers[i] for i in kept)]
    generator = {"kind": COMPRESSION, "keep_one_in": keep_one_in, "time_factor": time_factor,
                 "rate_factor": rate_factor, "seed": seed, "transfers_in": len(trace.transfers),
                 "transfers_out": len(transfers), "durations": "kept", "bytes": "scaled by rate_factor",
                 "from": {"name": trace.name, "generator": trace.generator}}
    return Trace(transfers=transfers, origin=trace.origin, name=f"{trace.name}-compressed", problems=[],
                 sources=list(trace.sources), generator=generator)
