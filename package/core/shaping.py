"""Token-bucket sizing, shared by every shaper longhaul installs: the routers' tbf (hardware/routers)
and the sender's class caps of a plan replay (drivers/agents/htb_caps.py)."""

from __future__ import annotations

GSO_MAX = 65536 + 1514
BURST_S = 0.010


def tbf_burst(rate_mbps: float, mtu: int) -> int:
    """Bucket size: at least one GSO super-packet (tbf would otherwise split or drop them) and
    BURST_S worth of tokens, so a late qdisc timer (this VM's timers wake tens of ms late under
    load) can catch up instead of losing link time: 1 ms of tokens measured 430-495 Mb/s of a
    500 Mb/s bottleneck under load, 10 ms measured 486-500 Mb/s (bench/RESULTS.md)."""
    return max(GSO_MAX, mtu * 4, int(rate_mbps * 1e6 / 8 * BURST_S))
