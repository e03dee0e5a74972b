"""Throughput dynamics (seed 001, section 4): Poincare maps and Lyapunov exponents of 1 s traces.

A trace X_0, X_1, ..., X_t (Mb/s, one per second, per stream or aggregate) is read as the orbit of
a Poincare map X_{i+1} = M(X_i) (section 4.1); its points are the pairs (X_i, X_{i+1}). The map's
Lyapunov exponent is L_M = ln |dM/dX|: negative means stable dynamics, positive means nearby
rates diverge in the next step (section 4.1, Figures 12-13).

dM/dX is estimated from the trace in two ways:

* per point, as the paper's secant of successive points,
      dM/dX ~ (X_{i+2} - X_{i+1}) / (X_{i+1} - X_i),
  the slope of M between X_i and X_{i+1} (Figure 13 plots these, one per point);
* per trace, from the nearest other state: for each X_i, the X_j closest to it gives
      dM/dX ~ (X_{j+1} - X_{i+1}) / (X_j - X_i),
  and the exponent is the mean of ln |dM/dX| over the trace. This is the textbook definition,
  "separation of trajectories that originate from nearby states", and it is needed because the mean
  of the successive-point values telescopes: (1/N) sum ln|d_{i+1}/d_i| = (ln|d_N| - ln|d_1|)/N,
  which tends to 0 for every bounded trace, chaotic or not. Both estimators give ln|a| exactly for
  a linear map X -> aX; the nearest-state one gives ln 2 for the logistic map at r = 4.

Zero differences: a zero denominator leaves dM/dX undefined (the two states coincide) and a zero
numerator gives ln 0 = -inf (M locally flat). Both points are left out of means and counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from longhaul.collectors.studies.throughput_profile.analysis import Trial, load_trace

REL_ZERO = 1e-9  # differences below this fraction of the trace's scale count as zero


@dataclass(frozen=True)
class Exponents:
    """Per-point Lyapunov estimates of one trace: L[k] belongs to state X[index[k]]."""

    index: np.ndarray
    values: np.ndarray
    undefined: int = 0    # zero denominator: coinciding states, no slope
    flat: int = 0         # zero numerator: ln 0, the map is flat there


@dataclass
class TraceDynamics:
    """What section 4 says about one trial: average throughput and its instability."""

    trial: Trial
    mean_mbps: float
    exponent: float                   # nearest-state mean ln|dM/dX| of the aggregate trace
    spread: float                     # std of the successive-point exponents (Figure 13's scatter)
    points: int                       # successive-point exponents that were defined
    stream_exponents: list[float] = field(default_factory=list)


def poincare(x) -> tuple[np.ndarray, np.ndarray]:
    """The Poincare map's points (X_i, X_{i+1}) of a trace (section 4.1, Figure 12)."""
    x = _clean(x)
    return x[:-1], x[1:]


def successive_exponents(x) -> Exponents:
    """ln |(X_{i+2} - X_{i+1}) / (X_{i+1} - X_i)| for every i (section 4.1, Figure 13)."""
    x = _clean(x)
    if x.size < 3:
        return Exponents(np.array([], dtype=int), np.array([]))
    d = np.diff(x)
    return _logs(np.arange(x.size - 2), d[1:], d[:-1], _zero(x))


def neighbour_exponents(x) -> Exponents:
    """ln |dM/dX| at each X_i from its nearest other state X_j: (X_{j+1} - X_{i+1}) / (X_j - X_i).

    States are sorted once, so the nearest one is a sorted neighbour: O(N log N) for any trace.
    """
    x = _clean(x)
    if x.size < 3:
        return Exponents(np.array([], dtype=int), np.array([]))
    state, image = x[:-1], x[1:]
    order = np.argsort(state, kind="stable")
    s = state[order]
    tol = _zero(x)
    gaps = np.diff(s)
    gaps = np.where(gaps <= tol, np.inf, gaps)          # equal states are no neighbours
    left = np.concatenate([[np.inf], gaps])
    right = np.concatenate([gaps, [np.inf]])
    pos = np.arange(s.size)
    other = np.where(left <= right, pos - 1, pos + 1)
    has = np.isfinite(np.minimum(left, right))
    i, j = order[pos[has]], order[other[has]]
    result = _logs(i, image[j] - image[i], state[j] - state[i], tol)
    return Exponents(result.index, result.values, result.undefined + int((~has).sum()), result.flat)


def lyapunov_exponent(x) -> float:
    """The trace's exponent: mean nearest-state ln|dM/dX| (NaN if no point is defined)."""
    values = neighbour_exponents(x).values
    return float(values.mean()) if values.size else math.nan


def trace_dynamics(trial: Trial) -> TraceDynamics | None:
    """Exponents of one trial's aggregate and per-stream traces; None without a trace."""
    trace = load_trace(trial)
    if trace is None or trace.aggregate.size < 3:
        return None
    succ = successive_exponents(trace.aggregate).values
    return TraceDynamics(
        trial=trial, mean_mbps=float(np.mean(trace.aggregate)),
        exponent=lyapunov_exponent(trace.aggregate),
        spread=float(succ.std()) if succ.size > 1 else math.nan, points=int(succ.size),
        stream_exponents=[lyapunov_exponent(v) for v in trace.streams.values()] if len(trace.streams) > 1 else [])


def analyse_traces(trials: list[Trial]) -> tuple[list[TraceDynamics], int]:
    """Dynamics of every trial that has a trace, and how many had none (or an unusable one)."""
    out, missing = [], 0
    for trial in trials:
        dyn = trace_dynamics(trial)
        if dyn is None:
            missing += 1
        else:
            out.append(dyn)
    return out, missing


def summarise(dynamics: list[TraceDynamics]) -> list[dict]:
    """Per (configuration, RTT): mean throughput and mean/std exponent over repeats (Figure 14)."""
    groups: dict[tuple, list[TraceDynamics]] = {}
    for d in dynamics:
        groups.setdefault((d.trial.config, d.trial.rtt_ms), []).append(d)
    rows = []
    for (config, rtt), items in sorted(groups.items(), key=lambda kv: (kv[0][0].sort_key(), kv[0][1])):
        exps = np.array([d.exponent for d in items if math.isfinite(d.exponent)])
        rows.append({"cca": config.cca, "streams": config.streams, "buffer": config.buffer, "rtt_ms": rtt,
                     "traces": len(items), "mean_mbps": float(np.mean([d.mean_mbps for d in items])),
                     "lyapunov_mean": float(exps.mean()) if exps.size else None,
                     "lyapunov_std": float(exps.std(ddof=1)) if exps.size > 1 else None})
    return rows


def throughput_vs_exponent(dynamics: list[TraceDynamics]) -> dict:
    """Figure 14's relation as one number: the Spearman rank correlation of exponent and throughput
    over traces (negative: more unstable traces carry less, as section 4.2 argues)."""
    pairs = np.array([(d.exponent, d.mean_mbps) for d in dynamics if math.isfinite(d.exponent)])
    if len(pairs) < 3:
        return {"traces": len(pairs), "spearman": None}
    ranks = np.argsort(np.argsort(pairs, axis=0), axis=0).astype(float)
    rho = np.corrcoef(ranks[:, 0], ranks[:, 1])[0, 1]
    return {"traces": len(pairs), "spearman": float(rho) if math.isfinite(rho) else None}


def _clean(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def _zero(x: np.ndarray) -> float:
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    return max(REL_ZERO * scale, 1e-300)


def _logs(index: np.ndarray, num: np.ndarray, den: np.ndarray, tol: float) -> Exponents:
    undefined = np.abs(den) <= tol
    flat = ~undefined & (np.abs(num) <= tol)
    ok = ~undefined & ~flat
    values = np.log(np.abs(num[ok])) - np.log(np.abs(den[ok]))
    return Exponents(index[ok], values, int(undefined.sum()), int(flat.sum()))
