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

An ACK only says a byte crossed the bottleneck before it: a receiver that is late to acknowledge
(a VM's stalled vCPU) hands a burst of ACKs to the sender after a pause, and a flow through a
10 Mb/s shaper read 38.8 Mb/s for 57 ms, 10.5 in its second (tests/data/tcg-nfs-tcpinfo.jsonl).
Given the bottleneck's payload ceiling, `retimed` moves what a stretch between samples delivered
beyond it into the stretches before, as far as those bytes were in flight then (sent, not yet
acknowledged): the latest crossing times the ACKs and the ceiling allow. Bytes a stretch cannot
place (more than was in flight: a shaper passing above its rate) stay where they are, for the
trial's ceiling check to name. A reading is as precise as the probe's dump was short: one that a
stall stretched (a 90 ms dump, 45 ms off its 10 Hz grid, in that capture) is left out between its
neighbours, which bracket it (`IMPRECISE_SHARE`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from longhaul.collectors.live.arrivals import binned, bins, edges
from longhaul.drivers.result import Interval

if TYPE_CHECKING:
    from longhaul.collectors.live.socket_sampler import Sample

# iperf3 and GridFTP keep a control connection to the data's port: a few hundred bytes
CONTROL_BYTES = 65536
# a reading whose dump's half-length is above this share of the time to its nearer neighbour
IMPRECISE_SHARE = 0.1


def burst_sockets(samples, port: int, born_from: float | None, born_before: float | None) -> set[tuple[str, int]]:
    """The sockets to destination `port` that one burst opened: first seen at or after its launch
    and before the next burst to that port was launched. Bursts of a flow reuse their server's port,
    and a socket of another burst counted in this one's seconds doubles what the wire carried."""
    first: dict[tuple[str, int], float] = {}
    for sample in samples:
        if sample.sock.dport == port:
            key = (sample.sock.src, sample.sock.sport)
            first[key] = min(first.get(key, sample.t_s), sample.t_s)
    return {key for key, t in first.items()
            if (born_from is None or t >= born_from) and (born_before is None or t < born_before)}


def per_second(samples, port: int, start_s: float, ceiling_mbps: float | None = None,
               sockets: set[tuple[str, int]] | None = None) -> list[Interval]:
    """Intervals (end_s relative to start_s) of the data sockets to destination `port` (a socket
    that never delivered CONTROL_BYTES is a tool's control connection, not a stream); samples are
    collectors.socket_sampler.Sample with t_s on the trial's clock. ceiling_mbps: the most payload
    the flow's bottleneck passes, against which late ACKs are re-timed (None: as acknowledged).
    sockets: the burst's own (burst_sockets; None: every socket to the port)."""
    series: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for sample in samples:
        sock = sample.sock
        key = (sock.src, sock.sport)
        if sock.dport == port and sock.bytes_acked is not None and sample.t_s >= start_s \
                and (sockets is None or key in sockets):
            series[key].append(sample)
    data = {key: [(s.t_s - start_s, delivered(s.sock), outstanding(s.sock)) for s in precise(points)]
            for key, points in series.items() if max(delivered(s.sock) for s in points) >= CONTROL_BYTES}
    if not data:
        return []
    end = max(points[-1][0] for points in data.values())
    if not ceiling_mbps:
        return bins({key: [(t, v) for t, v, _ in points] for key, points in data.items()}, end)
    ceiling_Bps = ceiling_mbps * 1e6 / 8
    curves = {key: edges(*(np.array(column, dtype=float) for column in list(zip(*points))[:2]), cap=ceiling_Bps)
              for key, points in data.items()}
    flights = {key: (np.array([p[0] for p in points]), np.array([p[2] for p in points], dtype=float))
               for key, points in data.items()}
    return binned(retimed(curves, flights, ceiling_Bps), end)


def precise(samples: list[Sample]) -> list[Sample]:
    """A socket's samples without the readings inside its series that a long dump left imprecise;
    its first and last always stay (they hold what it had when it was seen first and last)."""
    keep = [samples[0]] if samples else []
    for before, sample, after in zip(samples, samples[1:], samples[2:]):
        nearer = min(sample.t_s - before.t_s, after.t_s - sample.t_s)
        if not sample.dump_s or sample.dump_s / 2 <= IMPRECISE_SHARE * nearer:
            keep.append(sample)
    return keep + samples[-1:] if len(samples) > 1 else keep


def retimed(curves: dict, flights: dict, ceiling_Bps: float) -> dict:
    """curves: socket -> (times, delivered) arrays, with arrivals.edges' knots; flights: socket ->
    (times, outstanding) at its samples. The curves on the times of all of them, the sockets
    together never delivering faster than ceiling_Bps where what they had in flight allows (module
    docstring). A socket's count is 0 before its first sample and holds after its last; its bytes
    in flight are 0 outside them."""
    keys = sorted(curves)
    times = np.unique(np.concatenate([curves[key][0] for key in keys]))
    counts = np.array([np.interp(times, *curves[key], left=0.0) for key in keys])
    held = np.array([np.interp(times, *flights[key], left=0.0, right=0.0) for key in keys])
    grown = np.maximum(np.diff(counts, axis=1), 0.0)
    carry = np.zeros(len(keys))
    for k in range(len(times) - 2, -1, -1):
        total = grown[:, k] + carry
        room = ceiling_Bps * (times[k + 1] - times[k])
        # k = 0: nothing was sampled before the first stretch to move bytes into
        moved = min(total.sum() - room, held[:, k].sum()) if k > 0 else 0.0
        carry = total * (moved / total.sum()) if moved > 0 else np.zeros(len(keys))
        grown[:, k] = total - carry
    placed = np.concatenate((counts[:, :1], counts[:, :1] + np.cumsum(grown, axis=1)), axis=1)
    return {key: (times, placed[row]) for row, key in enumerate(keys)}


def delivered(sock) -> int:
    """Bytes the receiver has: acknowledged cumulatively, and SACKed beyond that (an older probe
    sends no sacked: then bytes_acked alone)."""
    return sock.bytes_acked + (sock.sacked or 0) * (sock.mss or 0)


def outstanding(sock) -> int:
    """Bytes sent and not yet known to the receiver: packets out less those SACKed."""
    if sock.unacked is None or sock.mss is None:
        return 0
    return max(0, sock.unacked - (sock.sacked or 0)) * sock.mss


def retransmits(samples, port: int, start_s: float, sockets: set[tuple[str, int]] | None = None) -> int | None:
    """Sum over the burst's sockets (as per_second's) of their last retrans_total."""
    last: dict[tuple[str, int], int] = {}
    for sample in samples:
        sock = sample.sock
        key = (sock.src, sock.sport)
        if sock.dport == port and sample.t_s >= start_s and sock.retrans_total is not None \
                and (sockets is None or key in sockets):
            last[key] = sock.retrans_total
    return sum(last.values()) if last else None
