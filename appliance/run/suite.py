"""A regression suite run: the suite's profile on the config's lab, then its verdict against the
suite's previous run (what `longhaul suite` and the scheduled units do; docs/regression.md).

A suite is a profile (profiles/regression-*.toml) with a calibration cell. Its runs live in the
config's store directory like any run; the previous complete run of the same profile is the
baseline. `--if-kernel-changed` (the boot-time unit) runs only when the kernel this machine booted
differs from the one the suite's newest run recorded, so an upgrade is measured on the first boot
after it and an ordinary reboot costs nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.collectors.studies.registry import RUN_METRICS
from longhaul.collectors.studies.regression.compare import Comparison, compare_runs
from longhaul.collectors.studies.regression.history import suite_runs
from longhaul.collectors.studies.regression.samples import DEFAULT_LEVEL, run_controller_kernel
from longhaul.core.errors import ConfigError


@dataclass
class SuiteOutcome:
    ran: bool
    reason: str                          # why it did not run, or the run directory
    run: StoredRun | None = None
    baseline: StoredRun | None = None
    comparison: Comparison | None = None

    def exit_status(self) -> int:
        """0 fine or nothing to do, 3 a regression against the baseline, 2 too few repeats to say, 1
        the run itself did not complete."""
        if not self.ran:
            return 0
        if self.run is None or self.run.status != "complete":
            return 1
        return self.comparison.exit_status() if self.comparison else 0


def check_suite(config) -> None:
    """A suite has one profile and a calibration cell (exit 2 otherwise, before anything runs)."""
    if len(config.profiles) != 1:
        raise ConfigError(config.path, None, ("run", "profiles"), [p.name for p in config.profiles],
                          "a suite is one profile")
    profile = config.profiles[0]
    if not any(c.labels.get(CALIBRATION_LABEL) for c in profile.cells):
        raise ConfigError(profile.path, None, ("scenarios",), None,
                          "a regression suite needs a calibration cell: a scenario with calibration = true "
                          "(no delay, no shaping below the access rate; docs/regression.md)")


def kernel_unchanged(runs_dir: Path, profile: str, running: str | None = None) -> str | None:
    """The kernel the suite's newest run recorded when it is the one running now, else None."""
    running = running or os.uname().release
    runs, _ = suite_runs(runs_dir, profile) if Path(runs_dir).is_dir() else ([], [])
    if runs and run_controller_kernel(runs[-1]) == running:
        return running
    return None


def verdict(run_dir: Path, profile: str, level: float = DEFAULT_LEVEL
            ) -> tuple[StoredRun, StoredRun | None, Comparison | None]:
    """The finished run, its baseline (the previous complete run of the suite) and their comparison,
    with the studies' run-level metrics beside the cells'."""
    run = load_store(run_dir)
    runs, _ = suite_runs(Path(run_dir).parent, profile)
    earlier = [r for r in runs if r.run_id != run.run_id and (r.manifest.started or "") <= (run.manifest.started or "")]
    if run.status != "complete" or not earlier:
        return run, (earlier[-1] if earlier else None), None
    baseline = earlier[-1]
    return run, baseline, compare_runs(baseline, run, level, run_metrics=RUN_METRICS)
