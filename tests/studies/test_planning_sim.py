"""Seed 003's simulation (Listing 1) on known answers: the paper's section-4.2 examples and
hand-built traces whose slowdowns are worked out below; the C loop and the Python loop agree."""
from __future__ import annotations

import numpy as np
import pytest

from longhaul.collectors.studies.planning import metrics
from longhaul.collectors.studies.planning.sim import load_library, simulate, split_classes
from longhaul.collectors.studies.planning.trace import OD, Trace, Transfer

MBIT = 1e6 / 8  # bytes per second of 1 Mb/s
BACKENDS = ["python", pytest.param("c", marks=pytest.mark.skipif(load_library() is None,
                                                                   reason="build/lib/liblonghaul_plansim.so not built"))]


def steady(start, seconds, mbps, cls=None):
    return Transfer(start, seconds, int(round(mbps * MBIT * seconds)), cls)


def rates_mbps(res):
    return res.nbytes / res.runtime_s / MBIT


@pytest.mark.parametrize("backend", BACKENDS)
def test_section_4_2_fair_share_in_proportion_to_the_request(backend):
    trace = Trace([steady(0, 100, r, OD) for r in (1, 2, 3, 4)])
    od = np.ones(4, dtype=bool)
    res = simulate(trace, od, 5e6, 1.0, backend=backend)
    assert rates_mbps(res) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    res = simulate(trace, od, 20e6, 1.0, backend=backend)
    assert rates_mbps(res) == pytest.approx([1, 2, 3, 4])
    assert res.slowdown == pytest.approx([1, 1, 1, 1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("od_mbps, be_mbps, finish", [
    # OD asks 15 of its 30 %: BE gets the other 85 for 1000 s, then the link: 15000 Mbit in 150 s
    (15, 100, (1000.0, 1150.0)),
    # reversed: OD gets what BE leaves
    (100, 15, (1150.0, 1000.0)),
    # both over their share: 30 and 70; BE done at 1428.57, OD has moved 30 x 1429 and gets the link
    (100, 100, (2000.3, 100_000 / 70)),
])
def test_section_4_2_spare_capacity_is_lent_to_the_other_class(backend, od_mbps, be_mbps, finish):
    trace = Trace([steady(0, 1000, od_mbps, OD), steady(0, 1000, be_mbps, "be")])
    res = simulate(trace, np.array([True, False]), 100e6, 0.30, backend=backend)
    assert res.delivered[0] / MBIT == pytest.approx(min(100, od_mbps + be_mbps))
    assert res.finish_s == pytest.approx(finish)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_best_effort_transfers_share_the_link(backend):
    # A: 0-10 s at the full 10 Mb/s; B arrives at 5 s, same. 0-5: A alone (half its bytes); 5-15:
    # 5 Mb/s each, A done at 15; B has half left, alone at 10 Mb/s: done at 20.
    trace = Trace([steady(0, 10, 10), steady(5, 10, 10)])
    res = simulate(trace, np.zeros(2, dtype=bool), 10e6, 0.0, backend=backend)
    assert res.finish_s == pytest.approx([15.0, 20.0])
    assert res.slowdown == pytest.approx([1.5, 1.5])
    got = metrics.class_slowdowns(res.slowdown, res.od)
    assert (got["avg_bs_be"], got["max_bs_be"], got["avg_bs_od"]) == (pytest.approx(1.5), pytest.approx(1.5), None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_demand_transfer_keeps_its_reserved_share(backend):
    # B is OD with 80 % of 10 Mb/s: from 5 s, B gets 8 and A 2 Mb/s. B's 12.5 MB at 1 MB/s: done at
    # 17.5. A had 6.25 MB left at 5 s, moves 0.25 MB in each of the 13 intervals 5..17 (9.5 MB by
    # 18), then 3 MB alone at 1.25 MB/s: done at 20.4.
    trace = Trace([steady(0, 10, 10, "be"), steady(5, 10, 10, OD)])
    res = simulate(trace, np.array([False, True]), 10e6, 0.8, backend=backend)
    assert res.finish_s == pytest.approx([20.4, 17.5])
    assert res.slowdown == pytest.approx([2.04, 1.25])


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_ratio_scales_size_and_duration(backend):
    trace = Trace([steady(0, 10, 4), steady(100, 10, 4)])
    res = simulate(trace, np.zeros(2, dtype=bool), 10e6, 0.0, load_ratio=2.0, backend=backend)
    assert res.reference_s == pytest.approx([20, 20])
    assert res.runtime_s == pytest.approx([20, 20])
    assert res.slowdown == pytest.approx([1, 1])
    # at 2.5x the two overlap? no: 25 s each, 100 s apart; a third one inside the first does
    trace = Trace([steady(0, 10, 8), steady(5, 10, 8)])
    res = simulate(trace, np.zeros(2, dtype=bool), 10e6, 0.0, load_ratio=2.0, backend=backend)
    assert res.slowdown.min() > 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_and_arrival_inside_an_interval(backend):
    # 0.2 s transfers: doubled to 0.4 s by contention, still bounded to 1 (equation 1, bound 1 s)
    trace = Trace([steady(0, 0.2, 10), steady(0, 0.2, 10)])
    res = simulate(trace, np.zeros(2, dtype=bool), 10e6, 0.0, backend=backend)
    assert res.runtime_s == pytest.approx([0.4, 0.4])
    assert res.slowdown == pytest.approx([1.0, 1.0])
    # a transfer arriving at 3.4 s is started by the interval at 4 s (online, 1 s cycle)
    res = simulate(Trace([steady(3.4, 5, 1)]), np.zeros(1, dtype=bool), 10e6, 0.0, backend=backend)
    assert res.admit_s[0] == 4.0 and res.finish_s[0] == pytest.approx(9.0) and res.slowdown[0] == pytest.approx(1)


def test_c_and_python_loops_agree_bit_for_bit():
    if load_library() is None:
        pytest.skip("build/lib/liblonghaul_plansim.so not built")
    rng = np.random.default_rng(7)
    n = 400
    starts = np.sort(rng.uniform(0, 3600, n))
    trace = Trace([Transfer(float(s), float(d), int(b)) for s, d, b in
                   zip(starts, rng.lognormal(2, 1.2, n), rng.lognormal(18, 1.5, n))])
    od = split_classes(n, 0.3, seed=3)
    for share, load in ((0.4, 1.0), (1.0, 2.5), (0.0, 1.5)):
        c = simulate(trace, od, 2e8, share, load, backend="c")
        py = simulate(trace, od, 2e8, share, load, backend="python")
        assert np.array_equal(c.finish_s, py.finish_s) and np.array_equal(c.delivered, py.delivered)


def test_random_split_is_seeded_and_nested():
    a, b = split_classes(1000, 0.3, 5), split_classes(1000, 0.5, 5)
    assert a.sum() == 300 and b.sum() == 500 and not (a & ~b).any()
    assert np.array_equal(a, split_classes(1000, 0.3, 5)) and not np.array_equal(a, split_classes(1000, 0.3, 6))


def test_every_byte_is_delivered_once():
    trace = Trace([steady(s, 7, 3) for s in range(0, 40, 3)])
    res = simulate(trace, np.zeros(len(trace.transfers), dtype=bool), 5e6, 0.0, 1.5)
    assert res.delivered.sum() == pytest.approx(res.nbytes.sum())
    assert (res.delivered <= 5e6 / 8 + 1e-6).all()   # never above the capacity


def test_bad_parameters_are_refused():
    trace = Trace([steady(0, 1, 1)])
    with pytest.raises(ValueError):
        simulate(trace, np.zeros(1, dtype=bool), 1e6, 1.5)
    with pytest.raises(ValueError):
        simulate(trace, np.zeros(2, dtype=bool), 1e6, 0.5)
