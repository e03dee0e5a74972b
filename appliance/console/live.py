"""What the live page shows of a run in progress, read from its store as it is written: cell k of N,
an ETA, the current cell's verification, and each flow's throughput and the probe RTT per second:
of the trial under way from its live.csv (collectors/store/live_rows.py: the senders' delivery
rate, written each second), else of the cell's newest stored trial (its throughput.csv and
rtt.csv, the record)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from longhaul.collectors.store.format import (
    CELLS_DIR,
    LIVE_CSV,
    MANIFEST,
    SUMMARY,
    TRIAL_JSON,
    TRIAL_PREFIX,
    StoreError,
    cell_dir,
    trial_dir,
)
from longhaul.collectors.store.live_rows import load_live
from longhaul.collectors.store.reader import load_store, load_trial_series
from longhaul.reports.rows import verification_row

MAX_POINTS = 600            # per flow: the newest ten minutes of a trial at 1 s


@dataclass
class LiveSnapshot:
    run_id: str
    status: str
    live: bool
    cells_total: int
    cells_done: int
    current: str | None              # the cell running now (or the next to run)
    eta_s: float | None
    verification: dict | None        # reports.rows.verification_row of the current cell
    series_of: str | None            # "cell / trial k" the figures show
    throughput: dict[str, list[list[float]]] = field(default_factory=dict)   # flow -> [[t_s, Mb/s]]
    rtt: list[list[float]] = field(default_factory=list)                     # [[t_s, ms]]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), allow_nan=False)


def snapshot(run_dir: Path, live: bool, now: dt.datetime | None = None) -> LiveSnapshot:
    store = load_store(run_dir)
    cells = [c for c in store.entries if c.id]          # a cell with no id has no directory to show
    done = sum(c.status not in ("pending", "running", None) for c in cells)
    current = next((c for c in cells if c.status == "running"), None) or next(
        (c for c in cells if c.status in ("pending", None)), None)
    snap = LiveSnapshot(run_id=store.run_id, status=store.status or "unknown", live=live, cells_total=len(cells),
                        cells_done=done, current=current.id if current else None,
                        eta_s=_eta(store.manifest.started, done, len(cells), now),
                        verification=verification_row(current) if current and current.lab else None,
                        series_of=None)
    running = _running_trial(Path(run_dir), current.id) if current and current.id and live else None
    if current is not None and running is not None:    # the trial under way, second by second (its live.csv)
        trial, (rates, rtt) = running
        snap.series_of = f"{current.id} / trial {trial} (running: the senders' delivery rate)"
        snap.throughput = {flow: _points(s) for flow, s in rates.items()}
        snap.rtt = _points(rtt) if rtt is not None else []
        return snap
    shown = [c for c in ([current] if current else []) + cells[::-1] if c is not None and c.id]
    for cell in shown:                          # the current cell's newest trial, else the last finished one
        assert cell.id is not None              # kept above
        trial = _newest_trial(Path(run_dir), cell.id)
        if trial is None:
            continue
        series = load_trial_series(trial_dir(Path(run_dir), cell.id, trial))
        if series.throughput or series.rtt is not None:
            snap.series_of = f"{cell.id} / trial {trial}"
            snap.throughput = {flow: _points(s) for flow, s in series.throughput.items()}
            snap.rtt = _points(series.rtt) if series.rtt is not None else []
            break
    return snap


class Feeds:
    """One look at a run's store per interval, shared by every viewer of that run: twenty live
    pages cost one store_key and, when it moved, one snapshot (each look at a 630-cell store stats
    every trial directory). A look is the snapshot's JSON and whether the run is live, or the
    StoreError that kept it."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._looks: dict[Path, tuple[float, tuple, tuple[str, bool] | StoreError]] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def look(self, run_dir: Path, live: Callable[[Path], bool]) -> tuple[str, bool]:
        """(the run's snapshot as JSON, live), at most interval_s old (StoreError: the store mid-write)."""
        with self._guard:
            lock = self._locks.setdefault(run_dir, threading.Lock())
        with lock:                                    # one viewer looks, the others wait for it
            now = time.monotonic()
            held = self._looks.get(run_dir)
            if held is None or now - held[0] >= self.interval_s * 0.8:
                running = live(run_dir)
                key = (running, store_key(run_dir))
                if held is None or key != held[1] or isinstance(held[2], StoreError):
                    try:
                        snap = snapshot(run_dir, running)
                        found: tuple[str, bool] | StoreError = (snap.to_json(), snap.live)
                    except StoreError as e:           # a summary mid-replace: the next look reads it
                        found = e
                else:
                    found = held[2]
                held = (now, key, found)
                self._looks[run_dir] = held
        if isinstance(held[2], StoreError):
            raise held[2]
        return held[2]


def store_key(run_dir: Path) -> tuple:
    """What changes when the store does: summary and manifest, each trial directory (a file added
    to it) and any trial's live rows. The live stream reads the store again only when this moves:
    stat calls, where a 630-cell summary takes 0.5 s to load."""
    run_dir = Path(run_dir)
    return files_key([run_dir / SUMMARY, run_dir / MANIFEST, *run_dir.glob(f"{CELLS_DIR}/*/{TRIAL_PREFIX}*"),
                      *run_dir.glob(f"{CELLS_DIR}/*/{TRIAL_PREFIX}*/{LIVE_CSV}")])


def files_key(paths) -> tuple:
    """The paths' times and sizes (those that exist): what moves when one of them is written."""
    return tuple((str(p), st.st_mtime_ns, st.st_size) for p in paths if (st := _stat(p)) is not None)


def _stat(path: Path):
    try:
        return path.stat()
    except FileNotFoundError:            # gone between the glob and the stat
        return None


def _running_trial(run_dir: Path, cell_id: str):
    """(k, its live rows) of the cell's trial under way: a live.csv and no trial.json yet."""
    for path in sorted(cell_dir(run_dir, cell_id).glob(f"{TRIAL_PREFIX}*/{LIVE_CSV}"), reverse=True):
        number = path.parent.name.removeprefix(TRIAL_PREFIX)
        if number.isdigit() and not (path.parent / TRIAL_JSON).exists():
            rows = load_live(path.parent)
            if rows is not None:
                return int(number), rows
    return None


def _newest_trial(run_dir: Path, cell_id: str) -> int | None:
    numbers = (p.parent.name.removeprefix(TRIAL_PREFIX) for p in cell_dir(run_dir, cell_id).glob(f"{TRIAL_PREFIX}*/{TRIAL_JSON}"))
    return max((int(n) for n in numbers if n.isdigit()), default=None)


def _points(series) -> list[list[float]]:
    t, v = series
    return [[round(float(a), 3), round(float(b), 3)] for a, b in zip(t[-MAX_POINTS:], v[-MAX_POINTS:])]


def _eta(started: str | None, done: int, total: int, now: dt.datetime | None) -> float | None:
    if not started or done == 0 or done >= total:
        return None
    try:
        begun = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return None
    elapsed = ((now or dt.datetime.now(dt.timezone.utc)) - begun).total_seconds()
    return round(elapsed / done * (total - done), 1) if elapsed > 0 else None


__all__ = ["Feeds", "LiveSnapshot", "StoreError", "files_key", "snapshot", "store_key"]
