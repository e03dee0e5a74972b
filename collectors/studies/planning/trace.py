"""A transfer trace: what the planner reads from a facility's logs (inputs.py) or generates
(synthetic.py), and what the simulation and the lab replay take.

Times are seconds from the trace's origin (the first transfer's start, floored to the second);
a transfer's trace runtime is its logged end minus start; its requested rate is what it moved over
that runtime, the rate it reached with the contention it had (the paper's requestRate, section 3.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

OD, BE = "od", "be"
CLASSES = (OD, BE)
# A logged runtime under a millisecond is clock resolution, not a rate: it is read as 1 ms.
MIN_RUNTIME_S = 1e-3


@dataclass(frozen=True)
class Transfer:
    start_s: float          # from the trace's origin
    seconds: float          # the trace runtime (end - start), >= 0
    nbytes: int             # > 0
    cls: str | None = None  # OD, BE or None (unlabelled: the plan splits at random)
    where: str = ""         # "file:line" it came from

    @property
    def rate_bps(self) -> float:
        return self.nbytes * 8 / max(self.seconds, MIN_RUNTIME_S)


@dataclass(frozen=True)
class Problem:
    """A line that is not a planned transfer, and why: reported, never dropped silently."""
    where: str       # "file:line"
    reason: str
    failed: bool = False   # a well-formed transfer the log says failed (kept and counted, not planned)


@dataclass
class Trace:
    transfers: list[Transfer]                 # the planned ones (successful), sorted by start
    origin: datetime | None = None            # UTC instant of start_s == 0, when the input says
    name: str = "trace"
    problems: list[Problem] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    generator: dict | None = None             # synthetic.py's parameters and seed, when generated

    def __post_init__(self):
        self.transfers = sorted(self.transfers, key=lambda t: t.start_s)

    @property
    def failed(self) -> int:
        return sum(1 for p in self.problems if p.failed)

    @property
    def malformed(self) -> int:
        return sum(1 for p in self.problems if not p.failed)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start_s, trace runtime s, bytes) as float64 arrays, in start order."""
        start = np.array([t.start_s for t in self.transfers], dtype=np.float64)
        seconds = np.array([max(t.seconds, MIN_RUNTIME_S) for t in self.transfers], dtype=np.float64)
        nbytes = np.array([t.nbytes for t in self.transfers], dtype=np.float64)
        return start, seconds, nbytes

    def labelled(self) -> bool:
        return bool(self.transfers) and all(t.cls in CLASSES for t in self.transfers)

    def span_s(self) -> float:
        """From the origin to the last logged end."""
        return max((t.start_s + t.seconds for t in self.transfers), default=0.0)


class TraceError(ValueError):
    """No planned transfer in the inputs (exit 2), or an input that cannot be read at all."""
