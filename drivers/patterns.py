"""Traffic patterns as schedules: when each burst of a flow starts and how long it lasts.

constant: one burst for the whole duration (or for a byte count).
square:   on_s on, off_s off, repeated from start_s until start_s + duration_s (seed 000 Fig. 7).
bursty:   UDP(x, y) of seed 000: a burst of burst_s (x) seconds every every_s (y) seconds.
sinusoid: one burst whose paced source follows seed 002's f(t) (drivers/paced_udp.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from longhaul.drivers.tool import Shape

SINUSOID = "sinusoid"    # seed 002's stiff f(t): the pattern, and the Shape kind paced sources follow


class Flow(Protocol):
    """What a schedule reads of a flow (appliance's config schema Flow has these fields; read-only)."""

    @property
    def pattern(self) -> str: ...
    @property
    def start_s(self) -> float: ...
    @property
    def duration_s(self) -> float | None: ...
    @property
    def bytes(self) -> int | None: ...
    @property
    def on_s(self) -> float | None: ...
    @property
    def off_s(self) -> float | None: ...
    @property
    def burst_s(self) -> float | None: ...
    @property
    def every_s(self) -> float | None: ...
    @property
    def min_mbps(self) -> float | None: ...
    @property
    def max_mbps(self) -> float | None: ...
    @property
    def period_s(self) -> float | None: ...
    @property
    def udp_rate_mbps(self) -> float | None: ...


@dataclass(frozen=True)
class Burst:
    index: int
    start_s: float
    duration_s: float | None
    bytes: int | None

    @property
    def stop_s(self) -> float | None:
        return None if self.duration_s is None else self.start_s + self.duration_s


def _one_burst(flow: Flow) -> list[Burst]:
    return [Burst(0, flow.start_s, flow.duration_s, flow.bytes)]


def _given(value: float | None) -> float:
    """A key the pattern needs: present in any flow the schema let through (pattern_problem)."""
    assert value is not None
    return value


def _repeated(on: float, off: float, flow: Flow) -> list[Burst]:
    end = flow.start_s + _given(flow.duration_s)          # a repeated pattern is timed
    out: list[Burst] = []
    t = flow.start_s
    # bursts shorter than this are not worth a connection; they only add setup noise
    while end - t > 0.5:
        out.append(Burst(len(out), t, min(on, end - t), None))
        t += on + off
    return out


def _burst_shorter(flow: Flow) -> str | None:
    return "burst_s must be shorter than every_s" if _given(flow.burst_s) >= _given(flow.every_s) else None


def _min_below_max(flow: Flow) -> str | None:
    return "min_mbps must be below max_mbps" if _given(flow.min_mbps) >= _given(flow.max_mbps) else None


@dataclass(frozen=True)
class Pattern:
    """A traffic pattern: what a flow must give for it, and its schedule of bursts.

    needs: the flow keys it reads (an in-burst pattern's keys are refused on any other: they would
    be read as a rate that is not sent); what: how a refusal
    names those keys. timed: it runs for duration_s, never for a byte count. excludes: flow keys it
    refuses. problem: what else is wrong with a flow of it, or None. shape: where its rate changes
    within one burst, the Shape a paced source follows; only a tool declaring the pattern in
    FlowRules.in_burst_shapes can (the schema refuses the others)."""
    name: str
    schedule: Callable[[Flow], list[Burst]]
    needs: tuple[str, ...] = ()
    what: str = ""
    timed: bool = True
    excludes: tuple[str, ...] = ()
    problem: Callable[[Flow], str | None] = lambda flow: None
    shape: Callable[[Flow], Shape] | None = None

    @property
    def in_burst(self) -> bool:
        return self.shape is not None

    def shape_of(self, flow: Flow) -> Shape | None:
        """The rate the flow's one burst follows, where it changes within the burst."""
        return None if self.shape is None else self.shape(flow)


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    Pattern("constant", _one_burst, timed=False),
    Pattern("square", lambda f: _repeated(_given(f.on_s), _given(f.off_s), f), ("on_s", "off_s"), "on_s and off_s"),
    Pattern("bursty", lambda f: _repeated(_given(f.burst_s), _given(f.every_s) - _given(f.burst_s), f),
            ("burst_s", "every_s"),
            "burst_s (x) and every_s (y)", problem=_burst_shorter),
    # one burst whose paced source follows f(t) (drivers/paced_udp.py), which sets its own rate
    Pattern(SINUSOID, _one_burst, ("min_mbps", "max_mbps", "period_s"), "min_mbps, max_mbps and period_s",
            excludes=("udp_rate_mbps",), problem=_min_below_max,
            shape=lambda f: Shape(SINUSOID, _given(f.min_mbps), _given(f.max_mbps), _given(f.period_s))),
)}


def pattern_problem(flow: Flow) -> str | None:
    """What the flow's pattern refuses of it: a missing or foreign key, a byte count where it is
    timed, or its own rule; None where it is whole."""
    pattern = PATTERNS[flow.pattern]
    if any(getattr(flow, key) is None for key in pattern.needs) or any(
            getattr(flow, key) is not None for key in pattern.excludes):
        refused = f" (and no {', '.join(pattern.excludes)})" if pattern.excludes else ""
        return f"pattern {pattern.name!r} needs {pattern.what}{refused}"
    for other in PATTERNS.values():
        if not other.in_burst:      # a sweep may switch a flow from square to constant and leave on_s
            continue
        foreign = [k for k in other.needs if k not in pattern.needs and getattr(flow, k) is not None]
        if foreign:
            return f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} for pattern {other.name!r}"
    if pattern.timed and flow.bytes is not None:
        return f"a {pattern.name} flow is timed: use duration_s, not bytes"
    return pattern.problem(flow)


def bursts(flow: Flow) -> list[Burst]:
    return PATTERNS[flow.pattern].schedule(flow)


def span(flow: Flow) -> tuple[float, float | None]:
    """When the flow's first burst starts and its last one is planned to stop."""
    planned = bursts(flow)
    return planned[0].start_s, planned[-1].stop_s


def on_seconds(flow: Flow) -> float | None:
    durations = [b.duration_s for b in bursts(flow)]
    return None if None in durations else sum(d for d in durations if d is not None)
