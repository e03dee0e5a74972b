"""Read a longhaul run store (docs/results-format.md) into typed records and numpy series.

The report must be rebuildable from the store alone and must survive partial runs, so every file a
crash can leave missing or truncated is loaded leniently: the trouble is recorded in a `problems`
list for the report's notes instead of raising. Only a store we do not understand (wrong format or
a version upgrade.py cannot lift) is an error, because guessing at an unknown layout would silently
produce a wrong report. Older versions are upgraded in memory; the files are never rewritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.collectors.store.format import (
    MANIFEST,
    RUN_FORMAT,
    SUMMARY,
    SUMMARY_FORMAT,
    TRIAL_JSON,
    TRIAL_PREFIX,
    VERIFICATION,
    StoreError,
    StoreVersionError,
    cell_dir,
    trial_dir,
)
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.records import CellEntry, Topology
from longhaul.collectors.store.series import Series, TrialSeries, load_trial_series
from longhaul.collectors.store.upgrade import upgrade

__all__ = ["RUN_FORMAT", "SUMMARY_FORMAT", "Series", "StoreError", "StoreVersionError", "StoredRun",
           "TrialSeries", "load_json_object", "load_store", "load_trial_series"]


@dataclass
class StoredRun:
    """A run as stored. `entries` are the typed cells (collectors/store/records.py: CellEntry);
    `manifest` (a record) and `summary` are upgraded to the current version."""

    run_dir: Path
    manifest: RunManifest
    summary: dict
    entries: list[CellEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)   # "manifest"/"summary" -> version on disk

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.summary.get("run_id") or self.run_dir.name

    @property
    def status(self) -> str:
        # summary.json is rewritten after every trial, the manifest maybe only at the start, so
        # whichever says something other than "complete"/"running" is the more telling one.
        states = [self.manifest.status, self.summary.get("status")]
        for bad in ("failed", "interrupted", "running"):
            if bad in states:
                return bad
        return next((s for s in states if s), "unknown")

    def entry(self, cell_id: str) -> CellEntry | None:
        return next((e for e in self.entries if e.id == cell_id), None)

    def trial_dir(self, cell_id: str, trial: int) -> Path:
        return trial_dir(self.run_dir, cell_id, trial)

    def trial_series(self, cell_id: str, trial: int) -> TrialSeries:
        return load_trial_series(self.trial_dir(cell_id, trial))




def load_store(run_dir: Path) -> StoredRun:
    """Load manifest.json and summary.json, falling back to per-cell files when summary is lost."""
    run_dir = Path(run_dir)
    problems: list[str] = []
    manifest = load_json_object(run_dir / MANIFEST, problems)
    summary = load_json_object(run_dir / SUMMARY, problems)
    if manifest is None and summary is None:
        raise StoreError(f"{run_dir}: neither {MANIFEST} nor {SUMMARY} is readable; "
                         f"not a run directory ({'; '.join(problems)})")
    versions = {}
    if manifest is not None:
        versions["manifest"] = manifest.get("version")
        manifest = upgrade(manifest, RUN_FORMAT, run_dir / MANIFEST)
    if summary is not None:
        versions["summary"] = summary.get("version")
        summary = upgrade(summary, SUMMARY_FORMAT, run_dir / SUMMARY)
    record = RunManifest.from_dict(manifest or {})
    if summary is None:
        summary = {"run_id": record.run_id, "status": record.status}
        cells = _cells_from_cell_files(run_dir, record, problems)
    else:
        cells = [c for c in summary.get("cells") or [] if isinstance(c, dict)]
    entries = [_entry(c) for c in _merge_declared(cells, record)]
    summary = {**summary, "cells": [e.to_dict() for e in entries]}
    return StoredRun(run_dir, record, summary, entries, problems, versions)


def load_json_object(path: Path, problems: list[str], required: bool = True) -> dict | None:
    """A JSON object from the store, or None with the reason added to `problems` (a missing
    optional file is no problem)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            problems.append(f"{path.name} is missing")
        return None
    except (OSError, ValueError) as exc:  # a crash mid-write leaves truncated JSON
        problems.append(f"{path.name} is unreadable: {exc}")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path.name} does not hold a JSON object")
        return None
    return doc


def _cells_from_cell_files(run_dir: Path, manifest: RunManifest, problems: list[str]) -> list[dict]:
    """Rebuild summary cells from the files written once per event: verification.json per cell,
    trial.json per finished trial."""
    problems.append(f"{SUMMARY} unavailable: results rebuilt from the per-trial {TRIAL_JSON} files")
    cells = []
    for declared in (c.to_dict() for c in manifest.cells if c.id):
        where = cell_dir(run_dir, declared["id"])
        trials = [t for path in sorted(where.glob(f"{TRIAL_PREFIX}*/{TRIAL_JSON}"))
                  if (t := load_json_object(path, problems)) is not None]
        lab = load_json_object(where / VERIFICATION, problems, required=False)
        cells.append({**declared, "lab": lab, "trials": sorted(trials, key=_trial_number)})
    return cells


def _trial_number(trial: dict) -> int:
    number = trial.get("trial")
    return number if isinstance(number, int) else 0


def _merge_declared(cells: list[dict], manifest: RunManifest) -> list[dict]:
    """Summary cells plus the manifest's cells that never reached the summary (run cut short)."""
    seen = {c.get("id") for c in cells}
    return cells + [{**c.to_dict(), "trials": []} for c in manifest.cells if c.id not in seen]


def _entry(doc: dict) -> CellEntry:
    """A typed cell with every optional part present, so the report never has to ask whether
    it exists; statistics are computed for summaries written before they were stored."""
    entry = CellEntry.from_dict(doc)
    entry.params = entry.params or {}
    entry.topology = entry.topology or Topology()
    if not doc.get("stats"):
        entry.refresh_stats()
    return entry

