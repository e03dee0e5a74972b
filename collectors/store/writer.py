"""Writing a run as it goes (docs/results-format.md), so an interrupted or crashed run keeps every
trial it finished.

`RunWriter` is what the runner reports to: the manifest, then per cell its start, its lab
verification, each trial, its end, and the run's end. `FileRunWriter` is the run directory, the
record of truth (`run --resume` and the report read it); other stores (a time-series database)
implement RunWriter too and are handed to the file store as `mirrors`, which get every event after
the files are written. The entries passed around are records.py's typed records; their own
methods (idempotent) apply each event, so every writer given the same entry agrees on it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.provenance import now_iso
from longhaul.collectors.store.records import CellEntry, TrialSummary, Verification
from longhaul.collectors.store.upgrade import upgrade
from longhaul.core.tables import json_text, read_json, write_json, write_text

log = logging.getLogger(__name__)


@runtime_checkable
class RunWriter(Protocol):
    """One store of a run's results. Each call carries the whole entry it concerns, already
    holding the event, so a store that keeps no state of its own (a database) can write it."""

    run_id: str

    def write_manifest(self, manifest: RunManifest) -> None: ...
    def begin_cell(self, entry: CellEntry) -> CellEntry: ...
    def record_verification(self, entry: CellEntry, verification: Verification) -> None: ...
    def record_trial(self, entry: CellEntry, trial: TrialSummary) -> None: ...
    def end_cell(self, entry: CellEntry, status: str, error: str | None = None) -> None: ...
    def finish(self, status: str) -> None: ...


class FileRunWriter:
    """The run directory: manifest.json, summary.json (rewritten after every event, so a crash
    loses at most the trial running), cells/<id>/verification.json and trial-<k>/trial.json."""

    def __init__(self, run_dir: Path, *, manifest: RunManifest | None = None, cells: list[CellEntry] | None = None,
                 mirrors: Sequence[RunWriter] = ()):
        self.dir = Path(run_dir)
        self.run_id = self.dir.name
        self.manifest = manifest if manifest is not None else RunManifest(run_id=self.run_id)
        self.cells: list[CellEntry] = cells if cells is not None else []
        self.mirrors = list(mirrors)
        self._summary = SummaryText()

    @classmethod
    def create(cls, root: Path, run_id: str, mirrors: Sequence[RunWriter] = ()) -> FileRunWriter:
        """A new run directory root/run_id (which must not exist yet)."""
        run_dir = Path(root) / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        return cls(run_dir, mirrors=mirrors)

    @classmethod
    def open(cls, run_dir: Path, mirrors: Sequence[RunWriter] = ()) -> FileRunWriter:
        """An existing run, to resume it. An older store is upgraded in memory and, from the next
        event on, written back in the current version."""
        run_dir = Path(run_dir).resolve()
        for name in (fmt.MANIFEST, fmt.SUMMARY, fmt.CONFIG_SNAPSHOT):
            if not (run_dir / name).is_file():
                raise FileNotFoundError(f"{run_dir} is not a resumable longhaul run (no {name})")
        manifest = RunManifest.from_dict(upgrade(read_json(run_dir / fmt.MANIFEST), fmt.RUN_FORMAT, run_dir / fmt.MANIFEST))
        summary = upgrade(read_json(run_dir / fmt.SUMMARY), fmt.SUMMARY_FORMAT, run_dir / fmt.SUMMARY)
        cells = [CellEntry.from_dict(c) for c in summary.get("cells") or []]
        return cls(run_dir, manifest=manifest, cells=cells, mirrors=mirrors)

    # --- the directory ---

    def cell_dir(self, cell_id: str) -> Path:
        path = fmt.cell_dir(self.dir, cell_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def trial_dir(self, cell_id: str, trial: int) -> Path:
        return fmt.trial_dir(self.dir, cell_id, trial)

    def snapshot_sources(self, config_text: str, profiles: dict[str, str]) -> None:
        """The config and profile texts as run (profile name -> TOML), so `run --resume`
        rebuilds exactly these cells."""
        (self.dir / fmt.CONFIG_SNAPSHOT).write_text(config_text)
        (self.dir / fmt.PROFILES_DIR).mkdir(exist_ok=True)
        for name, text in profiles.items():
            (self.dir / fmt.PROFILES_DIR / f"{name}.toml").write_text(text)

    # --- state, for resuming ---

    def entry(self, cell_id: str) -> CellEntry | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def done_trials(self) -> set[tuple[str, int]]:
        return {(c.id, t.trial) for c in self.cells for t in c.trials if t.ok}

    def resumed(self) -> None:
        """Failed and interrupted trials, and refused cells, are tried again."""
        self._summary.forget()
        for entry in self.cells:
            entry.trials = entry.ok_trials
            if entry.status == "refused":
                entry.status, entry.lab, entry.error = "pending", None, None
        self.update_manifest(resumed=[*self.manifest.resumed, now_iso()], status="running", finished=None,
                             pid=os.getpid())

    # --- RunWriter ---

    def write_manifest(self, manifest: RunManifest) -> None:
        self.manifest = manifest
        self._write_manifest()
        self._mirror("write_manifest", manifest)

    def update_manifest(self, **sections) -> None:
        """Fields learnt or changed during the run (the fingerprint once the first lab stands, the
        hosts' tuning, the phases, a resumption), by RunManifest's names (another is a TypeError):
        on disk at once, and handed on to the mirrors as the whole manifest, like the first one."""
        self.write_manifest(dataclasses.replace(self.manifest, **sections))

    def begin_cell(self, entry: CellEntry) -> CellEntry:
        self._summary.forget(entry)
        if self.entry(entry.id) is None:
            self.cells.append(entry)
        self.write_summary()
        self._mirror("begin_cell", entry)
        return entry

    def record_verification(self, entry: CellEntry, verification: Verification) -> None:
        self._summary.forget(entry)
        entry.set_lab(verification)
        write_json(self.cell_dir(entry.id) / fmt.VERIFICATION, verification.to_dict())
        self.write_summary()
        self._mirror("record_verification", entry, verification)

    def record_trial(self, entry: CellEntry, trial: TrialSummary) -> None:
        self._summary.forget(entry)
        entry.add_trial(trial)
        write_json(self.trial_dir(entry.id, trial.trial) / fmt.TRIAL_JSON, trial.to_dict())
        self.write_summary()
        self._mirror("record_trial", entry, trial)

    def end_cell(self, entry: CellEntry, status: str, error: str | None = None) -> None:
        self._summary.forget(entry)
        entry.end(status, error)
        self.write_summary()
        self._mirror("end_cell", entry, status, error)

    def finish(self, status: str) -> None:
        self.manifest = dataclasses.replace(self.manifest, status=status, finished=now_iso())
        self._write_manifest()
        self.write_summary(status)
        self._mirror("finish", status)

    def write_summary(self, status: str | None = None) -> None:
        write_text(self.dir / fmt.SUMMARY, self._summary.text(self.run_id, status or self.manifest.status or "running",
                                                              self.cells))

    def _write_manifest(self) -> None:
        write_json(self.dir / fmt.MANIFEST, self.manifest.to_dict())

    def _mirror(self, event: str, *args) -> None:
        """Hand an event on. The files are written first and are what resume and the report read,
        so a mirror that fails (a database gone away) costs that mirror the event, not the run."""
        for mirror in self.mirrors:
            try:
                getattr(mirror, event)(*args)
            except Exception as exc:     # any failure of a secondary store
                log.warning("run store %s: %s failed: %s", type(mirror).__name__, event, exc)


class SummaryText:
    """summary.json's text, kept a cell at a time: it is written after every event, and at seed
    001's scale (630 cells x 10 trials, 7.8 MB) encoding every cell each time took 0.7 s, more than
    a trial's own overhead. A cell is encoded again only when what the events change in it
    (status, error, trials, verification) did; the text is write_json's, byte for byte."""

    def __init__(self):
        self._cells: dict[str, tuple[tuple, str]] = {}

    def text(self, run_id: str, status: str, cells: list[CellEntry]) -> str:
        head = json_text(summary_doc(run_id, status, []))
        if not cells:
            return head + "\n"
        body = ",\n  ".join(self._cell(entry) for entry in cells)
        return head[:-len("[]\n}")] + "[\n  " + body + "\n ]\n}\n"

    def forget(self, entry: CellEntry | None = None) -> None:
        """An event changed `entry` (None: every cell)."""
        if entry is None:
            self._cells.clear()
        else:
            self._cells.pop(entry.id, None)

    def _cell(self, entry: CellEntry) -> str:
        key = (entry.status, entry.error, len(entry.trials), id(entry.lab), id(entry.stats))
        cached = self._cells.get(entry.id)
        if cached is None or cached[0] != key:
            cached = self._cells[entry.id] = (key, json_text(entry.to_dict(), level=2))
        return cached[1]


def summary_doc(run_id: str, status: str, cells: list[CellEntry]) -> dict:
    return {**fmt.SUMMARY_DOC.stamp(), "run_id": run_id, "status": status,
            "cells": [c.to_dict() for c in cells]}


class TriallessRun:
    """A run directory for a run without cells or trials (an OPS evaluation, a Figure 29 run):
    its results live in files of its own, and the manifest with an empty summary makes the
    directory one the report reads."""

    def __init__(self, run_dir: Path, manifest: RunManifest):
        """Writes manifest.json (from provenance.run_manifest) and summary.json at once."""
        self.dir = Path(run_dir)
        self.manifest = manifest
        self._write()

    def finish(self, status: str) -> None:
        self.manifest = dataclasses.replace(self.manifest, status=status, finished=now_iso())
        self._write()

    def _write(self) -> None:
        write_json(self.dir / fmt.MANIFEST, self.manifest.to_dict())
        write_trialless_summary(self.dir, self.manifest.status or "running")


def write_trialless_summary(run_dir: Path, status: str) -> None:
    """summary.json of a run with no trials, so the report reads it."""
    write_json(Path(run_dir) / fmt.SUMMARY, summary_doc(Path(run_dir).name, status, []))
