"""What every traffic tool's parser returns: one burst's totals and its per-second receiver view.

Drivers fill what their tool reports and leave the rest None; the trial turns `intervals` into
throughput.csv rows and the totals into the flow summary, whatever the tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Interval:
    end_s: float                # seconds since the burst's start
    seconds: float
    bytes: int
    streams: list[int] = field(default_factory=list)   # bytes per stream, in stream order


@dataclass
class Result:
    protocol: str
    cca: str | None
    streams: int
    seconds: float
    bytes_sent: int
    bytes_received: int
    retransmits: int | None
    lost_percent: float | None
    receiver_intervals: list[Interval] = field(default_factory=list)
    sender_intervals: list[Interval] = field(default_factory=list)
    local_ports: list[int] = field(default_factory=list)
    remote_port: int | None = None
    # bytes of a paced sender's schedule it gave up rather than send late, after its host stalled
    # (a rate tool keeps its rate; what it skipped is named, never hidden in a lower mean)
    skipped_bytes: int | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)          # tool-specific figures, stored as they are

    @property
    def intervals(self) -> list[Interval]:
        """The receiver's view when it is there, else the sender's; no end-of-test fragment."""
        return merge_short_tail(self.receiver_intervals or self.sender_intervals)


def merge_short_tail(intervals: list[Interval], min_seconds: float = 0.5) -> list[Interval]:
    """Tools end a test with a fragment of an interval (often a few ms) holding what was still in
    flight; as a rate of its own it reads as a spike, so it is folded into the interval before it."""
    if len(intervals) < 2 or intervals[-1].seconds >= min_seconds:
        return intervals
    prev, tail = intervals[-2], intervals[-1]
    merged = Interval(tail.end_s, prev.seconds + tail.seconds, prev.bytes + tail.bytes,
                      [a + b for a, b in zip(prev.streams, tail.streams)] if len(prev.streams) == len(tail.streams) else prev.streams)
    return [*intervals[:-2], merged]
