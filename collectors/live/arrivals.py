"""Per-second figures from cumulative counts of what arrived, sampled on the trial's clock.

Every per-second throughput the store keeps comes from here, whatever the tool: a TCP flow's from
its sockets' delivered bytes (acked_rate.py), a UDP flow's from the kernel counters of its ports on
the receiver (arrival_meter.py), never from what a user-level receiver read, which a delayed
reader reports late and in bulk. A second's figure is the growth of each cumulative count between
the second's two boundaries, each read by linear interpolation between the samples either side of
it. So a second's rate is a weighted mean of the rates between neighbouring samples, and no second
can read more than the fastest stretch between two samples carried: a stalled sampler spreads its
gap over the seconds it spans instead of handing it all to one.
"""

from __future__ import annotations

import math

import numpy as np

from longhaul.drivers.result import Interval

# a stretch shorter than this share of a series' median is too short to give an edge its rate
SHORT_SHARE = 0.5
IPV4_UDP_HEADERS = 28       # the meter counts IP bytes; a datagram's payload is 28 bytes fewer


def bins(series: dict, end: float) -> list[Interval]:
    """series: a key (a socket, a port) -> [(seconds since the burst's start, cumulative bytes), ...]
    in time order; each count is 0 before its first sample and holds after its last. One Interval
    per whole second up to `end`, then the partial rest; streams in key order."""
    return binned({key: edges(np.array([p[0] for p in points], dtype=float),
                                np.array([p[1] for p in points], dtype=float)) for key, points in series.items()}, end)


def binned(curves: dict, end: float) -> list[Interval]:
    """bins() of curves whose edges are already placed: key -> (times, counts) arrays."""
    if not curves or end <= 0:
        return []
    keys = sorted(curves)
    bounds = [float(k) for k in range(1, math.floor(end) + 1)]
    if not bounds or end - bounds[-1] > 1e-6:
        bounds.append(end)
    out, previous, last_bound = [], dict.fromkeys(keys, 0), 0.0
    for bound in bounds:
        current = {key: round(float(np.interp(bound, *curves[key], left=0.0))) for key in keys}
        streams = [max(0, current[key] - previous[key]) for key in keys]
        out.append(Interval(round(bound, 3), round(bound - last_bound, 3), sum(streams), streams))
        previous, last_bound = current, bound
    return out


def edges(times: np.ndarray, counts: np.ndarray, cap: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The samples with a knot added inside each edge: a stretch between two samples that carried
    less than its faster neighbour did is taken to have run at that neighbour's rate, next to it
    (a flow that stopped stopped early in it; one that started started late), not spread over the
    whole stretch, which would leak an edge's bytes into the second beside it (0.6 Mb/s in the
    off second after a 20 Mb/s square wave, with 10 Hz samples). No stretch runs faster than its
    own rate or its neighbours'. A neighbour's rate counts only where it was measured over at
    least half the series' usual stretch, and only up to `cap` (counts per second) where one is
    given: a short stretch's rate, or a late-ACK burst's, is not the wire's (under TCG a stream's
    29 ms stretch at 23 Mb/s beside a 10 Mb/s shaper packed 0.6 s of its bytes into 0.15 s, and
    the second read 12.1 Mb/s: tests/data/tcg-gridftp-tcpinfo.jsonl)."""
    if len(times) < 3:
        return times, counts
    spans, grown = np.diff(times), np.diff(counts)
    rates = np.divide(grown, spans, out=np.zeros_like(grown), where=spans > 0)
    measured = np.where(spans >= SHORT_SHARE * np.median(spans), rates, 0.0)
    out_t, out_c = [times[0]], [counts[0]]
    for i, (span, rate) in enumerate(zip(spans, rates)):
        before = measured[i - 1] if i > 0 else 0.0
        after = measured[i + 1] if i + 1 < len(rates) else 0.0
        fastest = min(max(before, after), cap) if cap else max(before, after)
        if grown[i] > 0 and span > 0 and rate < 0.9 * fastest:
            run = grown[i] / fastest
            if before >= after:      # the stretch's bytes came first, at the rate before
                out_t.append(times[i] + run)
                out_c.append(counts[i + 1])
            else:                    # ... or last, at the rate after
                out_t.append(times[i + 1] - run)
                out_c.append(counts[i])
        out_t.append(times[i + 1])
        out_c.append(counts[i + 1])
    return np.array(out_t), np.array(out_c)


def counted(points: list[tuple[float, int, int]], start_s: float, until_s: float | None = None) -> list[Interval]:
    """A port's meter samples [(trial seconds, IP bytes, packets), ...] -> per-second intervals of
    the UDP payload that arrived from start_s (the burst's start) until the count stopped growing,
    at most until_s. The count at start_s is the zero (the port may have carried an earlier burst)."""
    payload = [(t - start_s, b - IPV4_UDP_HEADERS * p) for t, b, p in points if until_s is None or t <= until_s]
    if len(payload) < 2:
        return []
    times, values = edges(np.array([t for t, _ in payload]), np.array([v for _, v in payload], dtype=float))
    values = values - float(np.interp(0.0, times, values))
    end = float(times[np.argmax(values >= values[-1])])      # when it reached its last count
    if values[-1] <= 0 or end <= 0:
        return []
    keep = times > 0
    return binned({0: (np.concatenate(([0.0], times[keep])), np.concatenate(([0.0], values[keep])))}, end)
