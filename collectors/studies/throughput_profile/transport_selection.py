"""Transport selection for a connection's RTT (seed 001, section 5).

Section 5.1: determine the RTT to the destination (ping), then pick the configuration (V, n, B)
whose throughput profile is highest at that RTT, using the measurements at that RTT when there are
any and linearly interpolating the profile means between the measured RTTs otherwise. The estimate
is the profile mean Theta_hat_O(tau) of section 5.2 (the mean of the measurements at each tau_k,
linearly interpolated between them), which that section shows converges to the best estimator of
the expected throughput whatever the distribution of the measurements.

The confidence statement comes from the spread of the measurements behind the estimate: a
t-interval for the interpolated mean (the standard errors at the two bracketing RTTs combined with
the interpolation weights), the range single transfers actually covered (10th-90th percentile,
interpolated the same way), and whether the runner-up is distinguishable from the choice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from longhaul.collectors.studies.throughput_profile.analysis import Config, Profile, buffer_rank

LEVEL = 0.95
CLEAR_MARGIN = 2.0  # standard errors between best and runner-up to call the choice clear


@dataclass(frozen=True)
class Estimate:
    config: Config
    rtt_ms: float
    expected_mbps: float
    se_mbps: float | None         # standard error of the interpolated mean (None: one trial)
    ci_mbps: tuple[float, float] | None
    p10_mbps: float
    p90_mbps: float
    n_trials: int                 # measurements behind the estimate (both bracketing RTTs)
    bracket_ms: tuple[float, float]
    in_range: bool                # False: the RTT is outside the measured ones (nearest end used)

    def as_dict(self) -> dict:
        return {"cca": self.config.cca, "streams": self.config.streams, "buffer": self.config.buffer,
                "expected_mbps": self.expected_mbps, "se_mbps": self.se_mbps,
                "ci95_mbps": list(self.ci_mbps) if self.ci_mbps else None,
                "p10_mbps": self.p10_mbps, "p90_mbps": self.p90_mbps, "n_trials": self.n_trials,
                "bracket_rtt_ms": list(self.bracket_ms), "in_range": self.in_range}


@dataclass(frozen=True)
class Selection:
    rtt_ms: float
    best: Estimate
    runner_up: Estimate | None
    ranking: list[Estimate]
    margin_se: float | None       # (best - runner-up) in standard errors of the difference
    clear: bool | None            # margin >= CLEAR_MARGIN standard errors
    statement: str

    def as_dict(self, top: int = 5) -> dict:
        return {"rtt_ms": self.rtt_ms, **self.best.as_dict(),
                "runner_up": self.runner_up.as_dict() if self.runner_up else None,
                "margin_mbps": self.best.expected_mbps - self.runner_up.expected_mbps if self.runner_up else None,
                "margin_se": self.margin_se, "clear_choice": self.clear, "confidence": self.statement,
                "ranking": [e.as_dict() for e in self.ranking[:top]]}


def interpolate(profile: Profile, rtt_ms: float) -> Estimate:
    """Theta_hat_O at rtt_ms: the profile mean, linear between the bracketing measured RTTs."""
    r = profile.rtt_ms
    mean, std, n = profile.mean, profile.std, profile.n
    p10 = np.array([np.percentile(s, 10) for s in profile.samples])
    p90 = np.array([np.percentile(s, 90) for s in profile.samples])
    in_range = bool(r[0] <= rtt_ms <= r[-1])
    hi = int(np.clip(np.searchsorted(r, rtt_ms), 0, r.size - 1))
    lo = hi if r[hi] == rtt_ms or hi == 0 else hi - 1
    if not in_range:  # outside the measurements: the nearest end, flagged, never extrapolated
        lo = hi = 0 if rtt_ms < r[0] else r.size - 1
    w = 0.0 if hi == lo else (rtt_ms - r[lo]) / (r[hi] - r[lo])
    weights = {lo: 1 - w} if hi == lo else {lo: 1 - w, hi: w}
    at = lambda v: float(sum(wt * v[k] for k, wt in weights.items()))  # noqa: E731
    trials = int(sum(n[k] for k in weights))
    se = ci = None
    if all(n[k] > 1 for k in weights):
        se = math.sqrt(sum((wt * std[k]) ** 2 / n[k] for k, wt in weights.items()))
        df = sum(int(n[k]) - 1 for k in weights)
        half = float(student_t.ppf(0.5 + LEVEL / 2, df)) * se
        ci = (at(mean) - half, at(mean) + half)
    return Estimate(profile.config, float(rtt_ms), at(mean), se, ci, at(p10), at(p90), trials,
                    (float(r[lo]), float(r[hi])), in_range)


def rank(profiles: dict[Config, Profile], rtt_ms: float, ccas=None, buffers=None,
         max_streams: int | None = None) -> list[Estimate]:
    """Every eligible configuration's estimate at rtt_ms, best first.

    Ties go to fewer streams, then the smaller buffer: the cheaper configuration for the same rate.
    Configurations measured around the RTT rank before ones only measured on one side of it.
    """
    out = [interpolate(p, rtt_ms) for c, p in profiles.items()
           if (not ccas or c.cca in ccas) and (not buffers or c.buffer in buffers)
           and (max_streams is None or c.streams <= max_streams)]
    return sorted(out, key=lambda e: (not e.in_range, -round(e.expected_mbps, 9), e.config.streams,
                                      buffer_rank(e.config.buffer), e.config.cca))


def select(profiles: dict[Config, Profile], rtt_ms: float, **filters) -> Selection:
    """Section 5.1 step 2: the configuration with the highest profile mean at rtt_ms."""
    ranking = rank(profiles, rtt_ms, **filters)
    if not ranking:
        raise ValueError("no measured configuration matches the filters")
    best = ranking[0]
    runner = ranking[1] if len(ranking) > 1 else None
    margin = None
    if runner and best.se_mbps is not None and runner.se_mbps is not None:
        spread = math.hypot(best.se_mbps, runner.se_mbps)
        margin = (best.expected_mbps - runner.expected_mbps) / spread if spread > 0 else math.inf
    clear = None if margin is None else margin >= CLEAR_MARGIN
    return Selection(float(rtt_ms), best, runner, ranking, margin, clear, statement(best, runner, margin))


def selection_table(profiles: dict[Config, Profile], rtts: list[float], **filters) -> list[Selection]:
    return [select(profiles, r, **filters) for r in rtts]


def table_rtts(measured: list[float]) -> list[float]:
    """The report's selection rows: every measured RTT and the midpoint of each gap (interpolated)."""
    measured = sorted(measured)
    mids = [round((a + b) / 2, 2) for a, b in zip(measured, measured[1:])]
    return sorted(set(measured) | set(mids))


def describe(config: Config) -> str:
    streams = "1 stream" if config.streams == 1 else f"{config.streams} streams"
    return f"{config.cca}, {streams}, {config.buffer} buffer"


def statement(best: Estimate, runner: Estimate | None, margin: float | None) -> str:
    """One paragraph a facility engineer can act on."""
    lo, hi = best.bracket_ms
    where = (f"measured at {lo:g} ms" if lo == hi and best.in_range else
             f"interpolated between {lo:g} and {hi:g} ms" if best.in_range else
             f"OUTSIDE the measured RTTs: the nearest measured RTT ({lo:g} ms) is used, so treat the "
             f"number as {'optimistic' if best.rtt_ms > hi else 'approximate'}")
    text = [f"{describe(best.config)}: expected {best.expected_mbps:.0f} Mb/s at {best.rtt_ms:g} ms "
            f"({where}; {best.n_trials} trial{'s' * (best.n_trials != 1)})."]
    if best.ci_mbps:
        text.append(f"{LEVEL:.0%} confidence interval of the mean: {best.ci_mbps[0]:.0f}-{best.ci_mbps[1]:.0f} Mb/s; "
                    f"single transfers ranged {best.p10_mbps:.0f}-{best.p90_mbps:.0f} Mb/s (10th-90th percentile).")
    else:
        text.append("Only one trial per RTT: no spread, so no confidence interval; repeat the sweep.")
    if runner is not None:
        gap = best.expected_mbps - runner.expected_mbps
        verdict = ("" if margin is None else
                   f" {'Clearly better' if margin >= CLEAR_MARGIN else 'Not distinguishable from it'}"
                   f" ({margin:.1f} standard errors apart).")
        text.append(f"Runner-up {describe(runner.config)}: {runner.expected_mbps:.0f} Mb/s "
                    f"({gap:.0f} Mb/s lower).{verdict}")
    return " ".join(text)
