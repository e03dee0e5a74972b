"""A run store for the console's tests: two synthetic runs (report_fixtures) with the statuses a
runner writes, one complete and one interrupted a day later, and a directory that is not a run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import report_fixtures

COMPLETE = "20240611-101500-a1b2c3"
PARTIAL = "20240612-090000-d4e5f6"


def console_store(root: Path) -> Path:
    report_fixtures.make_store(root)
    partial = report_fixtures.make_store(root / "p", partial=True)
    shutil.move(partial, root / PARTIAL)
    (root / "p").rmdir()
    doc = json.loads((root / PARTIAL / "manifest.json").read_text())
    doc.update(run_id=PARTIAL, started="2024-06-12T09:00:00Z", status="interrupted")
    (root / PARTIAL / "manifest.json").write_text(json.dumps(doc))
    set_statuses(root / COMPLETE, ["complete"] * 3)
    set_statuses(root / PARTIAL, ["complete", "complete", "running", "pending"])
    (root / "not-a-run").mkdir()
    return root


def set_statuses(run: Path, statuses: list[str]) -> None:
    """The synthetic store's cells with the statuses a runner writes."""
    doc = json.loads((run / "summary.json").read_text())
    for cell, status in zip(doc["cells"], statuses, strict=True):
        cell["status"] = status
    (run / "summary.json").write_text(json.dumps(doc))


def as_suite_run(run: Path) -> None:
    """The run as a regression suite's: its first cell is the suite's calibration cell."""
    doc = json.loads((run / "summary.json").read_text())
    doc["cells"][0]["labels"] = {**(doc["cells"][0].get("labels") or {}), "calibration": True}
    (run / "summary.json").write_text(json.dumps(doc))
