"""The runs under a store directory as the console lists them: one typed row per run, read from its
manifest and summary (the store's reader), and the filters the runs page offers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.appliance.console.live import files_key
from longhaul.collectors.store.format import CALIBRATION_LABEL, MANIFEST, SUMMARY, StoreError
from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.hardware import run_marker

# a run directory's name as the console accepts it in a URL: one path segment, no dots first
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CELL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class NotFound(LookupError):
    """No run (or cell) of that name under the store."""


@dataclass(frozen=True)
class RunRow:
    run_id: str
    started: str            # ISO time, "" when unknown
    status: str
    kind: str               # "profile run", or the manifest's kind (ops-evaluation, ...)
    profiles: tuple[str, ...]
    suite: str              # the regression suite's profile when the run is one, else ""
    kernel: str             # the lab's kernel(s), else the controller's
    backend: str
    cells: int
    complete: int           # cells complete
    failed: int             # cells failed or refused
    verdict: str            # one line: what a reader should take from the run
    live: bool              # its longhaul process is alive now


@dataclass(frozen=True)
class RunFilter:
    profile: str = ""
    suite: str = ""
    status: str = ""
    kernel: str = ""
    since: str = ""          # YYYY-MM-DD, inclusive
    until: str = ""          # YYYY-MM-DD, inclusive

    def keeps(self, row: RunRow) -> bool:
        day = row.started[:10]
        return ((not self.profile or self.profile in row.profiles)
                and (not self.suite or row.suite == self.suite)
                and (not self.status or row.status == self.status)
                and (not self.kernel or self.kernel in row.kernel)
                and (not self.since or (bool(day) and day >= self.since))
                and (not self.until or (bool(day) and day <= self.until)))


@dataclass
class Listing:
    rows: list[RunRow]
    unreadable: list[str] = field(default_factory=list)     # "<dir>: why", for the page's notes


def run_dir(root: Path, name: str) -> Path:
    """The run directory `name` under `root`; NotFound for anything else (another path, a name
    that is not one segment, a directory without a manifest)."""
    return folder_in(root, name, MANIFEST)


def folder_in(root: Path, name: str, holding: str) -> Path:
    """The folder `name` directly under `root` that holds the file `holding` (a run's manifest, a
    plan's plan.json); NotFound for anything else: the one check of a name the console serves."""
    if not RUN_NAME.fullmatch(name or ""):
        raise NotFound(name)
    root = Path(root).resolve()
    path = (root / name).resolve()
    if path.parent != root or not (path / holding).is_file():
        raise NotFound(name)
    return path


def run_dir_or_none(root: Path, name: str) -> Path | None:
    try:
        return run_dir(root, name)
    except NotFound:
        return None


def load_run(root: Path, name: str) -> StoredRun:
    try:
        return load_store(run_dir(root, name))
    except StoreError as e:
        raise NotFound(f"{name}: {e}") from None


def live_runs() -> list[run_marker.Marker]:
    """The marked sessions whose process is alive and that write a run store (a netboot server's
    session is marked too, with a work directory that is no run)."""
    return [m for m in run_marker.live_markers() if (m.run_dir / MANIFEST).is_file()]


def live_run_dirs() -> set[Path]:
    """The run directories whose longhaul process is alive (hardware/run_marker.py)."""
    return {m.run_dir.resolve() for m in live_runs()}


def store_key(root: Path) -> tuple:
    """What moves when a run is added, removed or written: each run's manifest and summary."""
    root = Path(root)
    return files_key(p / name for p in sorted(root.iterdir()) if p.is_dir() for name in (MANIFEST, SUMMARY))


def run_names(root: Path) -> list[str]:
    """The run directories under `root` (the names of runs), newest first by name."""
    root = Path(root)
    return sorted((p.name for p in root.iterdir() if (p / MANIFEST).is_file()), reverse=True) if root.is_dir() else []


def list_runs(root: Path, keep: RunFilter = RunFilter()) -> Listing:
    """Every run under `root`, newest first."""
    live = live_run_dirs()
    listing = Listing([])
    for path in (Path(root) / name for name in run_names(root)):
        try:
            row = run_row(load_store(path), path.resolve() in live)
        except StoreError as e:
            listing.unreadable.append(f"{path.name}: {e}")
            continue
        if keep.keeps(row):
            listing.rows.append(row)
    listing.rows.sort(key=lambda r: (r.started, r.run_id), reverse=True)
    return listing


def run_row(store: StoredRun, live: bool = False) -> RunRow:
    m = store.manifest
    cells = store.entries
    complete = sum(c.status == "complete" for c in cells)
    failed = sum(c.status in ("failed", "refused") for c in cells)
    kernels = sorted(set(((m.features or {}).get("kernels") or {}).values()))
    # a regression suite's run has a calibration cell (docs/regression.md): its profile names the suite
    suite = next((c.profile for c in cells if (c.labels or {}).get(CALIBRATION_LABEL) and c.profile), "")
    return RunRow(run_id=store.run_id, started=m.started or "", status=store.status or "unknown",
                  kind=m.kind or "profile run", profiles=tuple(m.profiles), suite=suite,
                  kernel=", ".join(kernels) or (m.host.kernel or ""), backend=m.backend or "",
                  cells=len(cells), complete=complete, failed=failed,
                  verdict=verdict(store.status or "unknown", len(cells), complete, failed, live), live=live)


def verdict(status: str, cells: int, complete: int, failed: int, live: bool) -> str:
    if live:
        return f"running: {complete} of {cells} cells done"
    if status == "running":
        return f"stopped without a teardown ({complete} of {cells} cells done): `longhaul clean`, then run --resume"
    if not cells:
        return status
    if complete == cells:
        return f"all {cells} cells complete"
    return f"{status}: {complete} of {cells} cells complete, {failed} failed or refused"
