"""Per-second throughput of a burst from the sender's tcp_info samples (bytes_acked), for tools
whose own progress reports are coarse (globus-url-copy: one line per 5 s performance marker).

Bytes acknowledged to the sender are bytes the receiver got, so this is a receiver-side view at
the 10 Hz sampling resolution: each second's figure is the growth of every socket's bytes_acked
between the last samples at or before the second's two boundaries.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict

from longhaul.drivers.result import Interval


def per_second(samples, port: int, start_s: float) -> list[Interval]:
    """Intervals (end_s relative to start_s) of the sockets to destination `port`; samples are
    collectors.socket_sampler.Sample with t_s on the trial's clock."""
    series: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for sample in samples:
        sock = sample.sock
        if sock.dport == port and sock.bytes_acked is not None and sample.t_s >= start_s:
            series[(sock.src, sock.sport)].append((sample.t_s - start_s, sock.bytes_acked))
    if not series:
        return []
    socks = sorted(series)
    end = max(points[-1][0] for points in series.values())
    bounds = [float(k) for k in range(1, math.floor(end) + 1)]
    if not bounds or end - bounds[-1] > 1e-6:
        bounds.append(end)
    out, previous, last_bound = [], {key: 0 for key in socks}, 0.0
    for bound in bounds:
        current = {key: _at(series[key], bound) for key in socks}
        streams = [max(0, current[key] - previous[key]) for key in socks]
        out.append(Interval(round(bound, 3), round(bound - last_bound, 3), sum(streams), streams))
        previous, last_bound = current, bound
    return out


def retransmits(samples, port: int, start_s: float) -> int | None:
    """Sum over the burst's sockets of their last retrans_total."""
    last: dict[tuple[str, int], int] = {}
    for sample in samples:
        sock = sample.sock
        if sock.dport == port and sample.t_s >= start_s and sock.retrans_total is not None:
            last[(sock.src, sock.sport)] = sock.retrans_total
    return sum(last.values()) if last else None


def _at(points: list[tuple[float, int]], t: float) -> int:
    """bytes_acked of the last sample at or before t (points are in time order)."""
    k = bisect.bisect_right(points, t + 1e-9, key=lambda p: p[0])
    return points[k - 1][1] if k else 0
