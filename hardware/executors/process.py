"""One way to run argv on a host, whatever the host is: this machine, a namespace, later SSH.

Every started process gets its own session (so a stop reaches its children), is recorded in the
run's ProcessTable by pid, and is stopped by escalation: SIGTERM to the group, wait, SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class CommandError(RuntimeError):
    def __init__(self, host: str, argv: list[str], returncode: int, stderr: str):
        self.host, self.argv, self.returncode, self.stderr = host, argv, returncode, stderr
        super().__init__(f"on {host}: {' '.join(argv)} exited {returncode}: {stderr.strip()[:500]}")


@dataclass(frozen=True)
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


class Process:
    """A process this run started; stop() is safe to call any number of times."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], host: str, label: str,
                 stdout_path: Path | None, stderr_path: Path | None):
        self.popen = popen
        self.argv = argv
        self.host = host
        self.label = label
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self, term_timeout: float = 3.0, kill_timeout: float = 3.0, sig=signal.SIGTERM) -> int | None:
        if self.popen.poll() is not None:
            return self.popen.returncode
        for signum, timeout in ((sig, term_timeout), (signal.SIGKILL, kill_timeout)):
            try:
                os.killpg(self.popen.pid, signum)  # own session: pgid == pid
            except ProcessLookupError:
                break
            try:
                return self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d on %s) ignored signal %d", self.label, self.pid, self.host, signum)
        return self.popen.poll()

    def read_stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path and self.stdout_path.exists() else ""

    def read_stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path and self.stderr_path.exists() else ""


def alive(pid: int) -> bool:
    """A process of that pid exists (anyone's: see start_ticks for whether it is still ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot, /proc/<pid>/stat field 22): with its pid,
    what names one process for good, since a pid is reused once its process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


class ProcessTable:
    """Every process of a run, so teardown can stop them all, newest first. With a journal, each
    one is also written down as it starts (pid, start time, host, label), so that a run killed
    with SIGKILL, which runs no teardown, leaves `longhaul clean` the list of what to end."""

    def __init__(self):
        self._procs: list[Process] = []
        self._lock = threading.Lock()
        self.journal: Path | None = None

    def add(self, proc: Process) -> None:
        with self._lock:
            self._procs.append(proc)
            if self.journal is not None:
                with self.journal.open("a") as fh:
                    fh.write(json.dumps({"pid": proc.pid, "start": start_ticks(proc.pid), "host": proc.host,
                                         "label": proc.label}) + "\n")

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

    def stop_all(self, term_timeout: float = 3.0) -> None:
        with self._lock:
            procs = list(reversed(self._procs))
            self._procs.clear()
        for proc in procs:
            proc.stop(term_timeout=term_timeout)


class Executor:
    """Runs argv on one host. Subclasses only say how argv reaches the host (wrap).

    `remote`: the host is a machine of its own that can fail while this one runs on (SSH); a
    host of this machine (itself, a namespace) cannot be lost apart from it. `lost`: why a remote
    host is taken as lost (hardware/host_watch.py fences it), after which no command waits on it."""

    remote = False

    def __init__(self, name: str, procs: ProcessTable):
        self.name = name
        self.procs = procs
        self.lost: str | None = None

    def alive(self, timeout: float) -> bool:
        """Whether the host answers a command within `timeout` (a host of this machine always does)."""
        return True

    def fence(self, why: str) -> None:
        self.lost = why

    def wrap(self, argv: list[str]) -> list[str]:
        return list(argv)

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = True, input: str | None = None) -> Completed:
        full = self.wrap(argv)
        try:
            res = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=input,
                                 start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.name, argv, -1, f"timed out after {timeout}s") from exc
        except FileNotFoundError as exc:
            raise CommandError(self.name, argv, 127, f"not found: {full[0]}") from exc
        if check and res.returncode != 0:
            raise CommandError(self.name, argv, res.returncode, res.stderr)
        return Completed(argv, res.returncode, res.stdout, res.stderr)

    def start(self, argv: list[str], label: str = "", stdout: Path | None = None,
              stderr: Path | None = None) -> Process:
        full = self.wrap(argv)
        out = open(stdout, "w") if stdout else subprocess.DEVNULL
        err = open(stderr, "w") if stderr else subprocess.DEVNULL
        try:
            popen = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     start_new_session=True)
        finally:
            for handle in (out, err):
                if handle is not subprocess.DEVNULL:
                    handle.close()
        proc = Process(popen, argv, self.name, label or argv[0], stdout, stderr)
        self.procs.add(proc)
        log.debug("started %s on %s: pid %d: %s", proc.label, self.name, proc.pid, " ".join(argv))
        return proc


    def namespace(self) -> tuple[Executor, str] | None:
        """(an executor of the machine this host is a network namespace of, the namespace's path
        there), or None for a host that is a machine of its own: a collector can then read several
        such hosts from one process on their machine (the tcp_info probe's --netns)."""
        return None

    def stop_processes(self, procs: list, term_timeout: float = 3.0, sig: int = signal.SIGTERM) -> None:
        """Stop several processes this executor started, each with its escalating stop from `sig`."""
        for proc in procs:
            proc.stop(term_timeout=term_timeout, sig=sig)


class LocalExecutor(Executor):
    pass


MACHINE = "machine"         # the executor of the machine that holds a NetnsExecutor's namespace
NETNS_DIR = "/run/netns"    # where `ip netns add` names a namespace


class NetnsExecutor(Executor):
    """A host that is a network namespace on this machine; `ip netns exec` execs in place, so the
    recorded pid is the tool's own pid."""

    def __init__(self, name: str, netns: str, procs: ProcessTable):
        super().__init__(name, procs)
        self.netns = netns

    def wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def namespace(self) -> tuple[Executor, str]:
        return LocalExecutor(MACHINE, self.procs), f"{NETNS_DIR}/{self.netns}"


# the shell that writes its stdin to the file it is given ($1): a file written on a lab host
_WRITE_SH = 'cat > "$1"'
WRITER = "longhaul-write"        # its name ($0)


def write_file(executor: Executor, path: str, text: str) -> None:
    """`text` into `path` on the executor's host: through stdin, so nothing of it is quoted."""
    executor.run(["sh", "-c", _WRITE_SH, WRITER, path], input=text)


def wait_until(predicate, timeout: float, interval: float = 0.02, what: str = "condition") -> None:
    """Poll until predicate() is true; readiness is observed, never assumed from a sleep."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def end_pids(live) -> None:
    """SIGTERM to the pids live() names, two seconds to go, then SIGKILL to what is left."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        pids = live()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and live():
            time.sleep(0.05)
