"""The suites page: each regression suite found in the store (its runs carry a calibration cell,
docs/regression.md) with its history's change points and its last verdict, as `longhaul history`
and `longhaul compare` compute them, and its schedule as systemd reports it (`longhaul schedule`
installs the units)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.appliance.console import index
from longhaul.appliance.schedule.units import service_name, timer_name
from longhaul.collectors.studies.registry import RUN_METRICS
from longhaul.collectors.studies.regression.compare import CompareError, compare_runs
from longhaul.collectors.studies.regression.history import build_history, suite_runs
from longhaul.collectors.studies.regression.samples import scenario_label

SYSTEMCTL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Change:
    series: str             # "scenario: metric unit"
    run: str                # the first run of the new level
    shift: str              # "-12.0 %" or the absolute change
    changed: tuple[str, ...]   # what the fingerprint says changed at that run


@dataclass(frozen=True)
class Schedule:
    timer: str
    next: str
    last: str
    result: str             # the service's last result and exit status


@dataclass
class SuiteView:
    """What the store says of a suite (computed once per state of the store: derived.py); its
    schedule is asked of systemd on each request (schedule_of)."""
    name: str
    runs: list[str]
    skipped: list[str]
    verdict: str            # the last run against the one before, as `longhaul compare` says
    changes: list[Change] = field(default_factory=list)


def suite_names(store: Path) -> list[str]:
    return sorted({row.suite for row in index.list_runs(store).rows if row.suite})


def suite_view(store: Path, suite: str) -> SuiteView:
    runs, skipped = suite_runs(store, suite)
    view = SuiteView(suite, [r.run_id for r in runs], skipped, _verdict(runs))
    if runs:
        history = build_history(runs, suite, skipped=skipped, run_metrics=RUN_METRICS)
        for series in history.series:
            for change in series.changes:
                shift = (f"{change.relative * 100:+.1f} %" if change.relative is not None
                         else f"{change.after - change.before:+.3g} {series.unit}".strip())
                view.changes.append(Change(f"{scenario_label(series.scenario, series.calibration)}: "
                                           f"{series.metric} {series.unit}".strip(), change.run, shift,
                                           tuple(change.changed)))
    return view


def suite_views(store: Path) -> list[SuiteView]:
    return [suite_view(store, name) for name in suite_names(store)]


def _verdict(runs) -> str:
    if len(runs) < 2:
        return f"{len(runs)} complete run: nothing to compare yet" if runs else "no complete run"
    try:
        return compare_runs(runs[-2], runs[-1], run_metrics=RUN_METRICS).status
    except CompareError as e:
        return f"not comparable: {e}"


def schedule_of(suite: str) -> tuple[Schedule | None, str]:
    """The suite's timer as systemd reports it; None and why where it cannot say."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None, "no systemctl on this machine"
    props = _show(systemctl, timer_name(suite), "LoadState", "NextElapseUSecRealtime", "LastTriggerUSec")
    if props is None:
        return None, "systemd is not running here (not PID 1)"
    if props.get("LoadState") != "loaded":
        return None, f"not scheduled (`longhaul schedule {suite}` installs it)"
    service = _show(systemctl, service_name(suite), "Result", "ExecMainStatus", "ExecMainStartTimestamp") or {}
    return Schedule(timer_name(suite), props.get("NextElapseUSecRealtime") or "–", props.get("LastTriggerUSec") or "never",
                    f"{service.get('Result', '?')} (exit {service.get('ExecMainStatus', '?')})"), ""


def _show(systemctl: str, unit: str, *props: str) -> dict[str, str] | None:
    try:
        res = subprocess.run([systemctl, "show", unit, *(f"--property={p}" for p in props)],
                             capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
