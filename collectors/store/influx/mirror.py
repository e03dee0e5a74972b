"""InfluxMirror: the RunWriter that puts a run into InfluxDB beside its files.

The file store writes every event first and hands it on (writer.FileRunWriter's mirrors). The
mirror writes it, as one JSON line, to its worker process (worker.py), which spools and ships; a
call returns as soon as the line is in the pipe, so a trial never waits for the database. The
mirror owns the worker: its own session, its pid kept, and at the run's end (finish) "finish",
then at most drain_s + the request timeout for the last batch, then SIGTERM and SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.targets import Refused, Target, TargetDown, target_for
from longhaul.collectors.store.influx.worker import CREDENTIAL_ENV
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.records import CellEntry, TrialSummary, Verification
from longhaul.core.errors import PreflightError
from longhaul.hardware.executors.process import Process

log = logging.getLogger(__name__)

WORKER_MODULE = "longhaul.collectors.store.influx.worker"
INTERRUPTED_DRAIN_S = 3.0      # an interrupted run's user waits at the terminal; export does the rest


def preflight(settings: InfluxSettings, credential: Credential) -> Target:
    """The target, checked: reachable, the credential taken, the database or bucket there.
    PreflightError (exit 2) otherwise, before any lab is built."""
    target = target_for(settings, credential)
    try:
        target.check()
    except (Refused, TargetDown) as exc:
        target.close()
        raise PreflightError(f"[store] influx: {exc}") from None
    return target


class InfluxMirror:
    """A RunWriter (collectors/store/writer.py) feeding the run's InfluxDB worker."""

    def __init__(self, settings: InfluxSettings, credential: Credential, run_dir: Path,
                 say: Callable[[str], None] | None = None):
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.run_id = self.run_dir.name
        self.say = say or log.warning
        self.broken: str | None = None
        env = {**os.environ, CREDENTIAL_ENV: credential.secret or ""}
        argv = [sys.executable, "-m", WORKER_MODULE, str(self.run_dir), settings.model_dump_json()]
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env=env, start_new_session=True, text=True, bufsize=1)
        self.proc = Process(popen, argv, "localhost", "influx worker", None, None)
        self._relay = threading.Thread(target=self._relay_messages, name="influx-messages", daemon=True)
        self._relay.start()

    def _relay_messages(self) -> None:
        for line in self.proc.popen.stderr:
            if line.strip():
                self.say(line.rstrip())

    def _send(self, event: dict) -> None:
        if self.broken is not None:
            return
        try:
            self.proc.popen.stdin.write(json.dumps(event) + "\n")
        except (BrokenPipeError, ValueError, OSError) as exc:
            self.broken = f"the InfluxDB worker (pid {self.proc.pid}) is gone ({exc}, exit {self.proc.poll()})"
            self.say(f"{self.broken}; the run's files hold every point: `longhaul export {self.run_dir}` ships them")

    # --- RunWriter ---

    def write_manifest(self, manifest: RunManifest) -> None:
        self._send({"event": "run", "manifest": manifest.to_dict()})

    def begin_cell(self, entry: CellEntry) -> CellEntry:
        self._send({"event": "cell", "entry": entry.to_dict()})
        return entry

    def record_verification(self, entry: CellEntry, verification: Verification) -> None:
        self._send({"event": "verification", "entry": entry.to_dict(), "verification": verification.to_dict()})

    def record_trial(self, entry: CellEntry, trial: TrialSummary) -> None:
        self._send({"event": "trial", "entry": entry.to_dict(), "trial": trial.to_dict()})

    def end_cell(self, entry: CellEntry, status: str, error: str | None = None) -> None:
        self._send({"event": "cell", "entry": entry.to_dict()})

    def finish(self, status: str) -> None:
        drain_s = self.settings.drain_s if status != "interrupted" else min(INTERRUPTED_DRAIN_S, self.settings.drain_s)
        self._send({"event": "finish", "drain_s": drain_s})
        self.close(drain_s)

    def close(self, drain_s: float) -> None:
        """Let the worker ship for drain_s (and the last request its timeout), then stop it."""
        try:
            self.proc.popen.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=drain_s + self.settings.timeout_s + 10)
            if code != 0:
                self.say(f"the InfluxDB worker (pid {self.proc.pid}) exited {code}; `longhaul export "
                         f"{self.run_dir}` ships what is left")
        except subprocess.TimeoutExpired:
            self.say(f"the InfluxDB worker (pid {self.proc.pid}) did not end; stopping it; `longhaul export "
                     f"{self.run_dir}` ships what is left")
        self.proc.stop()
        self._relay.join(timeout=5)
