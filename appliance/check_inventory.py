"""`longhaul check --inventory PATH`: is every machine of a real lab ready for an experiment?

Loads the inventory, runs hardware/readiness.py's checks on every host over SSH (all hosts at
once, one thread each; a host's checks one after another, each with a timeout), and prints one
table row per check. Exit status: 0 when no check failed (warnings allowed), 1 when one did; an
unreadable or invalid inventory is a ConfigError (exit 2), raised before anything is contacted.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..drivers.tools import tool_for
from ..hardware import readiness
from ..hardware.executor import CommandError, Completed, LocalExecutor, ProcessTable
from ..hardware.inventory import load_inventory

CONNECT_TIMEOUT_S = 5        # an unreachable host fails in seconds, not ssh's default minutes
CHECK_TIMEOUT_S = 20         # each remote command (they all finish in well under a second)
OFFSET_SAMPLES = 5
_STYLE = {readiness.OK: "green", readiness.WARN: "yellow", readiness.FAIL: "bold red"}


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


def wants_from_config(config) -> readiness.Wants:
    """Which tools and congestion controls the selected profiles need (None: no config)."""
    if config is None:
        return readiness.Wants()
    names: list[str] = []
    ccas: list[str] = []
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                if flow.tool not in names:
                    names.append(flow.tool)
                cca = spec.cell.flow_cca(flow)
                if flow.protocol == "tcp" and cca not in ccas:
                    ccas.append(cca)
    exes: list[str] = []
    for name in names:
        for exe in tool_for(name).executables:
            if exe not in exes:
                exes.append(exe)
    return readiness.Wants(tuple(exes), tuple(ccas))


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


def run_checks(inventory, config=None, via=None) -> list[readiness.Row]:
    """Every host's rows, hosts in inventory order, all hosts checked at once."""
    wants = wants_from_config(config)
    with ThreadPoolExecutor(max_workers=min(16, len(inventory.hosts))) as pool:
        futures = [pool.submit(check_host, inventory, host, wants, via) for host in inventory.hosts]
        return [row for f in futures for row in f.result()]


def table(rows: list[readiness.Row], title: str) -> Table:
    out = Table(title=title)
    for column in ("host", "role", "check", "status", "detail"):
        out.add_column(column, overflow="fold")
    last = None
    for row in rows:
        first = row.host != last
        last = row.host
        out.add_row(row.host if first else "", row.role if first else "", row.check,
                    f"[{_STYLE[row.status]}]{row.status}[/{_STYLE[row.status]}]", row.detail,
                    end_section=False)
    return out


def check_inventory(inventory_path, config, *, via=None, console: Console | None = None) -> int:
    """Print the readiness table of the inventory's hosts; 0 when ready (warnings allowed), 1 not.
    via: an Executor that runs the ssh client (tests: inside a namespace)."""
    inventory = load_inventory(Path(inventory_path))      # ConfigError (exit 2) if it is not valid
    console = console or Console()
    rows = run_checks(inventory, config, via=via)
    console.print(table(rows, f"inventory {inventory.inventory.name}: readiness"))
    ready, words = readiness.verdict(rows)
    console.print(words if ready else f"[bold red]{words}[/bold red]")
    return 0 if ready else 1
