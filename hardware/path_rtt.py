"""The idle RTT of a lab path, measured as the RTT probe does (seed 000 5.2's bursts of pings):
what verification compares with the configured RTT, and what a real testbed's own path already
takes off the delay longhaul adds."""

from __future__ import annotations

from longhaul.drivers import fping
from longhaul.hardware.executors.process import Executor


def idle_rtt(executor: Executor, target: str, rounds: int = 3) -> float | None:
    """The lab's RTT with no traffic: the median of a few burst rounds' means."""
    means = []
    for _ in range(rounds):
        res = executor.run(fping.burst_argv(target), timeout=10, check=False)
        try:
            mean = fping.parse_burst(res.stderr + res.stdout).mean_ms
        except ValueError:
            mean = None
        if mean is not None:
            means.append(mean)
    if not means:
        return None
    means.sort()
    return means[len(means) // 2]
