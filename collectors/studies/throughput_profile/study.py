"""Seed 001's throughput-profile analysis, computed in one place for its two readers.

`longhaul analyze profile` (appliance/cli/analyze.py) prints or serialises it; the report's
section (section.py) draws it. Both start from the tidy trial table (analysis.load_trials for a run
directory or CSV, analysis.trials_from_store for an open store) and call analyse(), so a number in
the report is the number the CLI gives for the same run. transition_rtts() is what the regression
study follows across a suite's runs (collectors/studies/registry.py hands it over).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from longhaul.collectors.studies.throughput_profile import dynamics as dyn
from longhaul.collectors.studies.throughput_profile.analysis import (
    Config,
    Profile,
    Trial,
    build_profiles,
    capacity_of,
    distinct_rtts,
    trials_from_store,
)
from longhaul.collectors.studies.throughput_profile.transition_rtt import TransitionFit, fit_profiles


@dataclass
class ProfileAnalysis:
    """Profiles (section 2.2), their transition RTTs (2.3) and the traces' dynamics (section 4)."""

    trials: list[Trial]
    rtts_ms: list[float]                    # distinct RTTs, ascending
    profiles: dict[Config, Profile]         # ordered by variant, buffer, streams
    capacity_mbps: float                    # the scale of the sigmoid fits
    capacity_source: str                    # "given", "bottleneck rate" or "best profile mean"
    fits: dict[Config, TransitionFit]
    traces: list[dyn.TraceDynamics] | None  # every trial with a usable trace; None: not asked for
    missing_traces: int = 0                 # trials without one


def analyse(trials: list[Trial], capacity_mbps: float | None = None, dynamics: bool = True) -> ProfileAnalysis:
    """The whole analysis of a tidy trial table; capacity_mbps overrides the scale (capacity_of).

    dynamics=False skips the Poincare/Lyapunov part, which reads every trace: on a seed-001-sized
    sweep that is most of the time (bench/RESULTS-analysis.md).
    """
    profiles = build_profiles(trials)
    scale = capacity_of(trials, profiles, capacity_mbps)
    source = ("given" if capacity_mbps else
              "bottleneck rate" if any(t.capacity_mbps for t in trials) else "best profile mean")
    traces, missing = dyn.analyse_traces(trials) if dynamics else (None, 0)
    return ProfileAnalysis(trials=trials, rtts_ms=distinct_rtts(trials), profiles=profiles,
                           capacity_mbps=scale, capacity_source=source, fits=fit_profiles(profiles, scale),
                           traces=traces, missing_traces=missing)


def transition_rtts(store) -> dict[str, float]:
    """A stored run's transition RTT per transport configuration, as the regression study tracks it
    across a suite's runs ({"transition_rtt.cubic / 1 / large": ms}); {} for a run that is not an
    RTT sweep (fewer than 3 RTTs: no profile to fit)."""
    trials = trials_from_store(store)
    if len(distinct_rtts(trials)) < 3:
        return {}
    fits = analyse(trials, dynamics=False).fits
    return {f"transition_rtt.{config.label}": float(fit.tau_t_ms) for config, fit in fits.items()
            if fit is not None and math.isfinite(fit.tau_t_ms)}
