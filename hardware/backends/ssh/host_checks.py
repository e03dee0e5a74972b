"""Readiness checks run on one host: the commands of hardware/backends/ssh/readiness.py over the host's
executor (SSH, or this machine for the controller), and the SSH clock exchange that measures a
host's clock offset. `longhaul check --inventory`, the ssh backend's preflight and the qemu
fleet's clock step all use them."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

from longhaul.hardware.backends.ssh import readiness
from longhaul.hardware.executors.process import CommandError, Completed, LocalExecutor, ProcessTable

CONNECT_TIMEOUT_S = 5        # an unreachable host fails in seconds, not ssh's default minutes
CHECK_TIMEOUT_S = 20         # each remote command (they all finish in well under a second)
OFFSET_SAMPLES = 5


def _run(executor, argv, timeout: float) -> Completed:
    """Completed whatever happens: an SSH failure or timeout is data for the interpreters."""
    try:
        return executor.run(list(argv), timeout=timeout, check=False)
    except CommandError as exc:
        code = -1 if exc.returncode == -1 else 255
        return Completed(list(argv), code, "", exc.stderr)


def _read_line(fd: int, deadline: float, buf: bytearray) -> str | None:
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode(errors="replace")


def measure_offset(executor, samples: int = OFFSET_SAMPLES, timeout: float = CHECK_TIMEOUT_S):
    """(controller time before, host's date, controller time after) for `samples` exchanges over
    one SSH session: the handshake is paid once, so each exchange costs one network round trip.
    Returns (samples, stderr)."""
    argv = executor.wrap(["sh", "-c", readiness.CLOCK_LOOP_SH], watch=False)   # reads the session's stdin
    popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    out: list[tuple[float, str, float]] = []
    buf = bytearray()
    deadline = time.monotonic() + timeout
    try:
        for i in range(samples + 1):               # the first one waits for the handshake: dropped
            before = time.time()
            popen.stdin.write(b"x\n")
            popen.stdin.flush()
            line = _read_line(popen.stdout.fileno(), deadline, buf)
            after = time.time()
            if line is None:
                break
            if i:
                out.append((before, line, after))
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            popen.stdin.close()                    # the loop reads EOF and the session ends
        except OSError:
            pass
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)   # our own ssh client, in its own session
            popen.wait()
        err = popen.stderr.read().decode(errors="replace")
        popen.stdout.close()
        popen.stderr.close()
    return out, err


def check_host(inventory, host, wants: readiness.Wants, via=None) -> list[readiness.Row]:
    checks = readiness.host_checks(host, wants)
    results: list[tuple[str, str, str]] = []
    if host.role == "controller":
        executor = LocalExecutor(host.name, ProcessTable())
        results.append(("reachable", readiness.OK, "this machine (runs longhaul; no SSH)"))
    else:
        executor = inventory.executor(host.name, ProcessTable(), via=via)
        executor.connect_timeout = CONNECT_TIMEOUT_S
        reach = readiness.reach_check()
        done = _run(executor, reach.argv, CONNECT_TIMEOUT_S + CHECK_TIMEOUT_S)
        results += readiness.interpret_reach(host, done)
        if any(status == readiness.FAIL and name != "os" for name, status, _ in results):
            return readiness.rows_for(host, results)        # no SSH: nothing else can be asked
    for check in checks:
        if check.kind == "offset":
            samples, err = measure_offset(executor)
            if samples:
                status, detail = readiness.clock_offset(samples)
            else:
                failure = readiness.classify_ssh(err, 255)
                status, detail = readiness.FAIL, (f"{failure[0]}: {failure[1]}" if failure else "no answer")
        else:
            status, detail = readiness.interpret(check, _run(executor, check.argv, CHECK_TIMEOUT_S))
        results.append((check.name, status, detail))
    return readiness.rows_for(host, results)
