"""Known answers for `longhaul history`, the suite command's pieces and the report's regression
section, on synthetic suite runs written through the real run writer."""
from __future__ import annotations

import importlib.util
import json

import pytest
from regression_fixtures import PROFILE, fingerprint, write_suite_run

from longhaul.appliance.cli.app import main
from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.report import write_report
from longhaul.appliance.run.suite import kernel_unchanged, verdict
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies.registry import RUN_METRICS
from longhaul.collectors.studies.regression.compare import ONE_VALUE, compare_runs
from longhaul.collectors.studies.regression.history import Point, build_history, change_points, suite_runs
from longhaul.collectors.studies.regression.samples import METRICS
from longhaul.core.errors import ConfigError
from longhaul.core.paths import REPO

OLD, NEW = "6.1.0-50-amd64", "6.1.0-56-amd64"


def _upgrade_history(root, runs=6, upgrade_at=3, factor=0.9):
    """`runs` nightly runs; from run `upgrade_at` (0-based) on, the new kernel and cubic-alone's
    foreground `factor` times as fast."""
    dirs = []
    for k in range(runs):
        new = k >= upgrade_at
        dirs.append(write_suite_run(root, f"2026110{k + 1}-000000-{k:06d}", f"2026-11-0{k + 1}T00:00:00Z", seed=10 + k,
                                    kernel=NEW if new else OLD,
                                    shift={("cubic-alone", "throughput.fg"): factor} if new else None))
    return dirs


def test_the_kernel_upgrade_is_the_one_change_point_and_is_attributed(tmp_path):
    _upgrade_history(tmp_path)
    runs, skipped = suite_runs(tmp_path, PROFILE)
    assert len(runs) == 6 and skipped == []
    history = build_history(runs, PROFILE)
    changed = {(s.scenario, s.metric): s.changes for s in history.series if s.changes}
    assert list(changed) == [("cubic-alone", "throughput.fg")]
    (change,) = changed[("cubic-alone", "throughput.fg")]
    assert change.index == 3 and change.run == runs[3].run_id
    assert change.relative == pytest.approx(-0.10, abs=0.02) and change.p < 0.01
    assert change.changed[0].startswith(f"kernel: {OLD} -> {NEW} on controller, S1")


def test_the_newest_run_alone_can_be_a_change_point(tmp_path):
    _upgrade_history(tmp_path, runs=5, upgrade_at=4)
    history = build_history(suite_runs(tmp_path, PROFILE)[0], PROFILE)
    (series,) = [s for s in history.series if s.changes]
    assert series.metric == "throughput.fg" and series.changes[0].index == 4


def test_a_flat_series_and_a_step_below_the_floor_have_no_change_point():
    flat = [Point(f"r{k}", None, None, 100.0, [100.0, 100.5, 99.5]) for k in range(8)]
    assert change_points(flat, METRICS["throughput"]) == []
    small = flat[:4] + [Point(f"s{k}", None, None, 99.0, [99.0, 99.5, 98.5]) for k in range(4)]
    assert change_points(small, METRICS["throughput"]) == []          # 1 % is under the 2 % floor
    big = flat[:4] + [Point(f"s{k}", None, None, 90.0, [90.0, 90.5, 89.5]) for k in range(4)]
    assert [c.index for c in change_points(big, METRICS["throughput"])] == [4]


def test_history_cli_and_json(tmp_path, capsys):
    _upgrade_history(tmp_path)
    assert main(["history", str(tmp_path), "--profile", PROFILE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["runs"]) == 6
    assert sum(len(s["changes"]) for s in doc["series"]) == 1
    assert main(["history", str(tmp_path), "--profile", "regression-nothing"]) == 2


def test_diff_cli_names_the_kernel_and_the_sysctl(tmp_path, capsys):
    a = write_suite_run(tmp_path, "20261101-000000-aaaaaa", "2026-11-01T00:00:00Z", kernel=OLD)
    b = write_suite_run(tmp_path, "20261102-000000-bbbbbb", "2026-11-02T00:00:00Z",
                        fp=fingerprint(NEW, rmem="4096 131072 262144"))
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"{OLD} -> {NEW}" in out and "tcp_rmem" in out
    assert main(["diff", str(a), str(a), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []


def test_suite_verdict_takes_the_previous_complete_run_as_baseline(tmp_path):
    dirs = _upgrade_history(tmp_path, runs=3, upgrade_at=2, factor=0.8)
    write_suite_run(tmp_path, "20261101-120000-broken", "2026-11-01T12:00:00Z", status="interrupted")
    run, baseline, comparison = verdict(dirs[-1], PROFILE)
    assert baseline.run_dir == dirs[1] and comparison.exit_status() == 3
    assert kernel_unchanged(tmp_path, PROFILE, running=NEW) == NEW         # the newest complete run's
    assert kernel_unchanged(tmp_path, PROFILE, running=OLD) is None
    assert kernel_unchanged(tmp_path / "none", PROFILE) is None


def test_kernel_unchanged_reads_the_controller_fingerprint(tmp_path):
    write_suite_run(tmp_path, "20261101-000000-aaaaaa", "2026-11-01T00:00:00Z", kernel=OLD)
    assert kernel_unchanged(tmp_path, PROFILE, running=OLD) == OLD
    assert kernel_unchanged(tmp_path, PROFILE, running=NEW) is None


def test_report_shows_history_verdict_and_diff(tmp_path):
    dirs = _upgrade_history(tmp_path, runs=4, upgrade_at=3)
    (path,) = write_report(dirs[-1], ("html",))
    html = path.read_text()
    assert "Regression: suite" in html and "regression</td>" in html
    assert f"{OLD} -&gt; {NEW}" in html or f"{OLD} → {NEW}" in html
    assert html.count("<svg") >= 3


def test_a_calibration_scenario_must_be_unshaped(tmp_path):
    text = (REPO / "profiles/regression-nightly.toml").read_text().replace('"topology.rtt_ms" = 0, ', "")
    path = tmp_path / "regression-bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert "calibration" in str(err.value) and "rtt_ms = 0" in str(err.value)
    assert err.value.line is not None


def test_a_sweeps_transition_rtt_is_a_run_level_metric(tmp_path):
    """Seed 001's transition RTT (one value a run, from the throughput-profile study through the
    registry) stands in the comparison untested and is a series in the history."""
    spec = importlib.util.spec_from_file_location("fake_run", REPO / "tests/data/profile/fake_run.py")
    fake_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake_run)
    a = load_store(fake_run.make_run(tmp_path / "a", seed=1))
    b = load_store(fake_run.make_run(tmp_path / "b", seed=2))
    rows = [r for r in compare_runs(a, b, run_metrics=RUN_METRICS).rows if r.metric.startswith("transition_rtt.")]
    assert rows and {r.verdict for r in rows} == {ONE_VALUE} and all(r.p is None for r in rows)
    history = build_history([a, b], "none", run_metrics=RUN_METRICS)
    assert {s.metric for s in history.series} == {r.metric for r in rows}
    assert all(len(s.points) == 2 for s in history.series)
