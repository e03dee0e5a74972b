"""The best-effort cap of seed 003's real-system adaptation (section 7): the decision, and the tc
that applies it to the replay's htb on the sender (appliance/plan/shaper.py installs the htb; the
leg agent, replay_leg.py, moves the cap and reads the class counters on the sender itself).

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

Imports the standard library and longhaul.core only: it runs on the sender, a VM under TCG too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from longhaul.core.shaping import tbf_burst

DEFAULT_HEADROOM = 0.05            # of capacity
HANDLE = "7e"                      # the htb's major; its leaves are 7e10:, 7e20:, 7e30:
OD_CLASS, BE_CLASS, OTHER_CLASS = f"{HANDLE}:10", f"{HANDLE}:20", f"{HANDLE}:30"
ROOT_CLASS = f"{HANDLE}:1"
QUANTUM = 30_000                   # DRR quantum: explicit, so no rate makes htb warn about r2q
MIN_RATE_BPS = 100_000             # htb needs a positive rate: a "zero" cap is this


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


def rate_arg(bps: float) -> str:
    return f"{max(bps, MIN_RATE_BPS):.0f}bit"


def burst_args(bps: float, mtu: int) -> list[str]:
    burst = str(tbf_burst(max(bps, MIN_RATE_BPS) / 1e6, mtu))
    return ["burst", burst, "cburst", burst]


def cap_argv(ifname: str, be_cap_bps: float | None, root_bps: float, mtu: int, verb: str = "change") -> list[str]:
    """BE's class at its cap (rate = ceil: it never borrows beyond it); None: uncapped."""
    cap = root_bps if be_cap_bps is None else min(be_cap_bps, root_bps)
    return ["tc", "class", verb, "dev", ifname, "parent", ROOT_CLASS, "classid", BE_CLASS, "htb",
            "rate", rate_arg(cap), "ceil", rate_arg(cap), "prio", "1", "quantum", str(QUANTUM), *burst_args(cap, mtu)]


def counters_argv(ifname: str) -> list[str]:
    return ["tc", "-s", "class", "show", "dev", ifname]


_CLASS_LINE = re.compile(r"^class \S+ (\S+)")
_SENT_LINE = re.compile(r"^\s*Sent (\d+) bytes")


def class_bytes(text: str) -> dict[str, int]:
    """classid -> bytes sent, from `tc -s class show dev IF`: iproute2 6.1 prints classes as text
    even with -j, so the text is read (a JSON list, from a tc that has it, is read too)."""
    if text.lstrip().startswith("["):
        return {item["handle"]: int(item.get("stats", item).get("bytes", 0))
                for item in json.loads(text) if "handle" in item}
    out, current = {}, None
    for line in text.splitlines():
        if match := _CLASS_LINE.match(line):
            current = match.group(1)
        elif (match := _SENT_LINE.match(line)) and current is not None:
            out[current] = int(match.group(1))
            current = None
    return out
