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
    check_format,
    trial_dir,
)
from longhaul.collectors.store.records import CellEntry, DeclaredCell, Topology
from longhaul.collectors.store.series import Series, TrialSeries, load_trial_series
from longhaul.collectors.store.upgrade import upgrade

__all__ = ["RUN_FORMAT", "SUMMARY_FORMAT", "Series", "StoreError", "StoreVersionError", "StoredRun",
           "TrialSeries", "check_format", "load_json_object", "load_store", "load_trial_series"]


@dataclass
class StoredRun:
    """A run as stored. `entries` are the typed cells; `cells` is the same in the documented JSON
    shape (summary.json's cells, every optional key present), built once at load for code that
    reads dicts. `manifest` and `summary` are the documents upgraded to the current version."""

    run_dir: Path
    manifest: dict
    summary: dict
    entries: list[CellEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)   # "manifest"/"summary" -> version on disk

    @property
    def cells(self) -> list[dict]:
        return self.summary.get("cells", [])

    @property
    def run_id(self) -> str:
        return self.manifest.get("run_id") or self.summary.get("run_id") or self.run_dir.name

    @property
    def status(self) -> str:
        # summary.json is rewritten after every trial, the manifest maybe only at the start, so
        # whichever says something other than "complete"/"running" is the more telling one.
        states = [self.manifest.get("status"), self.summary.get("status")]
        for bad in ("failed", "interrupted", "running"):
            if bad in states:
                return bad
        return next((s for s in states if s), "unknown")

    @property
    def declared(self) -> list[DeclaredCell]:
        """The manifest's cells: every cell the run was to run, with its whole configuration."""
        return [DeclaredCell.from_dict(c) for c in self.manifest.get("cells") or [] if isinstance(c, dict)]

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
    manifest = manifest or {}
    if summary is None:
        summary = {"run_id": manifest.get("run_id"), "status": manifest.get("status")}
        cells = _cells_from_cell_files(run_dir, manifest, problems)
    else:
        cells = [c for c in summary.get("cells") or [] if isinstance(c, dict)]
    entries = [_entry(c) for c in _merge_declared(cells, manifest)]
    summary = {**summary, "cells": [e.to_dict() for e in entries]}
    return StoredRun(run_dir, manifest, summary, entries, problems, versions)


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


def _cells_from_cell_files(run_dir: Path, manifest: dict, problems: list[str]) -> list[dict]:
    """Rebuild summary cells from the files written once per event: verification.json per cell,
    trial.json per finished trial."""
    problems.append(f"{SUMMARY} unavailable: results rebuilt from the per-trial {TRIAL_JSON} files")
    cells = []
    for declared in manifest.get("cells") or []:
        if not isinstance(declared, dict) or not declared.get("id"):
            continue
        where = cell_dir(run_dir, declared["id"])
        trials = [t for path in sorted(where.glob(f"{TRIAL_PREFIX}*/{TRIAL_JSON}"))
                  if (t := load_json_object(path, problems)) is not None]
        lab = load_json_object(where / VERIFICATION, problems, required=False)
        cells.append({**declared, "lab": lab, "trials": sorted(trials, key=_trial_number)})
    return cells


def _trial_number(trial: dict) -> int:
    number = trial.get("trial")
    return number if isinstance(number, int) else 0


def _merge_declared(cells: list[dict], manifest: dict) -> list[dict]:
    """Summary cells plus the manifest's cells that never reached the summary (run cut short)."""
    seen = {c.get("id") for c in cells}
    return cells + [{**c, "trials": []} for c in manifest.get("cells") or []
                    if isinstance(c, dict) and c.get("id") not in seen]


def _entry(doc: dict) -> CellEntry:
    """A typed cell with every optional part present, so the report never has to ask whether
    it exists; statistics are computed for summaries written before they were stored."""
    entry = CellEntry.from_dict(doc)
    entry.params = entry.params or {}
    entry.topology = entry.topology or Topology()
    if not doc.get("stats"):
        entry.refresh_stats()
    return entry

