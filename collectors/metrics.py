"""The numbers seed 000 reports: Jain fairness, RTT inflation, mean and spread over repeats; and the
wire's ceiling, which no stored second may exceed."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def jain(values: Iterable[float | None]) -> float | None:
    """Jain's index, seed 000 equation (1): (sum x)^2 / (n * sum x^2); None with fewer than 2."""
    xs = np.asarray([v for v in values if v is not None], dtype=float)
    if xs.size < 2:
        return None
    denom = xs.size * float(np.sum(xs ** 2))
    if denom == 0:
        return None
    return float(np.sum(xs) ** 2 / denom)


def rtt_stats(rtts_ms: Iterable[float | None], idle_ms: float | None) -> dict:
    xs = np.asarray([r for r in rtts_ms if r is not None], dtype=float)
    out = {"idle_ms": idle_ms, "samples": int(xs.size), "median_ms": None, "p95_ms": None, "max_ms": None,
           "inflation_median_ms": None, "inflation_p95_ms": None, "inflation_max_ms": None}
    if xs.size == 0:
        return out
    out.update(median_ms=float(np.median(xs)), p95_ms=float(np.percentile(xs, 95)), max_ms=float(xs.max()))
    if idle_ms is not None:
        for key in ("median", "p95", "max"):
            out[f"inflation_{key}_ms"] = out[f"{key}_ms"] - idle_ms
    return out


def mean_std(values: Iterable[float | None]) -> dict:
    xs = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return {"mean": None, "std": None, "n": 0}
    arr = np.asarray(xs, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0, "n": int(arr.size)}


def mbps(nbytes: float, seconds: float) -> float | None:
    return nbytes * 8 / seconds / 1e6 if seconds > 0 else None


# A one-second bin may hold a little more than a second's worth of the shaper's rate: its token
# bucket's burst, and the sampling of its ends (the same slack as ../shared/tools/wire_ceiling.py)
CEILING_SLACK = 1.03


# the headers inside a full packet that are not payload: IP, TCP and its timestamps; IP and UDP
PAYLOAD_OVERHEAD = {"tcp": 52, "udp": 28}


def payload_ceiling_mbps(rate_mbps: float, mtu: int, protocols=("tcp",)) -> float:
    """The most payload a bottleneck of rate_mbps can pass: full packets of the protocols' own
    payload (mtu - 52 for TCP, mtu - 28 for UDP, whose receivers count datagram payload) in
    Ethernet frames (mtu + 14); where several protocols share it, the largest. A trial with no
    flows of its own (a passive OPS recording) has TCP's, though it has no seconds to check."""
    return max(rate_mbps * (mtu - PAYLOAD_OVERHEAD[p]) / (mtu + 14) for p in protocols or ("tcp",))


def seconds_above(rows, ceiling_mbps: float, slack: float = CEILING_SLACK) -> list[tuple[int, float]]:
    """throughput.csv rows [t_s, flow, stream, mbps] -> the whole seconds whose flows together read
    more than the ceiling allows: [(second, mbps), ...]. A burst's short last interval (not on a
    whole second) is a rate over less than a second and is left out, as the checker does."""
    per: dict[int, float] = {}
    for t_s, _, stream, value in rows:
        if stream == "all" and abs(t_s - round(t_s)) < 0.02:
            per[round(t_s)] = per.get(round(t_s), 0.0) + value
    return sorted((t, v) for t, v in per.items() if v > ceiling_mbps * slack)
