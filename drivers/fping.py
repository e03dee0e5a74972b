"""fping: RTT probes. A burst (seed 000 section 5.2: 10 pings 1 ms apart, averaged, once a
second) or a fixed interval (one ping every N ms, timestamped)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# fping shortens its per-ping timeout to the period (-p) in count and loop modes; an RTT of
# 128 ms plus queueing would then read as loss, so the timeout is always given explicitly.
DEFAULT_TIMEOUT_MS = 900


def burst_argv(target: str, count: int = 10, period_ms: float = 1, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[str]:
    return ["fping", "-C", str(count), "-p", f"{period_ms:g}", "-t", str(timeout_ms), "-q", target]


def interval_argv(target: str, period_ms: float, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[str]:
    return ["fping", "-D", "-l", "-p", f"{period_ms:g}", "-t", str(timeout_ms), target]


@dataclass(frozen=True)
class Burst:
    target: str
    rtts_ms: tuple[float | None, ...]   # None for a lost ping

    @property
    def received(self) -> int:
        return sum(r is not None for r in self.rtts_ms)

    @property
    def mean_ms(self) -> float | None:
        got = [r for r in self.rtts_ms if r is not None]
        return sum(got) / len(got) if got else None


def parse_burst(text: str) -> Burst:
    """`fping -C N -q` prints (to stderr) 'target : 128 128 - 129 ...'."""
    for line in text.splitlines():
        if " : " not in line:
            continue
        target, _, values = line.partition(" : ")
        tokens = values.split()
        if tokens and all(t == "-" or _is_number(t) for t in tokens):
            return Burst(target.strip(), tuple(None if t == "-" else float(t) for t in tokens))
    raise ValueError(f"no fping -C result in: {text.strip()[:200]!r}")


_LINE = re.compile(r"^\[(?P<ts>[0-9.]+)\]\s+(?P<target>\S+)\s+:\s+\[(?P<seq>\d+)\],\s+\d+ bytes,\s+(?P<rtt>[0-9.]+) ms")


@dataclass(frozen=True)
class Reply:
    timestamp: float
    target: str
    seq: int
    rtt_ms: float


def parse_interval_line(line: str) -> Reply | None:
    """One line of `fping -D -l`; None for lines that are not replies (summaries, timeouts)."""
    match = _LINE.match(line.strip())
    if not match:
        return None
    return Reply(float(match["ts"]), match["target"], int(match["seq"]), float(match["rtt"]))


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
