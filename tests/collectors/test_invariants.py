"""The two invariants of a stored run, checked on the store alone (collectors/store/invariants.py,
`longhaul invariants`): nothing above the payload ceiling, no RTT below the configured one."""

from __future__ import annotations

import csv
import subprocess
import sys

from report_fixtures import make_store

from longhaul.collectors.store.invariants import check_run
from longhaul.collectors.store.reader import load_store


def _rewrite(path, column, value, row=3):
    rows = list(csv.DictReader(path.open()))
    rows[row][column] = str(value)
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)


def _within_the_ceiling(run):
    """The synthetic store's flows are noise around their shares, some seconds above what a
    500 Mb/s bottleneck passes: scaled to 90 % of it, they are a right run."""
    for path in run.glob("cells/*/trial-*/throughput.csv"):
        rows = list(csv.DictReader(path.open()))
        for row in rows:
            row["mbps"] = str(float(row["mbps"]) * 0.45)
        with path.open("w", newline="") as fh:
            out = csv.DictWriter(fh, fieldnames=list(rows[0]))
            out.writeheader()
            out.writerows(rows)


def test_a_right_run_keeps_both_and_a_broken_one_is_named(tmp_path):
    run = make_store(tmp_path)
    _within_the_ceiling(run)
    checks = check_run(load_store(run))
    assert checks and all(c.ok and c.seconds > 0 for c in checks), [c for c in checks if not c.ok]
    first = checks[0]
    trial_dir = load_store(run).trial_dir(first.cell, first.trial)
    _rewrite(trial_dir / "rtt.csv", "rtt_ms", 40.0)                        # of a 128 ms path
    _rewrite(trial_dir / "tcpinfo.csv", "srtt_ms", 0.0)                    # no RTT sample yet: not a fault
    (broken,) = [c for c in check_run(load_store(run)) if not c.ok]
    assert (broken.cell, broken.trial, broken.probe_rounds_below, broken.srtt_samples_below) == \
        (first.cell, first.trial, [40.0], [])
    _rewrite(trial_dir / "throughput.csv", "mbps", 10_000.0, row=0)
    done = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "invariants", str(run)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 probe rounds below the RTT floor" in done.stdout and "above the payload ceiling" in done.stdout
    assert done.stdout.splitlines()[-1] == f"invariants: 1 of {len(checks)} trials break them"
