"""Traffic patterns as schedules: when each burst of a flow starts and how long it lasts.

constant: one burst for the whole duration (or for a byte count).
square:   on_s on, off_s off, repeated from start_s until start_s + duration_s (seed 000 Fig. 7).
bursty:   UDP(x, y) of seed 000: a burst of burst_s (x) seconds every every_s (y) seconds.
sinusoid: one burst whose paced source follows seed 002's f(t) (drivers/paced_udp.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Flow(Protocol):
    """What a schedule reads of a flow (appliance's config schema Flow has these fields)."""
    pattern: str
    start_s: float
    duration_s: float | None
    bytes: int | None
    on_s: float | None
    off_s: float | None
    burst_s: float | None
    every_s: float | None


@dataclass(frozen=True)
class Burst:
    index: int
    start_s: float
    duration_s: float | None
    bytes: int | None

    @property
    def stop_s(self) -> float | None:
        return None if self.duration_s is None else self.start_s + self.duration_s


def bursts(flow: Flow) -> list[Burst]:
    if flow.pattern in ("constant", "sinusoid"):   # a sinusoid varies its rate within one burst
        return [Burst(0, flow.start_s, flow.duration_s, flow.bytes)]
    on, off = (flow.on_s, flow.off_s) if flow.pattern == "square" else (flow.burst_s, flow.every_s - flow.burst_s)
    end = flow.start_s + flow.duration_s
    out: list[Burst] = []
    t = flow.start_s
    # bursts shorter than this are not worth a connection; they only add setup noise
    while end - t > 0.5:
        out.append(Burst(len(out), t, min(on, end - t), None))
        t += on + off
    return out


def span(flow: Flow) -> tuple[float, float | None]:
    """When the flow's first burst starts and its last one is planned to stop."""
    planned = bursts(flow)
    return planned[0].start_s, planned[-1].stop_s


def on_seconds(flow: Flow) -> float | None:
    planned = bursts(flow)
    if any(b.duration_s is None for b in planned):
        return None
    return sum(b.duration_s for b in planned)
