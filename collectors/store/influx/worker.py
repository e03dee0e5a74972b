"""The InfluxDB worker: a process of its own, at a lower CPU priority, that turns the run's events
into points, spools them and ships the spool (mirror.py starts it and feeds it).

Turning a trial's tables into line protocol is Python work (about 10,000 points a second here);
in the runner's process it would take the interpreter lock from the runner's own threads during
the next trial. In a process of its own, niced, it takes only what the trial leaves over.

    python -m longhaul.collectors.store.influx.worker RUN_DIR SETTINGS_JSON

Events arrive on stdin, one JSON object a line: {"event": "run", "manifest": ...}, {"event":
"cell", "entry": ...}, {"event": "verification", "entry": ..., "verification": ...}, {"event":
"trial", "entry": ..., "trial": ...}, {"event": "finish", "drain_s": S}. The credential comes in
the environment variable CREDENTIAL_ENV, never on the command line. Messages for the terminal go
to stderr, one a line. The end of stdin without "finish" (the runner was killed) leaves the spool
marked incomplete: `longhaul export` rebuilds it from the run's files.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.shipper import Shipper, ShipReport
from longhaul.collectors.store.influx.spool import Spool, SpoolError, spool_dir
from longhaul.collectors.store.influx.targets import Target, target_for
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.records import CellEntry, TrialSummary, Verification
from longhaul.core.tables import read_json

log = logging.getLogger(__name__)

CREDENTIAL_ENV = "LONGHAUL_INFLUX_WORKER_CREDENTIAL"
NICE = 10


class SpoolWorker:
    """Events -> spool (a thread), spool -> server (the shipper's thread)."""

    def __init__(self, settings: InfluxSettings, target: Target, run_dir: Path, say: Callable[[str], None]):
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.say = say
        self.dir = spool_dir(self.run_dir)
        self.spool = Spool(self.dir, settings.batch_lines)
        self.shipper = Shipper(target, self.dir, settings.batch_lines, say)
        self.target = target
        manifest_path = self.run_dir / fmt.MANIFEST     # a resumed run: the manifest is there already
        self.manifest = RunManifest.from_dict(read_json(manifest_path) if manifest_path.is_file() else {})
        self.problems: list[str] = []
        self.failed: str | None = None      # the spool could not be written: export rebuilds it
        self.finished = False
        self._events: queue.Queue = queue.Queue()
        self._spooler = threading.Thread(target=self._spool_loop, name="influx-spooler", daemon=True)
        self.shipper.state.complete = False  # until "finish" has spooled every event
        self.shipper.save_state()
        self._spooler.start()
        self.shipper.start()

    def put(self, event: dict) -> None:
        self._events.put(event)

    def end(self, drain_s: float) -> ShipReport:
        """No more events: spool what is queued, mark the spool complete if "finish" came, ship for
        at most drain_s, stop."""
        self._events.put(None)
        self._spooler.join()
        if self.failed is None and self.finished:
            self.shipper.state.complete = True
            self.shipper.save_state()
        shipped_all = self.shipper.drain(drain_s)
        report = self.shipper.stop(join_s=self.settings.timeout_s + 5)
        self.target.close()
        for problem in self.problems[:10]:
            self.say(f"InfluxDB points: {problem}")
        if not shipped_all:
            self.say(f"InfluxDB {self.target.destination} did not take every point in {drain_s:g} s "
                     f"({report.last_error or 'still shipping'}); {report.unshipped_bytes} bytes wait in {self.dir}: "
                     f"`longhaul export {self.run_dir}` ships them")
        return report

    def _spool_loop(self) -> None:
        while True:
            event = self._events.get()
            try:
                if event is not None and self.failed is None:
                    self.spool.append(self._lines(event))
                if event is None or self._events.empty():
                    self.spool.flush()
                    self.shipper.wake()
            except SpoolError as exc:
                self.failed = str(exc)
                self.say(f"{exc}; the run goes on, its files hold every point: ship them later with "
                         f"`longhaul export {self.run_dir}`")
            except Exception as exc:        # a bad record must not stop the rest of the run's points
                log.exception("InfluxDB spool")
                self.problems.append(f"{(event or {}).get('event', 'flush')}: {type(exc).__name__}: {exc}")
            if event is None:
                return

    def _lines(self, event: dict) -> list[str]:
        kind = event["event"]
        if kind == "run":             # the config and profiles are written after it: they come at finish
            self.manifest = RunManifest.from_dict(event["manifest"])
            return points.run_lines(self.manifest)
        if kind == "cell":
            return points.cell_lines(self.manifest, CellEntry.from_dict(event["entry"]))
        if kind == "verification":
            return points.verification_lines(self.manifest, CellEntry.from_dict(event["entry"]),
                                             Verification.from_dict(event["verification"]))
        if kind == "trial":
            entry, trial = CellEntry.from_dict(event["entry"]), TrialSummary.from_dict(event["trial"])
            problems: list[str] = []
            lines = list(points.trial_lines(self.manifest, entry, trial,
                                            fmt.trial_dir(self.run_dir, entry.id, trial.trial), problems))
            self.problems.extend(problems)
            return lines + points.cell_lines(self.manifest, entry)
        if kind == "finish":          # the files hold the final manifest and summary
            self.finished = True
            self.manifest = RunManifest.from_dict(read_json(self.run_dir / fmt.MANIFEST))
            return (points.run_lines(self.manifest, read_json(self.run_dir / fmt.SUMMARY))
                    + points.source_lines(self.manifest, self.run_dir))
        raise ValueError(f"unknown event {kind!r}")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir, settings = Path(args[0]), InfluxSettings.model_validate(json.loads(args[1]))
    os.nice(NICE)
    credential = Credential(os.environ.get(CREDENTIAL_ENV) or None, "the run's credential")
    worker = SpoolWorker(settings, target_for(settings, credential), run_dir, _say)
    drain_s = settings.drain_s
    for line in sys.stdin:
        event = json.loads(line)
        worker.put(event)
        if event["event"] == "finish":
            drain_s = float(event.get("drain_s", drain_s))
            break
    worker.end(drain_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
