"""Seed 002's stiff-UDP analyses (collectors/studies/stiff_udp/analysis.py) against the paper's own numbers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from longhaul.collectors.studies.stiff_udp import analysis as su
from longhaul.collectors.studies.stiff_udp import reference as ref

TAU, M, PERIOD, I = ref.DURATION_S, ref.LINK_MBPS, ref.PERIOD_S, ref.IMPLIED_ICMP_MBPS
LO_HI = {"TABLE I": ref.UDP_RANGES_MBPS["UDP:1-10"], "TABLE II": ref.UDP_RANGES_MBPS["UDP:50-80"]}


def t_mb(table: str, icmp: float = I, c_literal: bool = True) -> float:
    lo, hi = LO_HI[table]
    if c_literal:
        return su.capacity_closed_form_mbit(TAU, M, lo, hi, PERIOD, icmp) / 8
    # the textbook c = period / (2 pi), to show the printed T needs the paper's literal c
    avg, c = (hi - lo) / 2, PERIOD / (2 * math.pi)
    return ((M - icmp) * TAU - avg * (c * math.sin(TAU / c) + TAU * lo / avg + TAU)) / 8


# --- the paper's worked numbers -------------------------------------------------------------

@pytest.mark.parametrize("table", ["TABLE I", "TABLE II"])
def test_eq8_reproduces_printed_T(table):
    # printed to 0.1 MB: 2801.5 and 1014.6; ours 2801.494 and 1014.613
    assert t_mb(table) == pytest.approx(ref.THEORETICAL_CAPACITY_MB[table], abs=0.05)
    lo, hi = LO_HI[table]
    assert su.theoretical_capacity_bytes(TAU, M, lo, hi, PERIOD, I) / 1e6 == pytest.approx(
        ref.THEORETICAL_CAPACITY_MB[table], abs=0.05)


def test_difference_of_T_pins_the_literal_c():
    # T_I - T_II does not depend on M or I, only on tau, c and the ranges: 1786.9 MB printed
    printed = ref.THEORETICAL_CAPACITY_MB["TABLE I"] - ref.THEORETICAL_CAPACITY_MB["TABLE II"]
    for icmp in (0.0, 1.09, 1.152):
        assert t_mb("TABLE I", icmp) - t_mb("TABLE II", icmp) == pytest.approx(printed, abs=0.1)
    textbook = t_mb("TABLE I", c_literal=False) - t_mb("TABLE II", c_literal=False)
    assert abs(textbook - printed) > 1.5        # 1785.0: c = period/(2 pi) is not what they used


def test_implied_icmp_load_range():
    # every I in [1.0888, 1.0914] Mb/s rounds to both printed T; 1440 B / 10 ms (1.152) does not
    for icmp in np.linspace(1.0888, 1.0914, 7):
        assert round(t_mb("TABLE I", icmp), 1) == 2801.5
        assert round(t_mb("TABLE II", icmp), 1) == 1014.6
    nominal = su.icmp_rate_mbps(ref.ICMP_PACKET_BYTES, ref.ICMP_INTERVAL_S)
    assert nominal == pytest.approx(1.152)
    assert round(t_mb("TABLE I", nominal), 1) != 2801.5


def test_text_about_2_8_GB_over_240_s():
    # "approximately 2.8 GB of transmission capacity over a period of 240 seconds"
    assert t_mb("TABLE I") / 1000 == pytest.approx(2.8, abs=0.05)


@pytest.mark.parametrize("table", [ref.TABLE_I, ref.TABLE_II])
def test_achieved_pct_columns(table):
    # the paper prints 2 decimals; Table I "Combined 5" is truncated (85.758 -> 85.75): abs 0.01
    for name in table.row_names():
        measured = table.value(name, "Measured MB") * 1e6
        printed = table.value(name, "Achieved %")
        t_bytes = ref.THEORETICAL_CAPACITY_MB[table.number] * 1e6
        assert su.effectiveness_pct(measured, t_bytes) == pytest.approx(printed, abs=0.01)
        assert ref.achieved_pct(table, name) == pytest.approx(printed, abs=0.01)
        ours = su.mbit_to_bytes(t_mb(table.number) * 8)
        assert su.effectiveness_pct(measured, ours) == pytest.approx(printed, abs=0.01)


@pytest.mark.parametrize("table", [ref.TABLE_IV, ref.TABLE_V])
def test_printed_sqrt_p_is_sqrt_of_percent(table):
    column = "\\sqrt{p}"
    for name in table.row_names():
        printed = table.value(name, column)
        sent = 1_000_000
        lost = round(printed ** 2 / 100 * sent)           # p in percent = printed^2
        assert su.paper_sqrt_p(lost, sent) == pytest.approx(printed, abs=0.0005)
        assert su.paper_sqrt_p(lost, sent) == pytest.approx(10 * su.sqrt_p(lost, sent))
        assert su.paper_sqrt_p_from_percent(100 * lost / sent) == pytest.approx(su.paper_sqrt_p(lost, sent))


def test_mathis_supports_the_percent_reading():
    # Table V "Base": sqrt(p) 0.158, RTT 67.92 ms, measured 18.25 Mb/s (Table II Baseline 1)
    rtt, v = ref.TABLE_V.value("Base", "RTT (msec)"), ref.TABLE_V.value("Base", "\\sqrt{p}")
    as_percent = su.mathis_bound_mbps(1460, rtt, v ** 2 / 100)
    as_fraction = su.mathis_bound_mbps(1460, rtt, v ** 2)
    assert as_percent == pytest.approx(13.3, abs=0.1)
    assert as_fraction == pytest.approx(1.33, abs=0.01)
    assert as_fraction < ref.TABLE_II.value("Baseline 1", "Throughput Mb/sec") / 10


# --- f(t) ------------------------------------------------------------------------------------

def test_f_of_t_shape():
    c = su.sinusoid_c(10)
    assert c == pytest.approx(math.pi / 2)            # 0.05 pi * 10
    assert su.udp_rate_mbps(0, 1, 10, 10) == pytest.approx(10)
    assert su.udp_rate_mbps(math.pi * c, 1, 10, 10) == pytest.approx(1)
    assert su.udp_rate_mbps(2 * math.pi * c, 50, 80, 10) == pytest.approx(80)   # cycle 9.87 s
    rates = [r for _, r in su.rate_schedule(240, 0.01, 50, 80, 10)]
    assert len(rates) == 24000
    assert min(rates) >= 50 - 1e-9 and max(rates) <= 80 + 1e-9
    # 24.3 cycles, not whole ones: the mean is int f / tau = 65.0896, from eq. (8) with I = 0
    assert np.mean(rates) == pytest.approx((M * TAU - su.capacity_closed_form_mbit(TAU, M, 50, 80, 10)) / TAU,
                                           abs=0.001)
    assert su.rate_schedule(1.0, 0.25, 3, 3, 10) == [(0.0, 3.0), (0.25, 3.0), (0.5, 3.0), (0.75, 3.0)]


# --- closed form vs numeric integral ---------------------------------------------------------

@pytest.mark.parametrize("tau, link, lo, hi, period, icmp", [
    (240, 100, 1, 10, 10, 1.09),
    (240, 100, 50, 80, 10, 1.09),
    (3.7, 1000, 0, 400, 2.5, 0),
    (600, 500, 100, 450, 30, 1.152),
    (1, 100, 20, 20, 10, 0),           # Min = Max
    (17.3, 10_000, 1000, 9000, 7, 0),
])
def test_closed_form_matches_numeric(tau, link, lo, hi, period, icmp):
    closed = su.capacity_closed_form_mbit(tau, link, lo, hi, period, icmp)
    numeric = su.capacity_numeric_mbit(tau, link, lo, hi, period, icmp)
    assert numeric == pytest.approx(closed, rel=1e-9, abs=1e-9)
    assert su.theoretical_capacity_mbit(tau, link, lo, hi, period, icmp) == closed


def test_min_equals_max_has_no_division_by_zero():
    assert su.capacity_closed_form_mbit(240, 100, 5, 5, 10, 1) == pytest.approx((100 - 1 - 5) * 240)


def test_zero_duration():
    assert su.capacity_closed_form_mbit(0, 100, 1, 10, 10, 1.09) == 0
    assert su.capacity_numeric_mbit(0, 100, 1, 10, 10, 1.09) == 0
    assert su.theoretical_capacity_bytes(0, 100, 1, 10, 10) == 0
    with pytest.raises(ValueError):
        su.effectiveness_pct(0, 0)


def test_background_above_capacity():
    args = (240, 100, 90, 120, 10, 0)                   # f above M for part of each cycle
    literal = su.capacity_closed_form_mbit(*args)
    assert literal < 0                                   # eq. (8) counts the overload as negative
    assert su.capacity_numeric_mbit(*args) == pytest.approx(literal, rel=1e-9)
    clipped = su.theoretical_capacity_mbit(*args)
    c = su.sinusoid_c(10)                                 # independent: fine trapezoid of max(0, g - f)
    t = np.linspace(0, 240, 2_000_001)
    reference = np.trapezoid(np.maximum(0, 100 - (15 * np.cos(t / c) + 105)), t)
    assert clipped == pytest.approx(reference, rel=1e-5)
    assert 0 < clipped < (100 - 90) * 240
    assert su.theoretical_capacity_mbit(240, 100, 100, 150, 10) == 0       # Min = M: nothing left
    assert su.theoretical_capacity_mbit(240, 100, 120, 150, 10, 1) == 0    # Min above M
    # Max + I exactly M still uses the closed form
    assert su.theoretical_capacity_mbit(240, 100, 50, 99, 10, 1) == su.capacity_closed_form_mbit(
        240, 100, 50, 99, 10, 1)


def test_effectiveness_can_exceed_100():
    assert su.effectiveness_pct(1.2e9, 1e9) == pytest.approx(120)


# --- RTT and loss ----------------------------------------------------------------------------

def test_rtt_summary():
    samples = [float(x) for x in range(1, 101)] + [None, float("nan")]
    s = su.rtt_summary(samples)
    assert (s["sent"], s["received"], s["lost"]) == (102, 100, 2)
    assert s["mean_ms"] == pytest.approx(50.5)
    assert s["median_ms"] == pytest.approx(50.5)
    assert s["p95_ms"] == pytest.approx(95.05)
    assert s["paper_ms"] == s["median_ms"]
    lost = su.rtt_summary([None, None])
    assert lost["lost"] == 2 and lost["median_ms"] is None and lost["paper_ms"] is None


def test_median_rtt_over_runs_and_sqrt_p_over_runs():
    runs = [[68.0, 69.0, 70.0], [80.0, 81.0], [None], [60.0]]
    assert su.median_rtt_over_runs(runs) == pytest.approx(69.0)   # medians 69, 80.5, 60
    assert su.median_paper_sqrt_p([(1, 1000), (4, 1000), (9, 1000)]) == pytest.approx(math.sqrt(0.4))
    assert su.median_paper_sqrt_p([(1, 1000), (9, 1000)]) == pytest.approx(math.sqrt(0.5))
    assert su.sqrt_p(25, 10_000) == pytest.approx(0.05)
    assert su.loss_fraction(0, 10) == 0


# --- bad inputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"duration_s": -1}, {"link_mbps": 0}, {"min_mbps": -1}, {"max_mbps": 0.5, "min_mbps": 1},
    {"period_s": 0}, {"icmp_mbps": -0.1}, {"icmp_mbps": 100}, {"duration_s": float("nan")},
    {"link_mbps": "100"}, {"min_mbps": None}, {"period_s": True}, {"max_mbps": float("inf")},
])
def test_capacity_bad_inputs(kwargs):
    args = {"duration_s": 240, "link_mbps": 100, "min_mbps": 1, "max_mbps": 10, "period_s": 10,
            "icmp_mbps": 1.09}
    args.update(kwargs)
    for fn in (su.capacity_closed_form_mbit, su.capacity_numeric_mbit, su.theoretical_capacity_mbit):
        with pytest.raises(ValueError):
            fn(**args)


@pytest.mark.parametrize("call", [
    lambda: su.capacity_numeric_mbit(240, 100, 1, 10, 10, steps=1),
    lambda: su.udp_rate_mbps(-1, 1, 10, 10),
    lambda: su.udp_rate_mbps(0, 10, 1, 10),
    lambda: su.rate_schedule(10, 0, 1, 10, 10),
    lambda: su.icmp_rate_mbps(0, 0.01),
    lambda: su.effectiveness_pct(-1, 10),
    lambda: su.loss_fraction(11, 10),
    lambda: su.loss_fraction(0, 0),
    lambda: su.sqrt_p(-1, 10),
    lambda: su.median_paper_sqrt_p([]),
    lambda: su.paper_sqrt_p_from_percent(101),
    lambda: su.paper_sqrt_p_from_percent(-0.1),
    lambda: su.mathis_bound_mbps(1460, 68, 1.5),
    lambda: su.mathis_bound_mbps(1460, 0, 0.01),
    lambda: su.rtt_summary([]),
    lambda: su.rtt_summary([10.0, -1.0]),
    lambda: su.rtt_summary("12 13"),
    lambda: su.median_rtt_over_runs([[None]]),
])
def test_other_bad_inputs(call):
    with pytest.raises(ValueError):
        call()


def test_c_override_for_a_generator_with_exact_period():
    # drivers/pacedudp paces with c = period / (2 pi); T must then use that c
    c = 10 / (2 * math.pi)
    assert su.udp_rate_mbps(10.0, 1, 10, 10, c_s=c) == pytest.approx(10)       # exactly one cycle
    closed = su.capacity_closed_form_mbit(240, 100, 50, 80, 10, 1.09, c_s=c)
    assert su.capacity_numeric_mbit(240, 100, 50, 80, 10, 1.09, c_s=c) == pytest.approx(closed, rel=1e-9)
    assert closed == pytest.approx(t_mb("TABLE II", c_literal=False) * 8)
    assert su.theoretical_capacity_bytes(240, 100, 50, 80, 10, 1.09, c_s=c) == pytest.approx(closed * 1e6 / 8)
    with pytest.raises(ValueError):
        su.sinusoid_c(10, c_s=0)
