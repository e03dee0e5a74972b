"""Known answers for `longhaul compare`: the statistics, the verdicts and the exit status, on
synthetic suite runs written through the real run writer (tests/support/regression_fixtures.py)."""
from __future__ import annotations

import json

import pytest
from regression_fixtures import write_suite_run

from longhaul.appliance.cli.app import main
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies.regression import stats
from longhaul.collectors.studies.regression.compare import (
    IMPROVEMENT,
    NO_CHANGE,
    REGRESSION,
    TOO_FEW,
    CompareError,
    compare_runs,
)


def test_hodges_lehmann_is_the_median_pairwise_difference():
    assert stats.hodges_lehmann([1, 2, 3], [2, 3, 4]) == 1.0
    # differences 10-1, 10-2, 10-100, 11-1, 11-2, 11-100: median of (9, 8, -90, 10, 9, -89) = 8.5
    assert stats.hodges_lehmann([1, 2, 100], [10, 11]) == 8.5


def test_smallest_p_and_repeats_needed_match_the_exact_distribution():
    assert stats.min_p(5, 5) == pytest.approx(2 / 252)          # 0.0079: never below 0.002
    assert stats.min_p(6, 6) == pytest.approx(2 / 924)
    assert stats.rank_p(range(5), range(10, 15)) == pytest.approx(stats.min_p(5, 5))
    assert stats.repeats_needed(0.01) == 5
    assert stats.repeats_needed(0.001) == 7                      # the nightly suite's first Holm threshold
    assert stats.rank_p([3, 3, 3], [3, 3, 3]) == 1.0


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    # thresholds 0.05/3, 0.05/2, 0.05: 0.001 is rejected, 0.03 > 0.025 stops the rest
    assert stats.holm_reject([0.001, 0.04, 0.03], 0.05) == [True, False, False]
    assert stats.holm_reject([0.001, 0.02, 0.04], 0.05) == [True, True, True]


def test_bootstrap_interval_is_seeded_and_brackets_the_shift():
    base, new = [100, 101, 99, 100.5, 99.5], [90, 91, 89, 90.5, 89.5]
    low, high = stats.bootstrap_ci(base, new)
    assert (low, high) == stats.bootstrap_ci(base, new)
    assert low <= stats.hodges_lehmann(base, new) <= high < 0


def _pair(tmp_path, *, shift=None, repeats=8, cv=0.02, kernel_b="6.1.0-50-amd64"):
    a = write_suite_run(tmp_path, "20261101-000000-aaaaaa", "2026-11-01T00:00:00Z", repeats=repeats, cv=cv, seed=1)
    b = write_suite_run(tmp_path, "20261102-000000-bbbbbb", "2026-11-02T00:00:00Z", repeats=repeats, cv=cv, seed=2,
                        shift=shift, kernel=kernel_b)
    return load_store(a), load_store(b)


def _row(comparison, scenario, metric):
    return next(r for r in comparison.rows if r.scenario == scenario and r.metric == metric)


def test_same_conditions_give_no_regression(tmp_path):
    c = compare_runs(*_pair(tmp_path))
    assert c.exit_status() == 0 and not c.regressions
    assert c.tests == 10                   # 3 metrics alone + 7 with the background; calibration aside
    assert {r.verdict for r in c.rows} == {NO_CHANGE}


def test_a_planted_throughput_drop_is_a_regression_with_exit_3(tmp_path):
    c = compare_runs(*_pair(tmp_path, shift={("cubic-alone", "throughput.fg"): 0.90}))
    row = _row(c, "cubic-alone", "throughput.fg")
    assert row.verdict == REGRESSION and c.exit_status() == 3
    assert row.relative == pytest.approx(-0.10, abs=0.02)
    assert row.ci_low < row.shift < row.ci_high < 0
    assert [r.metric for r in c.regressions] == ["throughput.fg"]


def test_direction_decides_regression_or_improvement(tmp_path):
    c = compare_runs(*_pair(tmp_path, shift={("cubic-vs-bbr", "rtt_inflation"): 0.7,
                                             ("cubic-vs-bbr", "retransmits.bg"): 2.0}))
    assert _row(c, "cubic-vs-bbr", "rtt_inflation").verdict == IMPROVEMENT      # less queueing is better
    assert _row(c, "cubic-vs-bbr", "retransmits.bg").verdict == REGRESSION


def test_a_significant_shift_below_the_floor_is_never_a_regression(tmp_path):
    c = compare_runs(*_pair(tmp_path, cv=0.001, shift={("cubic-alone", "throughput.fg"): 0.99}))
    row = _row(c, "cubic-alone", "throughput.fg")
    assert row.p < 0.001 and row.verdict == NO_CHANGE and row.note.startswith("below floor")
    assert c.exit_status() == 0


def test_too_few_repeats_says_how_many_instead_of_guessing(tmp_path):
    c = compare_runs(*_pair(tmp_path, repeats=4, shift={("cubic-alone", "throughput.fg"): 0.5}))
    assert c.exit_status() == 2 and c.needed == 7
    row = _row(c, "cubic-alone", "throughput.fg")
    assert row.verdict == TOO_FEW and "7 + 7 would" in row.note


def test_the_calibration_cell_flags_the_host_not_the_transport(tmp_path):
    c = compare_runs(*_pair(tmp_path, shift={("calibration", "throughput.fg"): 0.8,
                                             ("calibration", "rtt_inflation"): 3.0}))
    assert c.exit_status() == 0 and not c.regressions
    # queueing in the calibration cell follows the transport too: only what the host carries counts
    assert [r.metric for r in c.host_changed] == ["throughput.fg"]


def test_runs_of_different_profiles_or_cells_are_refused(tmp_path):
    a = load_store(write_suite_run(tmp_path, "20261101-000000-aaaaaa", "2026-11-01T00:00:00Z"))
    other = load_store(write_suite_run(tmp_path, "20261102-000000-cccccc", "2026-11-02T00:00:00Z", profile="regression-other"))
    with pytest.raises(CompareError, match="different profiles"):
        compare_runs(a, other)


def test_cli_exit_status_and_json(tmp_path, capsys):
    a = write_suite_run(tmp_path, "20261101-000000-aaaaaa", "2026-11-01T00:00:00Z", seed=1)
    b = write_suite_run(tmp_path, "20261102-000000-bbbbbb", "2026-11-02T00:00:00Z", seed=2, kernel="6.1.0-53-amd64",
                        shift={("cubic-vs-bbr", "throughput.fg"): 0.85})
    assert main(["compare", str(a), str(b), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "regression" and doc["kernels"] == ["6.1.0-50-amd64", "6.1.0-53-amd64"]
    assert any("6.1.0-50-amd64 -> 6.1.0-53-amd64" in line for line in doc["fingerprint_changes"])
    assert main(["compare", str(a), str(a)]) == 0
    out = capsys.readouterr().out
    assert "no regression" in out
    other = write_suite_run(tmp_path, "20261103-000000-cccccc", "2026-11-03T00:00:00Z", profile="regression-other")
    assert main(["compare", str(a), str(other)]) == 2
    assert "different profiles" in capsys.readouterr().err


def test_runs_without_trials_to_compare_are_not_a_pass(tmp_path):
    c = compare_runs(*_pair(tmp_path, repeats=0))
    assert c.tests == 0 and c.exit_status() == 2 and c.status.startswith("nothing to compare")
