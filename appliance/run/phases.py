"""Where a run's wall time goes beyond its flows: each phase's total seconds and how often it ran,
kept in the manifest (`phases`) so the overhead of a sweep is published with its results
(bench/overhead.py reads it)."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

# the phases, in the order a run passes them (the manifest lists them so)
ORDER = ("session", "lab build", "lab retune", "fingerprint", "verify rtt", "verify rate", "trial set-up", "flows",
         "trial wind-down", "trial store", "lab teardown")


class Phases:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    @contextmanager
    def __call__(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - start)

    def add(self, name: str, seconds: float) -> None:
        if name not in ORDER:
            raise ValueError(f"unknown phase {name!r}")
        self.seconds[name] += seconds
        self.counts[name] += 1

    def as_dict(self) -> dict:
        return {name: {"s": round(self.seconds[name], 3), "n": self.counts[name]} for name in ORDER
                if name in self.counts}
