"""Ships the spool (spool.py) to InfluxDB: batches from each file's recorded offset, the offset
moved only when the server took the batch.

When the server is down, slow or answers 5xx, the shipper waits (1, 2, 4 … 30 s) and sends the
same batch again; the run never waits for it. A batch that reaches the server twice (a timeout
whose request was applied after all) is harmless: the same series and timestamp overwrite. A batch
the server rejects (400) is split in halves until the bad lines are found; they go to rejected.lp
with the server's reason and the rest is shipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from longhaul.collectors.store.influx.spool import REJECTED, ShipState, SpoolError, read_batch, spool_files
from longhaul.collectors.store.influx.targets import Rejected, Target, TargetDown

log = logging.getLogger(__name__)

BACKOFF_S = (1, 2, 4, 8, 15, 30)


@dataclass
class ShipReport:
    shipped_lines: int = 0
    rejected_lines: int = 0
    unshipped_bytes: int = 0
    last_error: str | None = None
    outages: int = 0


class Shipper:
    def __init__(self, target: Target, directory: Path, batch_lines: int = 5000,
                 say: Callable[[str], None] | None = None):
        self.target = target
        self.dir = Path(directory)
        self.batch_lines = batch_lines
        self.say = say or log.warning
        self.state = ShipState(self.dir)
        self.state.target = target.destination
        self.report = ShipReport()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_since: float | None = None
        self._state_unsaved = False

    # --- one pass, for `longhaul export` and the thread ---

    def ship_available(self) -> bool:
        """Ship what the files hold now; True when nothing is left. Raises TargetDown."""
        for path in spool_files(self.dir):
            while True:
                offset = self.state.offset(path)
                lines, end = read_batch(path, offset, self.batch_lines)
                if end == offset:
                    break
                self._ship(lines)
                self.state.files[path.name] = end
                self.save_state()
                self.report.shipped_lines += len(lines)
        return self.state.unshipped_bytes(self.dir) == 0

    def save_state(self) -> None:
        """shipped.json; when its disk is full, said once, and shipping goes on from the offsets
        held here (an offset left behind on disk only means points sent again, which overwrite)."""
        try:
            self.state.save()
        except SpoolError as exc:
            if not self._state_unsaved:
                self.say(f"{exc}; shipping goes on")
            self._state_unsaved = True
        else:
            self._state_unsaved = False

    def _ship(self, lines: list[str]) -> None:
        """Send a batch; the lines the server refuses are set aside, said once a batch."""
        refused: list[tuple[str, str]] = []
        self._send(lines, refused)
        if refused:
            self._set_aside(refused)

    def _send(self, lines: list[str], refused: list[tuple[str, str]]) -> None:
        if not lines:
            return
        try:
            self.target.write(lines)
        except Rejected as exc:
            if len(lines) == 1:
                refused.append((lines[0], str(exc)))
                return
            half = len(lines) // 2
            self._send(lines[:half], refused)
            self._send(lines[half:], refused)

    def _set_aside(self, refused: list[tuple[str, str]]) -> None:
        kept = f"{self.dir / REJECTED} and in the run's files"
        try:
            with (self.dir / REJECTED).open("a", encoding="utf-8") as fh:
                fh.writelines(f"# {reason}\n{line}\n" for line, reason in refused)
        except OSError as exc:
            kept = f"the run's files ({REJECTED} cannot be written: {exc.strerror})"
        self.report.rejected_lines += len(refused)
        self.state.rejected += len(refused)
        self.say(f"InfluxDB {self.target.destination} rejected {len(refused)} point(s) ({refused[0][1]}); "
                 f"they are kept in {kept}")

    # --- the background thread, for a run ---

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="influx-shipper", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                done = self.ship_available()
            except TargetDown as exc:
                self._outage(str(exc))
                self._wake.wait(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                continue
            except Exception as exc:        # an unexpected failure must not end shipping silently
                log.exception("InfluxDB shipper")
                self._outage(f"{type(exc).__name__}: {exc}")
                self._wake.wait(BACKOFF_S[-1])
                continue
            if self._down_since is not None:
                self.say(f"InfluxDB {self.target.destination} is back after "
                         f"{time.monotonic() - self._down_since:.0f} s; the spool is being replayed")
                self._down_since = None
            attempt = 0
            self._wake.wait(1.0 if done else 0.0)

    def _outage(self, reason: str) -> None:
        self.report.last_error = reason
        if self._down_since is None:
            self._down_since = time.monotonic()
            self.report.outages += 1
            self.say(f"InfluxDB {self.target.destination}: {reason}; the run goes on and its points wait "
                     f"in {self.dir} until the server answers")

    def drain(self, timeout_s: float) -> bool:
        """Wait (polling) until everything written so far is shipped, at most timeout_s; True if it was."""
        deadline = time.monotonic() + timeout_s
        while self.state.unshipped_bytes(self.dir) > 0:
            if time.monotonic() >= deadline:
                return False
            self.wake()
            self._stop.wait(0.1)
        return True

    def stop(self, join_s: float) -> ShipReport:
        """Stop the thread; a batch in flight gets join_s (the request's timeout) to finish."""
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=join_s)
        self.report.unshipped_bytes = self.state.unshipped_bytes(self.dir)
        return self.report
