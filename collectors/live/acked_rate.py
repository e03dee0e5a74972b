"""Per-second throughput of a burst from the sender's tcp_info samples, for tools whose own
progress reports are coarse (globus-url-copy: one line per 5 s performance marker).

What the receiver got by a sample's time is what it acknowledged: bytes_acked (cumulative) plus
the segments it holds out of order, SACKed (tcpi_sacked x mss). bytes_acked alone hands a loss
recovery's SACKed data to the second whose cumulative ACK covers it, after the wire carried it
(a 10 Mb/s link read 10.6 Mb/s in the second a recovery ended). So this is a receiver-side view at
the 10 Hz sampling resolution: each second's figure is the growth of every socket's delivered bytes
between the second's two boundaries, read between the samples either side of each boundary by
linear interpolation. A probe that stalls (a busy host, a VM under emulation: 0.3-0.6 s gaps were
seen) otherwise hands the whole gap's bytes to the second of the sample after it, and a 10 Mb/s
link read 7.5 then 11.8 Mb/s in two seconds that carried 9.6 each.
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
            series[(sock.src, sock.sport)].append((sample.t_s - start_s, delivered(sock)))
    if not series:
        return []
    socks = sorted(series)
    end = max(points[-1][0] for points in series.values())
    bounds = [float(k) for k in range(1, math.floor(end) + 1)]
    if not bounds or end - bounds[-1] > 1e-6:
        bounds.append(end)
    out, previous, last_bound = [], {key: 0 for key in socks}, 0.0
    for bound in bounds:
        current = {key: round(_at(series[key], bound)) for key in socks}
        streams = [max(0, current[key] - previous[key]) for key in socks]
        out.append(Interval(round(bound, 3), round(bound - last_bound, 3), sum(streams), streams))
        previous, last_bound = current, bound
    return out


def delivered(sock) -> int:
    """Bytes the receiver has: acknowledged cumulatively, and SACKed beyond that (an older probe
    sends no sacked: then bytes_acked alone)."""
    return sock.bytes_acked + (sock.sacked or 0) * (sock.mss or 0)


def retransmits(samples, port: int, start_s: float) -> int | None:
    """Sum over the burst's sockets of their last retrans_total."""
    last: dict[tuple[str, int], int] = {}
    for sample in samples:
        sock = sample.sock
        if sock.dport == port and sample.t_s >= start_s and sock.retrans_total is not None:
            last[(sock.src, sock.sport)] = sock.retrans_total
    return sum(last.values()) if last else None


def _at(points: list[tuple[float, int]], t: float) -> float:
    """Delivered bytes at t (points are in time order): 0 before the socket's first sample, its last
    value after its last, and between two samples the straight line through them."""
    k = bisect.bisect_right(points, t + 1e-9, key=lambda p: p[0])
    if k == 0:
        return 0
    if k == len(points):
        return points[-1][1]
    (t1, a1), (t2, a2) = points[k - 1], points[k]
    return a1 + (a2 - a1) * (t - t1) / (t2 - t1)
