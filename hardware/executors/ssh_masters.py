"""One SSH connection per host, shared by the short commands an SshExecutor runs (OpenSSH's
connection sharing: ControlMaster, ControlPath, ControlPersist).

Why: every new connection costs a full handshake on the host. Under TCG a VM's sshd needs over a
second for it: through SshExecutor, `true` took 1.9 s over a new connection and 0.37 s over the
shared one, `tc -s qdisc show` 1.5 and 0.5 s (bench/ssh_sharing.py, bench/RESULTS-ssh.md; what
remains is the remote shell and its watcher), and a trial runs hundreds of short commands
(readiness polls, counters, file reads), so on the qemu lab the handshakes were most of a cell's
time: the VM tests took 16.5 min instead of 26.3.

How: run()'s ssh clients carry ControlMaster=auto, a ControlPath in this controller's private
directory, and ControlPersist. The first client becomes the master: OpenSSH forks it into the
background with its stdio on /dev/null, so it holds none of the caller's pipes, and the original
client carries on as an ordinary client of it. Two clients racing to be first cost nothing: the
loser finds the socket taken and connects on its own. A master exits by itself IDLE_S after its last
session, so a controller that died leaves none for long; close_all() ends them all at once: `ssh -O
exit` over each socket, then TERM and KILL to the pid the master reports about itself (`-O check`),
checked against that pid's command line before any signal. Backends call it when their session
ends; atexit calls it as a last resort.

Long-lived processes (start()) share a second connection per host, apart from the short commands':
sshd allows MaxSessions (10 by default) sessions per connection, and a trial's servers, probes and
agents must never hold back its readiness polls. Under TCG a handshake per start() put a trial's
first burst 10-20 s after its planned start (probe, sampler and client each waited for one). Short
commands through one master are held to MAX_SESSIONS at a time; long-lived ones to
LONG_LIVED_SESSIONS, and a process started while all of those are held gets a connection of its own.

A socket's name hashes every option that decides which host it is and how it is trusted (user,
host, port, key, known_hosts, trust on first use, client config, the namespace the client runs in),
so an executor with a stricter known_hosts never rides on a connection that another one accepted.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from longhaul.hardware.executors.process import alive

log = logging.getLogger(__name__)

IDLE_S = 60
DIR_PARENT = Path("/tmp")
DIR_PREFIX = "lh-ssh-"
_OWNED_DIR = re.compile(rf"^{DIR_PREFIX}(?P<pid>\d+)-")
MAX_SESSIONS = 6            # under sshd's default MaxSessions (10), with room for an operator's own
LONG_LIVED_SESSIONS = 8     # a connection of their own: under MaxSessions, and never waited for
_MASTER_PID = re.compile(r"Master running \(pid=(\d+)\)")


class Masters:
    """The shared connections of this controller process: their sockets and how to reach them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._control: dict[str, list[str]] = {}        # socket -> argv prefix that talks to it

    def control_path(self, identity: list[str]) -> str:
        with self._lock:
            if self._dir is None:
                # short (a unix socket path has 108 bytes, ssh needs 17 more for its temporary
                # name) and private: whoever can open the socket can run commands on the host;
                # named for this process, so that `longhaul clean` knows a dead controller's
                self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=str(DIR_PARENT)))
            digest = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:16]
            return str(self._dir / digest)

    def register(self, path: str, control_argv: list[str], sessions: int = MAX_SESSIONS) -> threading.BoundedSemaphore:
        """Remember how to reach the master at path (control_argv + [op, destination] asks it
        something); the semaphore bounds the sessions sent through it at once."""
        with self._lock:
            self._control.setdefault(path, list(control_argv))
            return self._slots.setdefault(path, threading.BoundedSemaphore(sessions))

    def close_all(self, timeout: float = 5.0) -> list[str]:
        """End every master this process made; what could not be ended, for the log."""
        with self._lock:
            control, directory = dict(self._control), self._dir
            self._control.clear()
            self._slots.clear()
            self._dir = None
        problems = [p for path, argv in control.items() if (p := _close(path, argv, timeout))]
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        for problem in problems:
            log.warning("ssh connection sharing: %s", problem)
        return problems


def _ask(control_argv: list[str], op: str) -> subprocess.CompletedProcess:
    return subprocess.run([*control_argv[:-1], "-O", op, control_argv[-1]], capture_output=True, text=True,
                          timeout=10, stdin=subprocess.DEVNULL, start_new_session=True)


def _close(path: str, control_argv: list[str], timeout: float) -> str | None:
    if not os.path.exists(path):
        return None                              # never made, or already gone idle
    try:
        found = _MASTER_PID.search(_ask(control_argv, "check").stderr)
        _ask(control_argv, "exit")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path}: {exc}"
    if found is None:
        return None                              # it had just exited by itself
    pid = int(found.group(1))
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None and _is_master(pid, path):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while _is_master(pid, path) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _is_master(pid, path):
            return None
    return f"master pid {pid} for {path} did not exit"


def _is_master(pid: int, path: str) -> bool:
    """pid is still that master (its command line names its socket), not a reused pid."""
    try:
        return path.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def leftovers(remove: bool) -> list[str]:
    """The masters of controllers that died without close_all() (a run killed with SIGKILL): each
    keeps its sessions on the hosts open until IDLE_S after the last, so `longhaul clean` ends
    them, and their directories, when asked."""
    found = []
    for directory in sorted(DIR_PARENT.glob(f"{DIR_PREFIX}*")):
        owner = _OWNED_DIR.match(directory.name)
        if owner is None or alive(int(owner["pid"])):
            continue
        sockets = [p for p in directory.iterdir() if p.is_socket()] if directory.is_dir() else []
        found += [f"ssh connection {p} of controller {owner['pid']}" for p in sockets]
        if remove:
            problems = [p for path in sockets if (p := _close(str(path), ["ssh", "-S", str(path), "lh"], 5.0))]
            found += [f"could not end: {p}" for p in problems]
            if not problems:
                shutil.rmtree(directory, ignore_errors=True)
    return found


MASTERS = Masters()
atexit.register(MASTERS.close_all)
