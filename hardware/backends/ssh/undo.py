"""What a run changed on real hosts, written down before each change, so that `longhaul clean`
puts the hosts back after a run that ran no teardown (its controller killed with SIGKILL, or the
machine lost power).

A run's teardown undoes its changes from closures on a CleanupStack; nothing of those survives the
controller's process. So each change's undo is also journaled as data, before the change is made:
/run/longhaul/<tag>.undo holds the inventory the run used and one line per undo (which lab, host
and machine, what, and the argv to run there). A lab whose teardown read every host back as found
takes its lines out; what is left belongs to a run that never finished its teardown, or to a host
that was lost then, and `longhaul clean` runs it over SSH, newest first, once the run's process is
gone (hardware/run_marker.py). The run's processes on the hosts end with their ssh clients, which
are the run's process journal's (run_marker.end_stale_processes).
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from longhaul.hardware import run_marker
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import ProcessTable
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.executors.ssh_masters import MASTERS

log = logging.getLogger(__name__)

SUFFIX = ".undo"


@dataclass(frozen=True)
class Undo:
    lab: str            # "<session>/<lab tag>": a run builds a lab per topology, a resume anew
    host: str           # the lab's name for it (S1, R2, ...)
    machine: str        # the inventory's
    what: str
    argv: tuple[str, ...]


class UndoJournal:
    """One run's journal: a header line naming the inventory, then an Undo a line."""

    def __init__(self, tag: str, inventory_path: Path):
        self.path = run_marker.STATE_DIR / f"{tag}{SUFFIX}"
        self.inventory_path = Path(inventory_path)
        # a resumed run has the same tag and numbers its labs from 1 again: a lab is this session's
        self._session = secrets.token_hex(3)

    def add(self, lab: str, host: str, machine: str, what: str, argvs: list[list[str]]) -> None:
        """Written (and closed) before the change it undoes is made."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [] if self.path.exists() else [json.dumps({"inventory": str(self.inventory_path)})]
        lines += [json.dumps(asdict(Undo(f"{self._session}/{lab}", host, machine, what, tuple(argv))))
                  for argv in argvs]
        with self.path.open("a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def done(self, lab: str) -> None:
        """The lab's teardown put every host back: its lines go (the file with the last of them)."""
        inventory, undos = read(self.path)
        kept = [u for u in undos if u.lab != f"{self._session}/{lab}"]
        _write(self.path, inventory, kept)


def _write(path: Path, inventory: Path | None, undos: list[Undo]) -> None:
    """The journal as `undos` leave it: gone with the last of them."""
    if not undos:
        path.unlink(missing_ok=True)
        return
    path.write_text("".join(json.dumps(x) + "\n" for x in [{"inventory": str(inventory)}, *map(asdict, undos)]))


def read(path: Path) -> tuple[Path | None, list[Undo]]:
    """(the inventory, the undos in the order they were written); a line cut by a kill is skipped."""
    inventory: Path | None = None
    undos = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "inventory" in entry:
            inventory = Path(entry["inventory"])
        else:
            undos.append(Undo(**{**entry, "argv": tuple(entry["argv"])}))
    return inventory, undos


def leftovers(remove: bool) -> list[str]:
    """The undos of runs no longer running; run on their hosts, newest first, when asked. A host
    that does not answer keeps its lines for the next `longhaul clean`, and says so."""
    found = []
    for path in run_marker.holds(SUFFIX, alive=False):
        inventory, undos = read(path)
        found += [f"{u.host} ({u.machine}): {u.what} (run {path.stem} ended without its teardown)" for u in undos]
        if remove:
            failed = _undo(inventory, undos)
            _write(path, inventory, failed)
            found += [f"{u.host} ({u.machine}): could not {u.what}; left for the next clean" for u in failed]
    return found


def _undo(inventory_path: Path | None, undos: list[Undo]) -> list[Undo]:
    """Runs each undo; returns those that could not run (their hosts unreachable, or no inventory)."""
    if inventory_path is None or not inventory_path.is_file():
        log.error("the inventory %s is gone: the hosts' changes cannot be undone from here", inventory_path)
        return undos
    inventory = load_inventory(inventory_path)
    procs = ProcessTable()
    executors: dict[str, SshExecutor | None] = {}      # machine -> its executor, None: no answer
    failed: list[Undo] = []
    try:
        for undo in reversed(undos):
            if undo.machine not in executors:
                executor = inventory.executor(undo.machine, procs)
                executors[undo.machine] = executor if executor.alive(10) else None
            executor = executors[undo.machine]
            if executor is None:
                failed.insert(0, undo)
            else:
                executor.run(list(undo.argv), check=False)     # already undone is as good as undone
    finally:
        procs.stop_all()
        MASTERS.close_all()
    return failed
