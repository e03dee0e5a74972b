"""CPU time the hypervisor took from this machine while we measured ("steal", from /proc/stat).

A lab emulated inside a VM whose host is oversubscribed loses its CPUs for tens of ms at a time;
the shaper and the delay line then fall behind, and what is measured meanwhile describes the
host, not the lab. Recording steal beside every verification and trial lets a report say which.
On bare metal and on hosts without the field it reads 0 / None.
"""

from __future__ import annotations

from pathlib import Path

PROC_STAT = Path("/proc/stat")
STEAL_FIELD = 7     # user nice system idle iowait irq softirq steal (guest time is inside user)


def cpu_times(text: str) -> tuple[int, int] | None:
    """(steal, total) jiffies of the aggregate `cpu` line of /proc/stat text."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:STEAL_FIELD + 2]]
            if len(values) <= STEAL_FIELD:
                return None
            return values[STEAL_FIELD], sum(values)
    return None


def steal_percent(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


class StealMeter:
    """`with StealMeter() as m: ...` then m.percent: steal over the block, % of all CPU time."""

    def __init__(self, stat_path: Path = PROC_STAT):
        self.stat_path = stat_path
        self._before: tuple[int, int] | None = None
        self.percent: float | None = None

    def _read(self) -> tuple[int, int] | None:
        try:
            return cpu_times(self.stat_path.read_text())
        except OSError:
            return None

    def __enter__(self) -> "StealMeter":
        self._before = self._read()
        return self

    def __exit__(self, *exc) -> bool:
        self.percent = steal_percent(self._before, self._read())
        return False
