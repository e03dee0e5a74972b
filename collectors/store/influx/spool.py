"""The run's spool: line protocol appended to files in `<run>/influx/`, shipped from recorded offsets.

Every point goes to a spool file first and is shipped from there, so a database that is down, slow
or frozen costs the run nothing and loses nothing: the spool grows and the shipper catches up. The
files are append-only; `shipped.json` records how far each has been shipped (an offset at a line
boundary), rewritten atomically after every batch the server took.

    spool.lp              longhaul's own points (points.py)
    telegraf-<host>.lp    what Telegraf measured on each lab host (collectors/live/telegraf.py)
    rejected.lp           lines the server refused (400: a field type conflict, a bad line), each
                          after a `# ` comment with the server's reason
    shipped.json          {"files": {name: offset}, "complete": bool, "target": ...}
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path

SPOOL_DIR = "influx"            # below the run directory
SPOOL = "spool.lp"
TELEGRAF_GLOB = "telegraf-*.lp"
REJECTED = "rejected.lp"
STATE = "shipped.json"


class SpoolError(OSError):
    """The spool cannot be written (its disk is full): the file store still holds every point."""


def spool_dir(run_dir: Path) -> Path:
    return Path(run_dir) / SPOOL_DIR


class Spool:
    """Appends lines to spool.lp, flushed to the file in batches (and on flush()). One thread
    writes it (the worker's spooler, or export's rebuild)."""

    def __init__(self, directory: Path, batch_lines: int = 5000):
        self.dir = Path(directory)
        self.path = self.dir / SPOOL
        self.batch_lines = batch_lines
        self._pending: list[str] = []
        self.written = 0            # lines flushed to the file by this object

    def append(self, lines: Iterable[str]) -> None:
        self._pending.extend(line for line in lines if line)
        if len(self._pending) >= self.batch_lines:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        data = ("\n".join(self._pending) + "\n").encode("utf-8")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(data)
        except OSError as exc:
            reason = "its disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
            raise SpoolError(exc.errno, f"cannot write the InfluxDB spool {self.path}: {reason}") from exc
        self.written += len(self._pending)
        self._pending = []


def spool_files(directory: Path) -> list[Path]:
    """The files the shipper ships: spool.lp first, then each host's Telegraf file."""
    directory = Path(directory)
    own = [directory / SPOOL] if (directory / SPOOL).is_file() else []
    return own + sorted(directory.glob(TELEGRAF_GLOB))


def read_batch(path: Path, offset: int, max_lines: int, max_bytes: int = 4 << 20) -> tuple[list[str], int]:
    """Up to max_lines whole lines from `offset` (a line still being written is left for later),
    and the offset after them."""
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read(max_bytes)
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    lines = data[:end].split(b"\n")
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        end = sum(len(line) + 1 for line in lines) - 1
    return [line.decode("utf-8", "replace") for line in lines if line.strip()], offset + end + 1


class ShipState:
    """shipped.json: the offset shipped of each file, whether spool.lp holds every event of the
    run (a spool that failed or a longhaul that was killed leaves it false: export rebuilds it)."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / STATE
        doc = {}
        if self.path.is_file():
            try:
                doc = json.loads(self.path.read_text())
            except ValueError:
                doc = {}
        self.files: dict[str, int] = {k: int(v) for k, v in (doc.get("files") or {}).items()}
        self.complete: bool = bool(doc.get("complete", False))
        self.rejected: int = int(doc.get("rejected", 0))
        self.target: str | None = doc.get("target")
        self._lock = threading.Lock()      # the shipper's thread and the worker's main thread both save

    def offset(self, path: Path) -> int:
        return self.files.get(Path(path).name, 0)

    def save(self) -> None:
        """Written atomically. When it cannot be (the disk is full) the file keeps its last state:
        offsets that are behind only make the shipper send points again, which overwrite."""
        with self._lock:
            tmp = self.path.with_suffix(".tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(json.dumps({"files": dict(self.files), "complete": self.complete,
                                           "rejected": self.rejected, "target": self.target}, indent=1))
                os.replace(tmp, self.path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise SpoolError(exc.errno, f"cannot write {self.path}: {exc.strerror}") from exc

    def unshipped_bytes(self, directory: Path) -> int:
        return sum(max(0, p.stat().st_size - self.offset(p)) for p in spool_files(directory))


def shipping_summary(run_dir: Path) -> str | None:
    """One line on the run's InfluxDB shipping, for the report; None for a run without a spool."""
    directory = spool_dir(run_dir)
    if not (directory / STATE).is_file():
        return None
    state = ShipState(directory)
    waiting = state.unshipped_bytes(directory)
    parts = [f"to {state.target}" if state.target else "to InfluxDB"]
    parts.append("every point shipped" if waiting == 0 else f"{waiting} bytes wait in {SPOOL_DIR}/ (longhaul export)")
    if state.rejected:
        parts.append(f"{state.rejected} point(s) rejected ({SPOOL_DIR}/{REJECTED})")
    if not state.complete:
        parts.append("the spool is incomplete (longhaul export rebuilds it from the files)")
    return "; ".join(parts)
