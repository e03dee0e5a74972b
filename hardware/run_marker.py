"""Which runs of longhaul are alive, and which processes each one started, so that `longhaul clean`
ends what a run killed with SIGKILL (no teardown ran) left, and nothing else.

A run's session writes /run/longhaul/<tag>.json (its pid and run directory) and a process journal
/run/longhaul/<tag>.pids: one line per process the run starts (ProcessTable.journal: pid, start
time from /proc/<pid>/stat, host, label), whatever the backend. A run whose pid is gone is stale:
its journal's processes that are still the ones it started (same pid and start time: a pid is
reused) are ended by pid. On a remote host that ends the run's remote process groups too: each
ran under a local ssh client whose end the remote watcher sees (hardware/executors/ssh.py). What a
backend leaves on this machine besides processes (namespaces, files) is its own `leftovers()`.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from longhaul.hardware.executors.process import ProcessTable, alive, end_pids, start_ticks

STATE_DIR = Path("/run/longhaul")


def _journal(tag: str) -> Path:
    return STATE_DIR / f"{tag}.pids"


def register(tag: str, run_dir: Path, procs: ProcessTable | None = None) -> None:
    """The run's marker, and its process journal where `procs` is given."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / f"{tag}.json").write_text(json.dumps({"pid": os.getpid(), "run_dir": str(run_dir)}))
    if procs is not None:
        procs.journal = _journal(tag)


def unregister(tag: str, procs: ProcessTable | None = None) -> None:
    if procs is not None:
        procs.journal = None
    (STATE_DIR / f"{tag}.json").unlink(missing_ok=True)
    _journal(tag).unlink(missing_ok=True)


@contextmanager
def marked(tag: str, run_dir: Path, procs: ProcessTable):
    """A session's span: the run marked and its processes journaled, unmarked however it ends."""
    register(tag, run_dir, procs)
    try:
        yield
    finally:
        unregister(tag, procs)


def owner_alive(tag: str) -> bool:
    try:
        pid = json.loads((STATE_DIR / f"{tag}.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    return alive(int(pid))


@dataclass(frozen=True)
class Marker:
    tag: str
    pid: int
    run_dir: Path


def live_markers() -> list[Marker]:
    """The marked sessions whose process is alive (runs, and netboot servers' work directories)."""
    found = []
    for path in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            state = json.loads(path.read_text())
            marker = Marker(path.stem, int(state["pid"]), Path(state["run_dir"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue                     # half-written, or not a marker
        if alive(marker.pid):
            found.append(marker)
    return found


def holds(suffix: str, alive: bool) -> list[Path]:
    """A run's hold files of one kind (`<tag><suffix>`: what it changed on this machine and must
    give back) whose run is (or is not) alive."""
    if not STATE_DIR.is_dir():
        return []
    return sorted(p for p in STATE_DIR.glob(f"*{suffix}") if owner_alive(p.stem) == alive)


def stale_tags() -> list[str]:
    return sorted(m.stem for m in STATE_DIR.glob("*.json") if not owner_alive(m.stem)) if STATE_DIR.is_dir() else []


def journaled(tag: str) -> list[tuple[int, str]]:
    """(pid, label) of the journal's processes that are still the ones the run started."""
    try:
        lines = _journal(tag).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:          # a line cut by the SIGKILL
            continue
        if entry.get("start") is not None and start_ticks(entry["pid"]) == entry["start"]:
            found.append((entry["pid"], f"{entry.get('label')} on {entry.get('host')}"))
    return found


def stale_processes() -> list[str]:
    return [f"process {pid} ({label}) of run {tag}" for tag in stale_tags() for pid, label in journaled(tag)]


def end_stale_processes() -> None:
    for tag in stale_tags():
        pids = [pid for pid, _ in journaled(tag)]
        end_pids(lambda pids=pids: [pid for pid in pids if alive(pid)])


def forget_stale() -> None:
    for tag in stale_tags():
        unregister(tag)
