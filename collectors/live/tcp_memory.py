"""Whether the end hosts' kernels were short of TCP memory during a trial (TcpExt counters).

Once every TCP socket of a kernel together holds more than `net.ipv4.tcp_mem`'s middle value, the
kernel is under memory pressure until they fall below its first: it shrinks what each socket may
hold, and a long fat flow can collapse to a few Mb/s (seed 001's ten 1 GB-buffer streams at 183 ms
on the embedded lab: 8.6 Gb/s, then 7.6 Mb/s in a run that passed the middle value). What such a
trial measured is the host, not the path. The kernel counts each entry into pressure
(TCPMemoryPressures) and, on leaving it, the milliseconds it lasted (TCPMemoryPressuresChrono),
per network namespace, so each end host is read apart: before and after the trial, over its own
executor, like any other command.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from longhaul.hardware.executors.process import CommandError, Executor

log = logging.getLogger(__name__)

NETSTAT = "/proc/net/netstat"
ENTERED, CHRONO = "TCPMemoryPressures", "TCPMemoryPressuresChrono"


@dataclass(frozen=True)
class Pressure:
    entered: int        # times the kernel entered TCP memory pressure
    ms: int             # milliseconds of the pressure spells that ended


def pressure_counters(text: str) -> Pressure | None:
    """The two counters of /proc/net/netstat's text (a header line of names then a line of values
    per group), or None where the kernel does not count them."""
    lines = text.splitlines()
    for names, values in zip(lines, lines[1:]):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:]))
            if ENTERED not in row:
                return None
            return Pressure(int(row[ENTERED]), int(row.get(CHRONO, 0)))
    return None


def difference(before: dict[str, Pressure], after: dict[str, Pressure]) -> Pressure | None:
    """What the hosts read at both ends added up (None where no host could be read twice)."""
    hosts = [h for h in before if h in after]
    if not hosts:
        return None
    return Pressure(sum(after[h].entered - before[h].entered for h in hosts),
                    sum(after[h].ms - before[h].ms for h in hosts))


class PressureMeter:
    """`start()` before the trial's clock, `stop()` after its wind-down: the end hosts' entries
    into TCP memory pressure in between. The hosts are read at once, each over its own executor
    (an SSH host under TCG answers in a second or more). A host that cannot be read (lost, or a
    kernel without the counters) is left out: this is evidence beside a trial, never a reason to
    fail it."""

    def __init__(self, executors: dict[str, Executor]):
        self.executors = executors
        self._before: dict[str, Pressure] = {}

    def _read_one(self, host: str) -> Pressure | None:
        executor = self.executors[host]
        if executor.lost:
            return None
        try:
            done = executor.run(["cat", NETSTAT], timeout=10.0, check=False)
        except (CommandError, OSError) as exc:     # a host that cannot answer is the host watch's to name
            log.debug("no TCP memory counters from %s: %s", host, exc)
            return None
        return pressure_counters(done.stdout) if done.returncode == 0 else None

    def _read(self) -> dict[str, Pressure]:
        if not self.executors:
            return {}
        with ThreadPoolExecutor(max_workers=len(self.executors)) as pool:
            read = dict(zip(self.executors, pool.map(self._read_one, self.executors)))
        return {host: counters for host, counters in read.items() if counters is not None}

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> Pressure | None:
        return difference(self._before, self._read())
