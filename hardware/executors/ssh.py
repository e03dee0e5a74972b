"""Run argv on a real host over SSH, behind the same interface as the namespace executor.

The OpenSSH client does the transport (no extra dependency; the operator's ssh setup still applies
unless ssh_config says otherwise): keys only (BatchMode, IdentitiesOnly, no password or
keyboard-interactive), host keys checked strictly against one known_hosts file
(GlobalKnownHostsFile=/dev/null, so nothing else vouches for a host), and trust on first use only
when asked for (StrictHostKeyChecking=accept-new, which still refuses a key that *changed*).
Every command is its own ssh client process, so stopping one never disturbs another, and commands
to many hosts run concurrently from threads. Short commands (run()) share one connection per host
(ssh_masters.py: a handshake costs tens of ms on a LAN but 1.6 s on a TCG VM); long-lived ones
(start()) share a second one, up to LONG_LIVED_SESSIONS at once and then a connection each, so they
never hold back the short ones. `share = False` (the inventory's share_connections) gives every
command its own connection.

The string sent to the remote shell, and how the remote tool is cleaned up, are ssh_remote.py's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from longhaul.hardware.executors.process import CommandError, Completed, Executor, Process, ProcessTable
from longhaul.hardware.executors.ssh_masters import IDLE_S, LONG_LIVED_SESSIONS, MASTERS, MAX_SESSIONS
from longhaul.hardware.executors.ssh_remote import MARKER_RE, SIGNAL_GROUPS, announced_pgid, map_paths, remote_command

log = logging.getLogger(__name__)

def _ssh_path(path) -> str:
    """A path as an ssh option value: ssh expands %-tokens in these, and splits on spaces."""
    text = str(path).replace("%", "%%")
    if '"' in text:
        raise ValueError(f"{path}: a path with a double quote cannot be passed to ssh")
    return f'"{text}"' if any(c.isspace() for c in text) else text


class SshProcess(Process):
    """A process started on a remote host: the local ssh client, plus the remote process group."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], host: str, label: str,
                 stdout_path: Path | None, stderr_path: Path | None, executor: "SshExecutor",
                 slot: threading.BoundedSemaphore | None = None):
        """slot: the shared connection's session it holds, given back when the session has ended."""
        super().__init__(popen, argv, host, label, stdout_path, stderr_path)
        self.executor = executor
        self._slot = slot
        self.remote_pgid: int | None = None
        self._announced = threading.Event()
        self._early = bytearray()        # ssh's own complaints before the remote side ran
        self._stopped = threading.Lock()
        self._sink = open(stderr_path, "wb") if stderr_path else None
        self._relay = threading.Thread(target=self._relay_stderr, name=f"ssh-stderr-{label}", daemon=True)
        self._relay.start()

    def _relay_stderr(self) -> None:
        """Take the announced pgid off the stderr stream; pass everything else to the caller's file."""
        try:
            for line in iter(self.popen.stderr.readline, b""):
                if self.remote_pgid is None:
                    match = MARKER_RE.match(line)
                    if match:
                        self.remote_pgid = int(match.group(1))
                        self._announced.set()
                        continue
                    if len(self._early) < 8192:
                        self._early += line
                if self._sink:
                    self._sink.write(line)
                    self._sink.flush()
        except (OSError, ValueError):
            pass
        finally:
            self._announced.set()
            if self._sink:
                self._sink.close()
            self.popen.stderr.close()
            if self._slot is not None:    # stderr's end: the client and the master have let go of it
                self._slot.release()

    def await_start(self, timeout: float) -> bool:
        """True once the remote side announced its process group (False: ssh failed or hung)."""
        self._announced.wait(timeout)
        return self.remote_pgid is not None

    @property
    def early_stderr(self) -> str:
        return bytes(self._early).decode(errors="replace")

    def _drain(self) -> None:
        """Let the stderr relay finish. A shared connection's master holds the session's stderr
        until the host closes the session, which a lost host never does: then it is not waited for."""
        self._relay.join(timeout=5 if self.executor.lost is None else 0.1)

    def _finish(self) -> None:
        """The ssh client has exited: let the relay drain, and drop our end of its stdin."""
        self._drain()
        if self.popen.stdin and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        code = self.popen.wait(timeout=timeout)
        self._finish()
        return code

    def read_stderr(self) -> str:
        if self.popen.poll() is not None:
            self._drain()
        return super().read_stderr()

    def stop(self, term_timeout: float = 3.0, kill_timeout: float = 3.0, sig=signal.SIGTERM) -> int | None:
        with self._stopped:
            if self.popen.poll() is not None:
                self._finish()
                return self.popen.returncode
            if self.remote_pgid is not None:
                for signum, timeout in ((sig, term_timeout), (signal.SIGKILL, kill_timeout)):
                    if not self.executor.signal_remote([self.remote_pgid], signum):
                        break             # host unreachable: fall back to the watcher below
                    try:
                        return self.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        log.warning("%s (remote pgid %d on %s) ignored signal %d",
                                    self.label, self.remote_pgid, self.host, signum)
            # Closing ssh's stdin ends the remote group through its watcher once the session
            # notices; the local client then goes the local way (its own session, TERM, KILL).
            self._finish_stdin()
            result = super().stop(term_timeout=min(term_timeout, 1.0), kill_timeout=kill_timeout)
            self._finish()
            return result

    def _finish_stdin(self) -> None:
        if self.popen.stdin and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:
                pass


class SshExecutor(Executor):
    """Runs argv on one remote host through the OpenSSH client.

    via: an Executor whose wrap() prefixes the ssh client itself (e.g. a NetnsExecutor, so the
    client runs inside a namespace); ssh_config: a client config file instead of the user's
    (`/dev/null` for none); path_map: (controller prefix, host prefix) pairs for where longhaul
    is installed on the host (see map_paths); share: run() over one shared connection per host."""

    def __init__(self, name: str, procs: ProcessTable, host: str, user: str, key, known_hosts,
                 port: int = 22, trust_on_first_use: bool = False, via: Executor | None = None,
                 ssh_config=None, connect_timeout: float = 10.0, grace_s: int = 5, ssh: str = "ssh",
                 path_map: tuple[tuple[str, str], ...] = (), share: bool = True):
        super().__init__(name, procs)
        self.share = share
        self.path_map = tuple(path_map)
        self.host, self.user, self.port = host, user, int(port)
        self.key, self.known_hosts = Path(key), Path(known_hosts)
        self.trust_on_first_use = trust_on_first_use
        self.via = via
        self.ssh_config = ssh_config
        self.connect_timeout = connect_timeout
        self.grace_s = int(grace_s)
        self.ssh = ssh
        self._started: list[SshProcess] = []
        self._lock = threading.Lock()

    # -- the local command line ---------------------------------------------------------------

    def _client(self, sharing: list[str]) -> list[str]:
        checking = "accept-new" if self.trust_on_first_use else "yes"
        argv = [self.ssh]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        argv += ["-T",
                 "-o", "BatchMode=yes",
                 "-o", f"StrictHostKeyChecking={checking}",
                 "-o", f"UserKnownHostsFile={_ssh_path(self.known_hosts)}",
                 "-o", "GlobalKnownHostsFile=/dev/null",
                 "-o", "IdentitiesOnly=yes", "-i", _ssh_path(self.key),
                 "-o", "PasswordAuthentication=no",
                 "-o", "KbdInteractiveAuthentication=no",
                 "-o", "PreferredAuthentications=publickey",
                 *sharing,
                 "-o", f"ConnectTimeout={max(1, int(self.connect_timeout))}",
                 "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
                 "-o", "LogLevel=ERROR",        # no "Permanently added" chatter in the tool's stderr
                 "-p", str(self.port),
                 f"{self.user}@{self.host}"]
        return self.via.wrap(argv) if self.via is not None else argv

    def _shared(self, long_lived: bool = False) -> tuple[list[str], threading.BoundedSemaphore]:
        """The client options that ride on this host's shared connection (short commands', or
        long-lived processes'), and its session slots."""
        path = MASTERS.control_path(self._client([]) + (["long-lived"] if long_lived else []))
        control = self._client(["-o", f"ControlPath={_ssh_path(path)}"])
        return (["-o", "ControlMaster=auto", "-o", f"ControlPath={_ssh_path(path)}",
                 "-o", f"ControlPersist={IDLE_S}"],
                MASTERS.register(path, control, LONG_LIVED_SESSIONS if long_lived else MAX_SESSIONS))

    def ssh_argv(self, command: str, sharing: list[str] | None = None) -> list[str]:
        return [*self._client(sharing or ["-o", "ControlMaster=no", "-o", "ControlPath=none"]), "--", command]

    def wrap(self, argv: list[str], watch: bool = True, announce: bool = False,
             sharing: list[str] | None = None) -> list[str]:
        argv = map_paths([str(a) for a in argv], self.path_map)
        return self.ssh_argv(remote_command(argv, watch=watch, announce=announce, grace_s=self.grace_s), sharing)

    # -- run, start, stop ---------------------------------------------------------------------

    remote = True

    def alive(self, timeout: float) -> bool:
        """`true` through the login shell alone, over the shared connection: no watcher script,
        so an emulated host pays one exec for it, not the forks a command's watcher costs."""
        if self.lost is not None:
            return False
        sharing, slots = self._shared() if self.share else (None, contextlib.nullcontext())
        with slots:
            try:
                done = subprocess.run(self.ssh_argv("true", sharing), stdin=subprocess.DEVNULL, capture_output=True,
                                      timeout=timeout, start_new_session=True)
            except (subprocess.TimeoutExpired, OSError):
                return False
        return done.returncode == 0

    def _refuse_if_lost(self, argv: list[str]) -> None:
        if self.lost is not None:
            raise CommandError(self.name, argv, 255, f"host lost: {self.lost}")

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = True, input: str | None = None) -> Completed:
        """A lost host's command fails at once, as ssh does when it cannot reach a host (255)."""
        argv = [str(a) for a in argv]
        if self.lost is not None and not check:
            return Completed(argv, 255, "", f"host lost: {self.lost}")
        self._refuse_if_lost(argv)
        sharing, slots = self._shared() if self.share else (None, contextlib.nullcontext())
        with slots:
            if input is None:
                code, out, err = self._run_watched(argv, timeout, sharing)
            else:
                code, out, err = self._run_with_input(argv, timeout, input, sharing)
        if check and code != 0:
            raise CommandError(self.name, argv, code, err)
        return Completed(argv, code, out, err)

    def _popen(self, full: list[str], argv: list[str], **kwargs) -> subprocess.Popen:
        try:
            return subprocess.Popen(full, start_new_session=True, **kwargs)
        except FileNotFoundError as exc:
            raise CommandError(self.name, argv, 127, f"not found: {full[0]}") from exc

    def _run_watched(self, argv: list[str], timeout: float, sharing: list[str] | None) -> tuple[int, str, str]:
        # our own pipe as ssh's stdin: communicate() would close a PIPE at once, which the remote
        # watcher would take for the end of the session
        read_end, write_end = os.pipe()
        try:
            popen = self._popen(self.wrap(argv, sharing=sharing), argv, stdin=read_end, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        try:
            out, err = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.close(write_end)
            write_end = -1                    # the remote watcher now ends the command ...
            _settle(popen, self.grace_s + 5)  # ... and the session with it
            raise CommandError(self.name, argv, -1, f"timed out after {timeout}s") from None
        except BaseException:
            os.close(write_end)
            write_end = -1
            _settle(popen, 1.0)
            raise
        finally:
            if write_end >= 0:
                os.close(write_end)
        return popen.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def _run_with_input(self, argv: list[str], timeout: float, input: str,
                        sharing: list[str] | None) -> tuple[int, str, str]:
        popen = self._popen(self.wrap(argv, watch=False, announce=True, sharing=sharing), argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = popen.communicate(input=input.encode(), timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pgid = announced_pgid(exc.stderr or b"")
            if pgid is not None:
                self.signal_remote([pgid], signal.SIGKILL)
            _settle(popen, 2.0)
            raise CommandError(self.name, argv, -1, f"timed out after {timeout}s") from None
        except BaseException:
            _settle(popen, 1.0)
            raise
        lines = err.splitlines(keepends=True)
        for i, line in enumerate(lines):      # ssh or a login script may have written first
            if MARKER_RE.match(line):
                del lines[i]
                break
        return popen.returncode, out.decode(errors="replace"), b"".join(lines).decode(errors="replace")

    def start(self, argv: list[str], label: str = "", stdout: Path | None = None,
              stderr: Path | None = None) -> SshProcess:
        argv = [str(a) for a in argv]
        self._refuse_if_lost(argv)
        sharing, slot = None, None
        if self.share:
            sharing, slots = self._shared(long_lived=True)
            if slots.acquire(blocking=False):
                slot = slots
            else:
                sharing = None            # every shared session held: a connection of its own
        out = open(stdout, "wb") if stdout else subprocess.DEVNULL
        try:
            popen = self._popen(self.wrap(argv, watch=True, announce=True, sharing=sharing), argv,
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        proc = SshProcess(popen, argv, self.name, label or argv[0], stdout, stderr, self, slot)
        self.procs.add(proc)                  # registered first: an interrupt below still stops it
        with self._lock:
            self._started.append(proc)
        if not proc.await_start(self.connect_timeout + 10):
            proc.stop(term_timeout=1.0)
            code = popen.returncode if popen.returncode is not None else 255
            raise CommandError(self.name, argv, code, proc.early_stderr or "the remote side did not start")
        log.debug("started %s on %s: remote pgid %d: %s", proc.label, self.name, proc.remote_pgid, " ".join(argv))
        return proc

    def signal_remote(self, pgids: list[int], signum, timeout: float | None = None) -> bool:
        """Send a signal to remote process groups (or the process, if it leads none) over a fresh
        connection; False when the host could not be reached."""
        name = signal.Signals(signum).name.removeprefix("SIG")
        try:
            res = self.run(["sh", "-c", SIGNAL_GROUPS, "sh", name, *[str(int(p)) for p in pgids]],
                           timeout=timeout or self.connect_timeout + 5, check=False)
        except CommandError as exc:
            log.warning("could not signal %s on %s: %s", pgids, self.name, exc)
            return False
        if res.returncode != 0:
            log.warning("could not signal %s on %s: %s", pgids, self.name, res.stderr.strip()[:300])
        return res.returncode == 0

    def cleanup(self, term_timeout: float = 3.0, kill_timeout: float = 3.0) -> None:
        """End every remote process group this executor started and has not seen end."""
        with self._lock:
            procs, self._started = self._started, []
        self.stop_processes(procs, term_timeout, kill_timeout)

    def stop_processes(self, procs: list, term_timeout: float = 3.0, kill_timeout: float = 3.0,
                       sig: int = signal.SIGTERM) -> None:
        """`sig` (TERM) to all their groups in one connection (one command to a slow host takes
        seconds, and a connection per process at once overloads its sshd), then each process's own
        stop() (KILL, then the local client)."""
        live = [p for p in procs if p.poll() is None]
        groups = [p.remote_pgid for p in live if p.remote_pgid is not None]
        if groups and self.signal_remote(groups, sig):
            deadline = time.monotonic() + term_timeout
            for proc in live:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for proc in live:
            proc.stop(term_timeout=0.1, kill_timeout=kill_timeout)

    def started(self) -> list[SshProcess]:
        with self._lock:
            return list(self._started)


def _settle(popen: subprocess.Popen, timeout: float) -> None:
    """Give the ssh client `timeout` to end by itself, then end it locally (its own session)."""
    try:
        popen.communicate(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    popen.communicate()
