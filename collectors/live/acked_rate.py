"""Per-second throughput of a TCP burst from the sender's tcp_info samples, for every TCP tool:
a tool's own figure is what its receiver read (iperf3's server, a delayed reader, stored 610 Mb/s
through a 500 Mb/s shaper) or coarse (globus-url-copy: one performance marker per 5 s).

What the receiver got by a sample's time is what it acknowledged: bytes_acked (cumulative) plus
the segments it holds out of order, SACKed (tcpi_sacked x mss). bytes_acked alone hands a loss
recovery's SACKed data to the second whose cumulative ACK covers it, after the wire carried it
(a 10 Mb/s link read 10.6 Mb/s in the second a recovery ended). So this is a receiver-side view at
the sampling resolution, binned by arrivals.bins. A probe that stalls (a busy host, a VM under emulation: 0.3-0.6 s gaps were
seen) otherwise hands the whole gap's bytes to the second of the sample after it, and a 10 Mb/s
link read 7.5 then 11.8 Mb/s in two seconds that carried 9.6 each.
"""

from __future__ import annotations

from collections import defaultdict

from longhaul.collectors.live.arrivals import bins
from longhaul.drivers.result import Interval

# iperf3 and GridFTP keep a control connection to the data's port: a few hundred bytes
CONTROL_BYTES = 65536


def per_second(samples, port: int, start_s: float) -> list[Interval]:
    """Intervals (end_s relative to start_s) of the data sockets to destination `port` (a socket
    that never delivered CONTROL_BYTES is a tool's control connection, not a stream); samples are
    collectors.socket_sampler.Sample with t_s on the trial's clock."""
    series: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for sample in samples:
        sock = sample.sock
        if sock.dport == port and sock.bytes_acked is not None and sample.t_s >= start_s:
            series[(sock.src, sock.sport)].append((sample.t_s - start_s, delivered(sock)))
    data = {key: points for key, points in series.items() if max(v for _, v in points) >= CONTROL_BYTES}
    if not data:
        return []
    return bins(data, max(points[-1][0] for points in data.values()))


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
