"""The idle RTT of a lab path, measured as the RTT probe does (seed 000 5.2's bursts of pings):
what verification compares with the configured RTT; and a path's floor, the least RTT it can
carry, which a real testbed's own path already takes off the delay longhaul adds. Timed to the
microsecond (drivers/agents/icmp_echo.py): fping rounds a reply above 100 ms to whole
milliseconds, too coarse to check a lab to 0.2 ms.

A path's RTT can only be raised by load (queues, a busy or descheduled host: a TCG VM's hop took
13.5 ms for a 3 ms path), never lowered, so its floor is the least of many echoes spread over time,
not a mean or a median: a median read while the hosts were busy took most of a path's delay away.
For the same reason an echo below the configured propagation delay is impossible on a right lab,
whatever a tolerance allows: `below_floor` is that invariant, for verification and for trials."""

from __future__ import annotations

from dataclasses import dataclass

from longhaul.drivers.agents import icmp_echo
from longhaul.hardware.executors.process import Executor

# An echo below the configured RTT by more than this is impossible on a right lab: netem and the
# delay line hold each packet at least its delay, and echoes are timed by kernel stamps; the
# allowance is the timers' own granularity (tens of microseconds) and a fraction for clock rates.
FLOOR_SLACK_MS = 0.1
FLOOR_SLACK_FRACTION = 0.01
FLOOR_ECHOES = 50           # a path floor: this many echoes ...
FLOOR_PERIOD_MS = 20        # ... this far apart: one second of the path, not one instant of it


@dataclass(frozen=True)
class IdleRtt:
    """One burst of echoes: the median of its rounds' means (verification's figure, seed 000's
    probe) and the least echo (what the floor invariant checks)."""

    median_ms: float
    min_ms: float
    samples: int


def floor_limit(configured_ms: float) -> float:
    """The least RTT a path configured for `configured_ms` may show."""
    return configured_ms * (1 - FLOOR_SLACK_FRACTION) - FLOOR_SLACK_MS


def below_floor(rtt_ms: float | None, configured_ms: float) -> bool:
    return rtt_ms is not None and configured_ms > 0 and rtt_ms < floor_limit(configured_ms)


def _echoes(executor: Executor, target: str, count: int, period_ms: float = 1.0) -> list[float | None] | None:
    res = executor.run(icmp_echo.argv(target, count=count, period_ms=period_ms),
                       timeout=10 + count * period_ms / 1000, check=False)
    try:
        return icmp_echo.parse(res.stdout)
    except ValueError:
        return None


def measure_idle(executor: Executor, target: str, rounds: int = 3, per_round: int = 10) -> IdleRtt | None:
    """The lab's RTT with no traffic. The rounds are sent as one burst of rounds x per_round
    pings, 1 ms apart, and split after: one run and one wait for the path instead of one per round
    (0.67 s at 128 ms as three). None when nothing answered."""
    rtts = _echoes(executor, target, rounds * per_round)
    if rtts is None:
        return None
    means = []
    for k in range(rounds):
        got = [r for r in rtts[k * per_round:(k + 1) * per_round] if r is not None]
        if got:
            means.append(sum(got) / len(got))
    if not means:
        return None
    means.sort()
    answered = [r for r in rtts if r is not None]
    return IdleRtt(round(means[len(means) // 2], 4), round(min(answered), 4), len(answered))


def idle_rtt(executor: Executor, target: str, rounds: int = 3, per_round: int = 10) -> float | None:
    measured = measure_idle(executor, target, rounds, per_round)
    return None if measured is None else measured.median_ms


def path_floor(executor: Executor, target: str, echoes: int = FLOOR_ECHOES,
               period_ms: float = FLOOR_PERIOD_MS) -> float | None:
    """The least RTT of `echoes` echoes `period_ms` apart: what the path takes with nothing in its
    way. None when nothing answered."""
    rtts = _echoes(executor, target, echoes, period_ms)
    answered = [r for r in rtts or () if r is not None]
    return round(min(answered), 4) if answered else None
