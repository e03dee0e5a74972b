"""The idle RTT of a lab path, measured as the RTT probe does (seed 000 5.2's bursts of pings):
what verification compares with the configured RTT, and what a real testbed's own path already
takes off the delay longhaul adds. Timed to the microsecond (drivers/agents/icmp_echo.py): fping
rounds a reply above 100 ms to whole milliseconds, too coarse to check a lab to 0.2 ms."""

from __future__ import annotations

from longhaul.drivers.agents import icmp_echo
from longhaul.hardware.executors.process import Executor


def idle_rtt(executor: Executor, target: str, rounds: int = 3, per_round: int = 10) -> float | None:
    """The lab's RTT with no traffic: the median of a few burst rounds' means. The rounds are sent
    as one burst of rounds x per_round pings, 1 ms apart, and split after: one run and one wait
    for the path instead of one per round (0.67 s at 128 ms as three)."""
    res = executor.run(icmp_echo.argv(target, count=rounds * per_round), timeout=10, check=False)
    try:
        rtts = icmp_echo.parse(res.stdout)
    except ValueError:
        return None
    means = []
    for k in range(rounds):
        got = [r for r in rtts[k * per_round:(k + 1) * per_round] if r is not None]
        if got:
            means.append(sum(got) / len(got))
    if not means:
        return None
    means.sort()
    return round(means[len(means) // 2], 4)
