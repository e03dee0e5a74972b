"""Seed 002's appropriation from 5 competing TCP streams (collectors/studies/stiff_udp/appropriation.py) and the
printed reference data (collectors/studies/stiff_udp/reference.py)."""
from __future__ import annotations

import pytest

from longhaul.collectors.studies.stiff_udp import appropriation as ap
from longhaul.collectors.studies.stiff_udp import reference as ref

B = ref.BASELINE_COMPETING_AGGREGATE_MBPS     # 75.3 Mb/s


def own_throughput(method: str) -> float:
    """The method's own Mb/s in the 5-cross test: Table III, or section VII.D for multiplier 100."""
    if "multiplier" in method:
        return ref.MULTIPLIER_100_MBPS[method]
    return ref.TABLE_III.value(method, "Throughput Mb/sec")


# --- the paper's numbers ---------------------------------------------------------------------

def test_definition_keeps_the_link_full_in_every_printed_case():
    # Figure 4 has no printed bars; the text gives B and the appropriations. Under (B - A)/B the
    # implied A plus the method's own throughput (Table III) fills the link like the baseline
    # does (75.3 + 15.65 = 90.95 Mb/s): 90.9 to 93.0 Mb/s.
    baseline_total = B + ref.TABLE_III.value("Baseline 1", "Throughput Mb/sec")
    for method, pct in ref.APPROPRIATION_PCT.items():
        a = ap.competing_aggregate_from_pct(B, pct)
        assert ap.appropriation_pct(B, a) == pytest.approx(pct)
        assert a + own_throughput(method) == pytest.approx(baseline_total, rel=0.025)
    # read as percent of the 100 Mb/s link instead, Parallel 9 would fill only 78.6 Mb/s
    assert (B - 58.0) + ref.TABLE_III.value("Parallel 9", "Throughput Mb/sec") < 0.9 * baseline_total


def test_implied_figure_4_bars():
    assert ap.competing_aggregate_from_pct(B, 38.7) == pytest.approx(46.16, abs=0.01)
    assert ap.competing_aggregate_from_pct(B, 58.0) == pytest.approx(31.63, abs=0.01)
    assert ap.competing_aggregate_from_pct(B, 6.2) == pytest.approx(70.63, abs=0.01)
    assert ap.competing_aggregate_from_pct(B, 17.5) == pytest.approx(62.12, abs=0.01)


def test_parallel_share_prediction_against_measured():
    # N/(N+k) of section III: 40.0% and 57.1% predicted, 38.7% and 58% measured
    assert ap.predicted_appropriation_pct(5) == pytest.approx(40.0)
    assert ap.predicted_appropriation_pct(9) == pytest.approx(57.14, abs=0.01)
    assert ap.predicted_appropriation_pct(5) == pytest.approx(ref.APPROPRIATION_PCT["Parallel 5"], abs=1.5)
    assert ap.predicted_appropriation_pct(9) == pytest.approx(ref.APPROPRIATION_PCT["Parallel 9"], abs=1.5)
    assert ap.predicted_appropriation_pct(1) == 0
    assert ap.parallel_share(9, 5) == pytest.approx(9 / 14)
    assert ap.parallel_share(3, 0) == 1


def test_multiplier_100_text():
    # "effectiveness was reduced (18.5 Mb/sec vs. 29.8 Mb/sec), but was still greater than 15.65"
    m = ref.MULTIPLIER_100_MBPS
    assert m["Baseline 1"] < m["Combined 9 (multiplier 100)"] < m["Combined 9"]
    assert m["Baseline 1"] == ref.TABLE_III.value("Baseline 1", "Throughput Mb/sec")
    assert ref.APPROPRIATION_PCT["Combined 9 (multiplier 100)"] < ref.APPROPRIATION_PCT["Combined 9"]


# --- from runs -------------------------------------------------------------------------------

def test_cross_traffic_result_from_runs():
    baseline = [[15, 15, 15, 15, 15.3], [14, 15, 16, 15, 15], [10, 10, 10, 10, 10]]   # 75.3, 75, 50
    method = [[9, 9, 9, 9, 9.0], [10, 10, 10, 10, 10], [1, 1, 1, 1, 1]]               # 45, 50, 5
    r = ap.cross_traffic_result([46.0, 45.0, 80.0], [1.39e9, 1.33e9, 2.4e9], method, baseline)
    assert r.baseline_competing_mbps == pytest.approx(75.0)
    assert r.competing_mbps == pytest.approx(45.0)
    assert r.appropriation_pct == pytest.approx(40.0)
    assert (r.throughput_mbps, r.measured_bytes, r.runs) == (46.0, 1.39e9, 3)
    assert r.total_mbps == pytest.approx(91.0)
    same = ap.cross_traffic_result([46.0], [1.39e9], [[9, 9, 9, 9, 9]], 75.3)
    assert same.appropriation_pct == pytest.approx((75.3 - 45) / 75.3 * 100)


def test_median_aggregate_and_signed_appropriation():
    assert ap.aggregate_mbps([15.1, 15.0, 15.2, 15.0, 15.0]) == pytest.approx(75.3)
    assert ap.median_aggregate_mbps([[1, 2], [3, 4], [10, 10]]) == pytest.approx(7)
    assert ap.median_aggregate_mbps([[1, 2], [3, 4]]) == pytest.approx(5)
    assert ap.appropriation_pct(75.3, 80.0) < 0           # competitors did better than baseline
    assert ap.appropriation_pct(75.3, 0) == 100
    assert ap.appropriation_pct(75.3, 75.3) == 0


@pytest.mark.parametrize("call", [
    lambda: ap.aggregate_mbps([]),
    lambda: ap.aggregate_mbps([10, -1]),
    lambda: ap.aggregate_mbps("10"),
    lambda: ap.aggregate_mbps([float("nan")]),
    lambda: ap.median_aggregate_mbps([]),
    lambda: ap.appropriation_pct(0, 10),
    lambda: ap.appropriation_pct(75.3, None),
    lambda: ap.appropriation_pct(True, 10),
    lambda: ap.competing_aggregate_from_pct(75.3, 101),
    lambda: ap.competing_aggregate_from_pct(75.3, float("nan")),
    lambda: ap.cross_traffic_result([], [], [], 75.3),
    lambda: ap.cross_traffic_result([1.0, 2.0], [1.0], [[1.0]], 75.3),
    lambda: ap.cross_traffic_result([1.0], [1.0], [[1.0]], 0),
    lambda: ap.parallel_share(0, 5),
    lambda: ap.parallel_share(2.5, 5),
    lambda: ap.predicted_appropriation_pct(5, 0),
])
def test_bad_inputs(call):
    with pytest.raises(ValueError):
        call()


# --- reference data --------------------------------------------------------------------------

def test_reference_tables_as_printed():
    assert list(ref.TABLES) == ["TABLE I", "TABLE II", "TABLE III", "TABLE IV", "TABLE V"]
    methods = ("Baseline 1", "Combined 5", "Combined 9", "Parallel 5", "Parallel 9")
    for number in ("TABLE I", "TABLE II", "TABLE III", "TABLE IV"):
        assert ref.TABLES[number].row_names() == methods
    assert ref.TABLE_V.row_names() == ("Base",) + methods[1:]
    assert ref.TABLE_III.columns == ("TCP Method", "Throughput Mb/sec", "Measured MB")
    assert ref.TABLE_IV.row("Parallel 9") == {"TCP Method": "Parallel 9", "RTT (msec)": 74.94, "\\sqrt{p}": 0.648}
    assert "T = 2801.5" in ref.TABLE_I.title and "T = 1014.6" in ref.TABLE_II.title
    for table in ref.TABLES.values():
        assert all(len(r) == len(table.columns) for r in table.rows)
    with pytest.raises(KeyError):
        ref.TABLE_V.row("Baseline 1")
