"""Transport selection (seed 001 section 5) on a hand-made table with obvious answers.

tests/data/profile/handmade.csv, three repeats (mean -10, mean, mean +10) per point:

    RTT (ms)            10    50   100
    cubic / 1 / default 900   300   100
    bbr / 4 / large     850   800   700
    cubic / 4 / large   880   780   600
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy.stats import t as student_t

from longhaul.collectors.studies.throughput_profile.analysis import Config, Trial, build_profiles, read_trials_csv
from longhaul.collectors.studies.throughput_profile.transport_selection import interpolate, rank, select, table_rtts

DATA = Path(__file__).parents[1] / "data" / "profile"
CUBIC1 = Config("cubic", 1, "default")
BBR4 = Config("bbr", 4, "large")
CUBIC4 = Config("cubic", 4, "large")


@pytest.fixture(scope="module")
def profiles():
    return build_profiles(read_trials_csv(DATA / "handmade.csv"))


@pytest.mark.parametrize("rtt,best,expected", [
    (10, CUBIC1, 900.0),       # measured
    (50, BBR4, 800.0),
    (100, BBR4, 700.0),
    (30, CUBIC4, 830.0),       # halfway: 880 - 50 beats bbr's 850 - 25 and cubic/1's 600
    (12, CUBIC4, 875.0),       # 880 - 5 beats cubic/1's 900 - 30
    (11, CUBIC1, 885.0),       # 900 - 15 beats cubic/4's 880 - 2.5
    (75, BBR4, 750.0),
])
def test_highest_interpolated_profile_mean_wins(profiles, rtt, best, expected):
    s = select(profiles, rtt)
    assert s.best.config == best
    assert s.best.expected_mbps == pytest.approx(expected)
    assert s.best.in_range


def test_interpolation_is_linear_between_measured_rtts(profiles):
    for rtt, want in ((10, 850), (20, 837.5), (50, 800), (60, 780), (100, 700)):
        assert interpolate(profiles[BBR4], rtt).expected_mbps == pytest.approx(want)
    e = interpolate(profiles[BBR4], 20)
    assert e.bracket_ms == (10.0, 50.0) and e.n_trials == 6
    assert interpolate(profiles[BBR4], 50).bracket_ms == (50.0, 50.0)


def test_confidence_interval_from_the_spread(profiles):
    e = interpolate(profiles[BBR4], 20)  # w = 0.25 toward 50 ms; std 10, n 3 at both ends
    se = math.sqrt((0.75 * 10) ** 2 / 3 + (0.25 * 10) ** 2 / 3)
    assert e.se_mbps == pytest.approx(se)
    half = student_t.ppf(0.975, 4) * se
    assert e.ci_mbps == pytest.approx((837.5 - half, 837.5 + half))
    assert e.p10_mbps == pytest.approx(0.75 * 842 + 0.25 * 792)
    assert e.p90_mbps == pytest.approx(0.75 * 858 + 0.25 * 808)


def test_outside_the_measured_rtts_uses_the_nearest_end_and_says_so(profiles):
    s = select(profiles, 200)
    assert s.best.config == BBR4 and s.best.expected_mbps == pytest.approx(700)
    assert not s.best.in_range
    assert "OUTSIDE" in s.statement and "optimistic" in s.statement
    assert not select(profiles, 1).best.in_range


def test_clear_choice_and_tie_statements(profiles):
    clear = select(profiles, 50)           # 800 vs 780, se 5.8 each: 2.4 standard errors
    assert clear.runner_up.config == CUBIC4
    assert clear.clear is True and "Clearly better" in clear.statement
    close = select(profiles, 30)           # 830 vs 825
    assert close.clear is False and "Not distinguishable" in close.statement
    assert "95% confidence interval" in close.statement


def test_filters(profiles):
    assert select(profiles, 10, ccas=["bbr"]).best.config == BBR4
    assert select(profiles, 10, buffers=["large"]).best.config == CUBIC4
    assert select(profiles, 30, max_streams=1).best.config == CUBIC1
    with pytest.raises(ValueError):
        select(profiles, 10, ccas=["htcp"])


def test_ties_go_to_fewer_streams_then_smaller_buffer():
    trials = [Trial(cca, n, b, r, k, 500.0 + d)
              for cca, n, b in (("reno", 8, "large"), ("cubic", 2, "large"), ("bbr", 2, "default"))
              for r in (10.0, 20.0) for k, d in ((1, -1.0), (2, 1.0))]
    ranking = rank(build_profiles(trials), 15.0)
    assert [e.config for e in ranking] == [Config("bbr", 2, "default"), Config("cubic", 2, "large"),
                                           Config("reno", 8, "large")]


def test_single_trial_has_no_confidence_interval():
    trials = [Trial("cubic", 1, "large", r, 1, m) for r, m in ((10.0, 900.0), (50.0, 500.0))]
    s = select(build_profiles(trials), 30.0)
    assert s.best.expected_mbps == pytest.approx(700.0)
    assert s.best.ci_mbps is None and s.best.se_mbps is None
    assert "no confidence interval" in s.statement
    assert s.as_dict()["ci95_mbps"] is None


def test_selection_dict_and_table_rtts(profiles):
    d = select(profiles, 30).as_dict(top=2)
    assert {"cca", "streams", "buffer", "expected_mbps", "ci95_mbps", "runner_up", "confidence"} <= set(d)
    assert (d["cca"], d["streams"], d["buffer"]) == ("cubic", 4, "large")
    assert len(d["ranking"]) == 2
    assert table_rtts([10, 50, 100]) == [10, 30, 50, 75, 100]
