"""Transition RTT (seed 001 section 2.3): the sigmoid-pair fit recovers a known tauT."""
from __future__ import annotations

import numpy as np
import pytest

from longhaul.collectors.studies.throughput_profile.analysis import Config, Profile
from longhaul.collectors.studies.throughput_profile.transition_rtt import (
    fit_profiles,
    fit_transition,
    flipped_sigmoid,
    scale_profile,
)

PAPER_RTTS = np.array([0.4, 11.8, 22.6, 45.6, 91.6, 183.0, 366.0])
CAPACITY = 10_000.0


def two_sigmoids(tau_t: float, a1: float, tau1: float, a2: float, tau2: float) -> np.ndarray:
    """A scaled profile made of the concave g1 up to tauT and the convex g2 beyond (eq. of 2.3)."""
    return np.where(PAPER_RTTS <= tau_t, flipped_sigmoid(PAPER_RTTS, a1, tau1),
                    flipped_sigmoid(PAPER_RTTS, a2, tau2))


def step(found: float, true: float) -> int:
    """How many RTT steps of the suite apart two RTTs are."""
    idx = list(PAPER_RTTS)
    return abs(idx.index(found) - idx.index(true))


def test_flipped_sigmoid_is_the_papers_g():
    assert flipped_sigmoid(50.0, 0.1, 50.0) == pytest.approx(0.5)
    t = 20.0
    assert flipped_sigmoid(t, 0.1, 50.0) == pytest.approx(1 - 1 / (1 + np.exp(-0.1 * (t - 50.0))))
    assert flipped_sigmoid(-1e3, 0.1, 50.0) == pytest.approx(1.0)
    assert flipped_sigmoid(1e4, 0.1, 50.0) == pytest.approx(0.0)


@pytest.mark.parametrize("tau_t", [11.8, 22.6, 45.6, 91.6, 183.0])
def test_continuous_pair_recovers_tau_t_exactly(tau_t):
    # Continuity at tauT with tau2 <= tauT <= tau1 forces both midpoints onto tauT.
    y = two_sigmoids(tau_t, 3.0 / tau_t, tau_t, 0.03, tau_t)
    fit = fit_transition(PAPER_RTTS, y * CAPACITY, CAPACITY)
    assert fit.tau_t_ms == tau_t
    assert fit.kind == "concave-convex"
    assert fit.sse < 1e-6
    assert fit.convex.tau <= fit.tau_t_ms <= fit.concave.tau


@pytest.mark.parametrize("tau_t,params", [
    (45.6, (0.01, 150.0, 0.03, 40.0)),
    (91.6, (0.008, 250.0, 0.02, 80.0)),
    (183.0, (0.005, 400.0, 0.02, 150.0)),
    (11.8, (0.05, 60.0, 0.03, 5.0)),
])
def test_discontinuous_pair_recovered_within_one_step(tau_t, params):
    fit = fit_transition(PAPER_RTTS, two_sigmoids(tau_t, *params) * CAPACITY, CAPACITY)
    assert step(fit.tau_t_ms, tau_t) <= 1
    assert fit.convex.tau <= fit.tau_t_ms <= fit.concave.tau


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("tau_t", [22.6, 91.6])
def test_noisy_profile_recovered_within_one_step(seed, tau_t):
    rng = np.random.default_rng(seed)
    y = two_sigmoids(tau_t, 3.0 / tau_t, tau_t, 0.03, tau_t) + rng.normal(0, 0.015, PAPER_RTTS.size)
    fit = fit_transition(PAPER_RTTS, np.clip(y, 0.01, 0.99) * CAPACITY, CAPACITY)
    assert step(fit.tau_t_ms, tau_t) <= 1


def test_entirely_convex_profile_gets_only_the_convex_fit():
    y = flipped_sigmoid(PAPER_RTTS, 0.02, -10.0)  # below one half everywhere, as Fig. 9's default buffer
    fit = fit_transition(PAPER_RTTS, y * CAPACITY, CAPACITY)
    assert fit.kind == "convex"
    assert fit.concave is None and fit.convex is not None
    assert fit.tau_t_ms == PAPER_RTTS[0]
    assert fit.convex.tau <= PAPER_RTTS[0]
    assert fit.sse < 1e-6


def test_entirely_concave_profile_gets_only_the_concave_fit():
    y = flipped_sigmoid(PAPER_RTTS, 0.004, 500.0)  # stays high up to 366 ms
    fit = fit_transition(PAPER_RTTS, y * CAPACITY, CAPACITY)
    assert fit.kind == "concave"
    assert fit.convex is None
    assert fit.tau_t_ms == PAPER_RTTS[-1]


def test_scaled_throughput_stays_inside_zero_one():
    y = scale_profile([0.0, 500.0, 1000.0, 1200.0], 1000.0)
    assert np.all((y > 0) & (y < 1))
    assert y[1] == pytest.approx(0.5)


def test_default_scale_is_the_profiles_maximum_and_order_does_not_matter():
    y = two_sigmoids(45.6, 3.0 / 45.6, 45.6, 0.03, 45.6)
    shuffled = np.array([3, 0, 6, 1, 5, 2, 4])
    fit = fit_transition(PAPER_RTTS[shuffled], (y * 800)[shuffled])
    assert fit.scale_mbps == pytest.approx(800 * y.max())
    assert list(fit.rtt_ms) == sorted(PAPER_RTTS)


def test_needs_two_distinct_rtts():
    with pytest.raises(ValueError):
        fit_transition([10.0], [500.0], 1000.0)
    with pytest.raises(ValueError):
        fit_transition([10.0, 10.0], [500.0, 400.0], 1000.0)


def test_fit_profiles_covers_every_configuration():
    y = two_sigmoids(91.6, 3.0 / 91.6, 91.6, 0.03, 91.6) * CAPACITY
    profiles = {Config("cubic", n, "large"): Profile(Config("cubic", n, "large"), PAPER_RTTS,
                                                     [np.array([v]) for v in y]) for n in (1, 10)}
    fits = fit_profiles(profiles, CAPACITY)
    assert set(fits) == set(profiles)
    assert all(f.tau_t_ms == 91.6 for f in fits.values())
    assert set(next(iter(fits.values())).as_dict()) >= {"tau_t_ms", "kind", "concave", "convex", "sse"}
