"""The class caps of seed 003's real-system adaptation (section 7), as pure decisions.

In a real system no log says what a transfer will request, so the scheduler leaves fair sharing
within a class to TCP and caps only the aggregate best-effort rate: "When a new OD job arrives, we
cap the maximum aggregate bandwidth for BE jobs to 60% [(1 - OD share)] of the maximum capacity.
We keep monitoring the OD jobs bandwidth usage; if they do not use all 40% allocated, we increase
the maximum cap for BE jobs dynamically. Then, when a new OD job arrives, we reset the maximum cap
for BE jobs to 60%." OD transfers are never capped: they take whatever BE leaves.

That is Listing 1's availBW_BE with the OD request load replaced by the OD rate measured over the
last interval:

    no OD transfer active            -> no cap (BE may use the whole link)
    an OD transfer arrived just now  -> (1 - od_share) x capacity   (its rate is not measured yet)
    else                             -> capacity - measured OD rate - headroom,
                                        at least (1 - od_share) x capacity

The headroom is what lets an OD transfer that is still speeding up (TCP's slow start, a rate
that grew) take more than it did last interval: without it BE would fill every byte OD left and
OD could only grow by pushing BE out through losses at the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HEADROOM = 0.05     # of capacity


@dataclass(frozen=True)
class CapPolicy:
    capacity_bps: float                 # netCap, in the units the shaper meters (frame bytes x 8)
    od_share: float                     # netCap_OD / netCap, 0..1
    headroom: float = DEFAULT_HEADROOM  # fraction of capacity kept above the measured OD rate

    def __post_init__(self):
        if self.capacity_bps <= 0 or not 0 <= self.od_share <= 1 or not 0 <= self.headroom < 1:
            raise ValueError("capacity > 0, od_share in [0, 1], headroom in [0, 1)")

    @property
    def floor_bps(self) -> float:
        """netCap_BE: the least BE is ever capped to."""
        return (1 - self.od_share) * self.capacity_bps


def be_cap(policy: CapPolicy, *, od_active: bool, od_arrived: bool, od_rate_bps: float | None) -> float | None:
    """The aggregate BE cap for the next interval in b/s; None: no cap.

    od_active: an OD transfer is running; od_arrived: one started since od_rate_bps was measured;
    od_rate_bps: the OD class's rate over the last interval (None: not measured yet)."""
    if not od_active:
        return None
    if od_arrived or od_rate_bps is None:
        return policy.floor_bps
    raised = policy.capacity_bps - max(0.0, od_rate_bps) - policy.headroom * policy.capacity_bps
    return min(policy.capacity_bps, max(policy.floor_bps, raised))


class CapController:
    """be_cap over time from the OD class's byte counter: step() once an interval with the
    counter's reading; arrived() when an OD transfer starts (the cap resets at once, not at the
    next step). Returns the cap to apply, or the same value again (the caller changes the shaper
    only when it differs)."""

    def __init__(self, policy: CapPolicy):
        self.policy = policy
        self.cap_bps: float | None = None
        self._last: tuple[float, int] | None = None     # (time, OD bytes) of the previous step
        self._arrived = False
        self.od_rate_bps: float | None = None

    def arrived(self) -> float | None:
        self._arrived = True
        self.cap_bps = be_cap(self.policy, od_active=True, od_arrived=True, od_rate_bps=None)
        return self.cap_bps

    def step(self, t_s: float, od_bytes: int, od_active: bool) -> float | None:
        if self._last is not None and t_s > self._last[0]:
            self.od_rate_bps = max(0, od_bytes - self._last[1]) * 8 / (t_s - self._last[0])
        self._last = (t_s, od_bytes)
        self.cap_bps = be_cap(self.policy, od_active=od_active, od_arrived=self._arrived,
                              od_rate_bps=self.od_rate_bps)
        self._arrived = False
        return self.cap_bps
