"""Runs an operator starts from the console: a profile (`longhaul run --profile NAME`) or a
regression suite (`longhaul suite NAME`, which compares with the suite's previous run), as
processes of the console's own (argv lists, never a shell), writing into the console's store.

One lab run at a time: a start is refused while any longhaul run is live on this controller (its
marker under /run/longhaul), or while one this console started has not ended. The console owns
what it starts: it reaps them, keeps each one's output (what a run says before its store exists,
such as a refused config) in a log of its own, and on shutdown interrupts the runs still going as
Ctrl-C would, so that their own teardown restores the lab."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.appliance.config.load import load_config
from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.console.index import live_runs
from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.core.errors import ConfigError

KINDS = ("profile", "suite")
FOUND_WAIT_S = 20.0          # how long a start waits to see its run's store (a refused config ends sooner)
POLL_S = 0.2
STOP_WAIT_S = 120.0          # an interrupted run's teardown, at the console's shutdown
TAIL_BYTES = 8000


class StartRefused(Exception):
    """Why this start cannot be made now (the message is for the operator)."""


@dataclass(frozen=True)
class Startable:
    name: str
    description: str
    cells: int
    suite: bool              # a regression suite: it has a calibration cell (docs/regression.md)
    problem: str = ""        # the profile does not load: why (it cannot be started)


@dataclass
class Started:
    number: int
    kind: str
    name: str
    argv: list[str]
    log: Path
    started: str
    proc: subprocess.Popen = field(repr=False)
    run_dir: Path | None = None          # once its marker names it

    @property
    def status(self) -> int | None:
        return self.proc.poll()

    def tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


def startables(config: Path) -> list[Startable]:
    """Every profile of the config's profile folder, as the runs page offers them."""
    out = []
    for path in sorted(load_config(config).profile_dir.glob("*.toml")):
        try:
            profile = load_profile(path)
        except ConfigError as e:
            out.append(Startable(path.stem, "", 0, False, str(e)))
            continue
        out.append(Startable(profile.name, profile.meta.description, len(profile.cells),
                             any(c.labels.get(CALIBRATION_LABEL) for c in profile.cells)))
    return out


class Starts:
    def __init__(self, config: Path, store: Path, logs: Path | None = None):
        self.config, self.store = Path(config), Path(store)
        self._logs, self._own_logs = (Path(logs) if logs else None), logs is None
        self.started: list[Started] = []
        self._lock = threading.Lock()

    @property
    def logs(self) -> Path:
        """Where the starts' output goes: the folder given, else a temporary one made at the first start."""
        if self._logs is None:
            self._logs = Path(tempfile.mkdtemp(prefix="longhaul-console-"))
        self._logs.mkdir(parents=True, exist_ok=True)
        return self._logs

    def argv(self, kind: str, name: str) -> list[str]:
        cli = [sys.executable, "-m", "longhaul.appliance.cli"]
        if kind == "suite":
            return [*cli, "suite", name, "--config", str(self.config), "--out", str(self.store)]
        return [*cli, "run", "--config", str(self.config), "--profile", name, "--out", str(self.store)]

    def start(self, kind: str, name: str) -> Started:
        """Start it, or StartRefused; returns once its run is under way (or has ended, or FOUND_WAIT_S)."""
        if kind not in KINDS:
            raise StartRefused(f"start a profile or a suite, not {kind!r}")
        known = {s.name: s for s in startables(self.config)}
        if name not in known or known[name].problem:
            raise StartRefused(f"no startable profile {name!r} in {load_config(self.config).profile_dir}")
        if kind == "suite" and not known[name].suite:
            raise StartRefused(f"{name} is not a regression suite (it has no calibration cell)")
        with self._lock:
            if live := live_runs():
                raise StartRefused(f"a run is live on this controller ({live[0].run_dir.name}, pid {live[0].pid}): "
                                   "one lab run at a time")
            if busy := [s for s in self.started if s.status is None]:
                raise StartRefused(f"{busy[0].kind} {busy[0].name} (pid {busy[0].proc.pid}), started here, "
                                   "has not ended")
            number = len(self.started) + 1
            log = self.logs / f"start-{number}-{name}.log"
            argv = self.argv(kind, name)
            with open(log, "wb") as out:
                proc = subprocess.Popen(argv, cwd=self.config.parent, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            started = Started(number, kind, name, argv, log,
                              dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), proc)
            self.started.append(started)
        self.find_run(started, FOUND_WAIT_S)
        return started

    def find_run(self, started: Started, wait_s: float) -> Path | None:
        """Its run directory, from the marker its session writes, once the run's store is there
        (polled until wait_s or its end): the session is marked before the runner writes the
        manifest, and a page sent to a run without one is a 404 that never becomes the run."""
        deadline = time.monotonic() + wait_s
        while started.run_dir is None:
            marker = next((m for m in live_runs() if m.pid == started.proc.pid), None)
            if marker is not None:
                started.run_dir = Path(marker.run_dir)
            elif started.status is not None or time.monotonic() >= deadline:
                break
            else:
                time.sleep(POLL_S)
        return started.run_dir

    def close(self) -> None:
        """Interrupt what is still running, as Ctrl-C would, and wait for its teardown."""
        going = [s for s in self.started if s.status is None]
        for s in going:
            os.kill(s.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_WAIT_S
        for s in going:
            try:
                s.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                s.proc.terminate()
                s.proc.wait()
        if self._own_logs and self._logs is not None:
            shutil.rmtree(self._logs, ignore_errors=True)
