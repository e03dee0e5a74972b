"""Poincare maps and Lyapunov exponents (seed 001 section 4) on maps with known exponents."""
from __future__ import annotations

import math

import numpy as np
import pytest

from longhaul.collectors.studies.throughput_profile.analysis import Trace, Trial
from longhaul.collectors.studies.throughput_profile.dynamics import (
    lyapunov_exponent,
    neighbour_exponents,
    poincare,
    successive_exponents,
    summarise,
    throughput_vs_exponent,
    trace_dynamics,
)

LOGISTIC_TOLERANCE = 0.01  # stated tolerance for ln 2 from a 2,000-point orbit of the logistic map


def orbit(step, x0: float, n: int) -> np.ndarray:
    x = np.empty(n)
    x[0] = x0
    for i in range(1, n):
        x[i] = step(x[i - 1])
    return x


def test_poincare_points_are_successive_pairs():
    x, y = poincare([1.0, 2.0, 4.0, np.nan, 8.0])  # NaN (a missing second) is dropped
    assert list(x) == [1.0, 2.0, 4.0]
    assert list(y) == [2.0, 4.0, 8.0]


@pytest.mark.parametrize("a", [0.5, 0.9, 1.2, -0.7, 2.0])
def test_linear_map_gives_ln_abs_a(a):
    x = orbit(lambda v: a * v, 7.0, 30)
    per_point = successive_exponents(x)
    assert per_point.values.size > 20
    assert np.allclose(per_point.values, math.log(abs(a)), atol=1e-9)
    assert np.allclose(neighbour_exponents(x).values, math.log(abs(a)), atol=1e-9)
    assert lyapunov_exponent(x) == pytest.approx(math.log(abs(a)), abs=1e-9)


@pytest.mark.parametrize("x0", [0.1234, 0.3, 0.7071])
def test_logistic_map_at_r4_gives_ln_2(x0):
    x = orbit(lambda v: 4.0 * v * (1.0 - v), x0, 2000)
    assert lyapunov_exponent(x) == pytest.approx(math.log(2.0), abs=LOGISTIC_TOLERANCE)


def test_mean_of_successive_estimates_telescopes_to_zero_on_a_bounded_orbit():
    # Why the per-trace exponent uses the nearest state: this mean is ~0 even for a chaotic map.
    x = orbit(lambda v: 4.0 * v * (1.0 - v), 0.3, 2000)
    assert abs(successive_exponents(x).values.mean()) < 0.05


def test_zero_differences_are_counted_not_logged():
    e = successive_exponents([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0])
    # d = 1, 0, 1, 2, 0, 0: ratios 0/1 flat, 1/0 undefined, 2/1 = ln 2, 0/2 flat, 0/0 undefined
    assert list(e.values) == pytest.approx([math.log(2.0)])
    assert list(e.index) == [2]
    assert (e.undefined, e.flat) == (2, 2)
    assert math.isnan(lyapunov_exponent(np.full(20, 940.0)))  # a flat line has no defined slope
    assert neighbour_exponents(np.full(20, 940.0)).values.size == 0
    assert successive_exponents([1.0, 2.0]).values.size == 0


def _trial(aggregate, per_stream=None, **kw) -> Trial:
    t = np.arange(1.0, len(aggregate) + 1)
    trace = Trace(t, np.asarray(aggregate, dtype=float),
                  {str(k): np.asarray(v) for k, v in enumerate(per_stream or [])})
    base = {"cca": "cubic", "streams": max(1, len(per_stream or [])), "buffer": "large", "rtt_ms": 45.6,
            "repeat": 1, "mbps": float(np.mean(aggregate))}
    return Trial(**{**base, **kw}, trace=trace)


def test_trace_dynamics_of_aggregate_and_streams():
    a = orbit(lambda v: 4.0 * v * (1.0 - v), 0.3, 300) * 1000
    b = orbit(lambda v: 0.5 * v, 500.0, 300)
    d = trace_dynamics(_trial(a + b, [a, b]))
    assert d.mean_mbps == pytest.approx(np.mean(a + b))
    assert len(d.stream_exponents) == 2
    assert d.stream_exponents[0] == pytest.approx(math.log(2.0), abs=0.05)
    assert d.stream_exponents[1] == pytest.approx(math.log(0.5), abs=1e-6)
    assert d.points > 0 and d.spread > 0
    assert trace_dynamics(Trial("cubic", 1, "large", 10.0, 1, 5.0)) is None  # no trace


def test_summary_and_throughput_vs_exponent():
    rng = np.random.default_rng(3)
    dyns = []
    for k, noise in enumerate((5.0, 50.0, 200.0)):  # noisier trace, lower mean: Fig. 14's trend
        agg = 900.0 - noise + rng.normal(0, noise, 100)
        dyns.append(trace_dynamics(_trial(agg, repeat=k + 1, rtt_ms=45.6)))
    rows = summarise(dyns)
    assert len(rows) == 1 and rows[0]["traces"] == 3
    assert rows[0]["lyapunov_mean"] == pytest.approx(np.mean([d.exponent for d in dyns]))
    relation = throughput_vs_exponent(dyns)
    assert relation["traces"] == 3
    assert relation["spearman"] is not None
