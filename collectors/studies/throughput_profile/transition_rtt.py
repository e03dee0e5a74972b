"""Transition RTT between the concave and convex regions of a throughput profile (seed 001, 2.3).

The profile, scaled into (0, 1), is fitted by the concave-convex switch regression

    f(tau) = g_{a1,tau1}(tau) I(tau <= tauT) + g_{a2,tau2}(tau) I(tau >= tauT)

with the flipped sigmoid g_{a,tau'}(tau) = 1 - 1 / (1 + exp(-a (tau - tau'))). For a > 0, g is
concave left of its midpoint tau' and convex right of it, so the constraint tau2 <= tauT <= tau1
makes g1 concave on every RTT it fits and g2 convex on every RTT it fits. The parameters and tauT
minimise

    SSE = sum_{tau <= tauT} (y(tau) - g1(tau))^2 + sum_{tau >= tauT} (y(tau) - g2(tau))^2,

tauT being one of the measured RTTs (Figure 10 reports tauT on the RTT grid). As in Figure 9, an
entirely convex profile (tauT = the smallest RTT) gets only the convex fit; symmetrically an
entirely concave one (tauT = the largest RTT) gets only the concave fit, since a single point at
the far end would otherwise be forced under g2's midpoint.

Note what the constraint implies: g1 >= 1/2 wherever it applies and g2 <= 1/2, so the scale matters;
we scale by the bottleneck rate (the paper's connection capacity) when it is known.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

CLIP = 1e-3          # scaled throughput is kept inside (0, 1), as section 2.3 requires
GRID = 33            # starting grid per parameter: the SSE surface has flat valleys
TIE = 1e-9           # SSE differences below this are ties: the smaller tauT wins (a cautious claim)


@dataclass(frozen=True)
class SigmoidFit:
    a: float         # steepness, per ms
    tau: float       # midpoint, ms (tau1 for the concave part, tau2 for the convex part)
    sse: float       # this part's squared error on the scaled profile

    def __call__(self, rtt_ms):
        return flipped_sigmoid(rtt_ms, self.a, self.tau)


@dataclass(frozen=True)
class TransitionFit:
    tau_t_ms: float
    kind: str                     # "concave-convex", "convex" (entirely) or "concave" (entirely)
    concave: SigmoidFit | None
    convex: SigmoidFit | None
    sse: float
    scale_mbps: float             # the profile was divided by this
    rtt_ms: np.ndarray
    scaled: np.ndarray            # the scaled profile that was fitted

    def as_dict(self) -> dict:
        part = lambda f: None if f is None else {"a_per_ms": f.a, "tau_ms": f.tau, "sse": f.sse}  # noqa: E731
        return {"tau_t_ms": self.tau_t_ms, "kind": self.kind, "sse": self.sse,
                "scale_mbps": self.scale_mbps, "concave": part(self.concave), "convex": part(self.convex)}


def flipped_sigmoid(rtt_ms, a: float, tau: float):
    """g_{a,tau}(t) = 1 - 1/(1 + e^{-a(t - tau)}) = 1/(1 + e^{a(t - tau)}) (section 2.3)."""
    return expit(-a * (np.asarray(rtt_ms, dtype=float) - tau))


def scale_profile(mbps, scale_mbps: float) -> np.ndarray:
    """The scaled throughput tilde-Theta_O in (0, 1) of the SSE (section 2.3)."""
    return np.clip(np.asarray(mbps, dtype=float) / scale_mbps, CLIP, 1 - CLIP)


def fit_transition(rtt_ms, mbps, scale_mbps: float | None = None) -> TransitionFit:
    """Fit the sigmoid pair to one profile (mean throughput per RTT) and return tauT.

    scale_mbps: the rate that maps throughput into (0, 1), normally the bottleneck capacity;
    by default the profile's own maximum (then its best point sits just below 1).
    """
    t = np.asarray(rtt_ms, dtype=float)
    order = np.argsort(t)
    t, m = t[order], np.asarray(mbps, dtype=float)[order]
    keep = np.isfinite(t) & np.isfinite(m)
    t, m = t[keep], m[keep]
    if np.unique(t).size != t.size or t.size < 2:
        raise ValueError("a profile needs at least two distinct RTTs, each once (fit the means)")
    scale = float(scale_mbps) if scale_mbps else float(m.max()) or 1.0
    y = scale_profile(m, scale)
    bounds = _bounds(t)
    best = None
    for k in range(t.size):
        candidate = _candidate(t, y, k, bounds)
        if best is None or candidate[0] < best[0] - TIE:
            best = candidate
    sse, k, concave, convex = best
    kind = "convex" if concave is None else "concave" if convex is None else "concave-convex"
    return TransitionFit(float(t[k]), kind, concave, convex, float(sse), scale, t, y)


def _candidate(t, y, k: int, bounds: dict):
    """SSE and fits with tauT = t[k]; the end points are the one-sided (single-regime) fits."""
    last = t.size - 1
    concave = convex = None
    if k > 0:  # the concave part: RTTs up to tauT, midpoint tau1 >= tauT
        concave = fit_sigmoid(t[: k + 1], y[: k + 1], (t[k], bounds["tau_high"]), bounds["a"])
    if k < last:  # the convex part: RTTs from tauT, midpoint tau2 <= tauT
        convex = fit_sigmoid(t[k:], y[k:], (bounds["tau_low"], t[k]), bounds["a"])
    sse = sum(f.sse for f in (concave, convex) if f is not None)
    return sse, k, concave, convex


def _bounds(t: np.ndarray) -> dict:
    span = float(t[-1] - t[0]) or 1.0
    gap = float(np.diff(t).min()) if t.size > 1 else span
    # A transition sharper than 20 units of a over the finest RTT step is a step function already;
    # one flatter than 1e-3 over the whole span is a straight line. Beyond that the SSE is flat.
    return {"a": (1e-3 / span, 20.0 / max(gap, 1e-6)),
            "tau_low": float(t[0] - 5 * span), "tau_high": float(t[-1] + 5 * span)}


def fit_sigmoid(t, y, tau_bounds: tuple[float, float], a_bounds: tuple[float, float]) -> SigmoidFit:
    """Least-squares g_{a,tau} through (t, y) with tau in tau_bounds and a in a_bounds.

    A coarse grid over (log a, tau) finds the right valley (the problem is not convex), then a
    bounded trust-region least-squares refines it.
    """
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    lo, hi = tau_bounds
    la, ha = math.log(a_bounds[0]), math.log(a_bounds[1])
    taus = np.linspace(lo, hi, GRID)
    log_as = np.linspace(la, ha, GRID)
    grid = flipped_sigmoid(t[None, None, :] * 1.0, np.exp(log_as)[:, None, None], taus[None, :, None])
    sse = ((grid - y) ** 2).sum(axis=2)
    i, j = np.unravel_index(np.argmin(sse), sse.shape)
    start = np.array([log_as[i], taus[j]])
    best = (float(sse[i, j]), start)
    if hi > lo:  # a pinned midpoint (degenerate bounds) leaves nothing to refine
        res = least_squares(lambda p: flipped_sigmoid(t, math.exp(p[0]), p[1]) - y,
                            _inside(start, (la, lo), (ha, hi)), jac=lambda p: _jacobian(t, p),
                            bounds=([la, lo], [ha, hi]), method="trf", xtol=1e-10, ftol=1e-12)
        refined = float((res.fun ** 2).sum())
        if refined < best[0]:
            best = (refined, res.x)
    sse_best, (log_a, tau) = best
    return SigmoidFit(a=math.exp(log_a), tau=float(tau), sse=sse_best)


def _jacobian(t, p) -> np.ndarray:
    """d g / d(log a, tau): g = expit(z), z = -a (t - tau), dg/dz = g (1 - g)."""
    a = math.exp(p[0])
    g = flipped_sigmoid(t, a, p[1])
    dz = g * (1 - g)
    return np.column_stack([dz * -a * (t - p[1]), dz * a])


def _inside(x, low, high) -> np.ndarray:
    """least_squares wants a strictly feasible start; grid corners sit on the bounds."""
    low, high = np.array(low), np.array(high)
    margin = (high - low) * 1e-6
    return np.clip(x, low + margin, high - margin)


def fit_profiles(profiles: dict, scale_mbps: float) -> dict:
    """tauT of every profile (Figure 10): {config: TransitionFit}; profiles with < 2 RTTs are skipped."""
    out = {}
    for config, profile in profiles.items():
        if profile.rtt_ms.size >= 2:
            out[config] = fit_transition(profile.rtt_ms, profile.mean, scale_mbps)
    return out
