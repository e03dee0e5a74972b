"""This machine's TCP memory, raised for an embedded-lab session whose buffers need it, and given back.

`net.ipv4.tcp_mem` (low, pressure, high, in pages) is one per kernel, not per network namespace, so
on the embedded lab every sender's and receiver's sockets draw on one allowance, where two real
hosts would each have their own. Past its middle value the kernel shrinks what every socket may
hold, and a long fat flow can collapse (seed 001's ten 1 GB-buffer streams at 183 ms: 8.6 Gb/s in
one run, 7.6 Mb/s in another, with TCP holding 1.2 GB against a threshold of 1.5 GB). A session
whose cells allow more socket memory than that raises it, at most to a share of this machine's
RAM, and puts the value it found back at its end.

What it found is written to the run's state directory before it writes the new value, so a run
killed before its teardown leaves a record that `longhaul clean` restores (hardware/backends/netns/
leftovers.py). One lab run at a time holds this machine (hardware/run_marker.py), so no other run
shares the value; a value someone else changed meanwhile is left as they set it.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from longhaul.hardware import run_marker

log = logging.getLogger(__name__)

TCP_MEM = Path("/proc/sys/net/ipv4/tcp_mem")
MEMINFO = Path("/proc/meminfo")
SYSCTL = "net.ipv4.tcp_mem"
# the most of this machine's RAM the raised limits let TCP take (`high`); the pressure value sits
# at two thirds of it, as the kernel's own defaults (about 1/16, 1/12 and 1/8 of RAM) space them
RAM_SHARE = 0.5

Limits = tuple[int, int, int]


@dataclass(frozen=True)
class Change:
    before: Limits
    applied: Limits

    def record(self, tag: str) -> dict:
        """The manifest's host_tuning entry: what the session changed on this machine."""
        text = {"before": {SYSCTL: _text(self.before)}, "applied": {SYSCTL: _text(self.applied)}}
        return {"backend": "netns", "tag": tag, "hosts": {"machine": {"sysctl": text}}}


def raised(current: Limits, demand_bytes: int, ram_bytes: int, page: int) -> Limits | None:
    """Limits whose pressure value holds `demand_bytes` of socket memory (at most two thirds of
    RAM_SHARE of the RAM), or None where the current ones already do. Never lowers a value."""
    cap = int(ram_bytes * RAM_SHARE) // page
    want = min(-(-demand_bytes // page), cap * 2 // 3)
    if want <= current[1]:
        return None
    return max(current[0], want * 3 // 4), want, max(current[2], want * 3 // 2)


def limits(text: str) -> Limits:
    low, pressure, high = (int(v) for v in text.split())
    return low, pressure, high


def read(path: Path = TCP_MEM) -> Limits:
    return limits(path.read_text())


def ram_bytes(meminfo: Path = MEMINFO) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{meminfo}: no MemTotal")


def _text(limits: Limits) -> str:
    return " ".join(map(str, limits))


HOLD = ".tcpmem"     # /run/longhaul/<tag>.tcpmem: the values a run found, and those it set


def _held(tag: str) -> Path:
    return run_marker.STATE_DIR / f"{tag}{HOLD}"


def _restore(change: Change, path: Path = TCP_MEM) -> None:
    if read(path) != change.applied:
        log.warning("%s is %s, not the %s this run set: left as it is", SYSCTL, _text(read(path)), _text(change.applied))
        return
    path.write_text(_text(change.before) + "\n")


@contextmanager
def held(tag: str, demand_bytes: int, path: Path = TCP_MEM):
    """Raise tcp_mem for the block where `demand_bytes` needs it; yields the Change, or None."""
    current = read(path)
    applied = raised(current, demand_bytes, ram_bytes(), os.sysconf("SC_PAGE_SIZE"))
    if applied is None:
        yield None
        return
    change = Change(current, applied)
    run_marker.STATE_DIR.mkdir(parents=True, exist_ok=True)
    _held(tag).write_text(f"{_text(change.before)}\n{_text(change.applied)}\n")
    try:
        path.write_text(_text(applied) + "\n")
    except OSError as exc:
        # a machine whose /proc/sys is read-only (a container): the lab runs as before, and each
        # trial's counters say whether its hosts ran short (collectors/live/tcp_memory.py)
        _held(tag).unlink(missing_ok=True)
        log.warning("%s stays %s (cannot raise it for this run's buffers: %s)", SYSCTL, _text(current), exc)
        yield None
        return
    try:
        log.info("%s raised from %s to %s pages for this run's buffers", SYSCTL, _text(current), _text(applied))
        yield change
    finally:
        _restore(change, path)
        _held(tag).unlink(missing_ok=True)


def _stale() -> list[tuple[str, Change]]:
    found = []
    for hold in run_marker.holds(HOLD, alive=False):
        before, applied = hold.read_text().splitlines()[:2]
        found.append((hold.stem, Change(limits(before), limits(applied))))
    return found


def leftovers(remove: bool, path: Path = TCP_MEM) -> list[str]:
    """tcp_mem values that runs killed before their teardown raised; put back when asked."""
    found = []
    for tag, change in _stale():
        if read(path) == change.applied:
            found.append(f"{SYSCTL} raised to {_text(change.applied)} (was {_text(change.before)})")
        if remove:
            _restore(change, path)
            _held(tag).unlink(missing_ok=True)
    return found
