"""Per-second figures from cumulative counts (collectors/live/arrivals.py): edges stay in their
seconds, a stalled sampler's gap is shared, and no second reads faster than the wire between two
samples carried."""

import numpy as np
import pytest

from longhaul.collectors.live.arrivals import IPV4_UDP_HEADERS, bins, counted


def _meter(rate_Bps, times, payload=1000):
    """A port meter's samples of datagrams of `payload` bytes arriving at rate_Bps(t)."""
    out, total = [], 0.0
    for before, t in zip([times[0]] + list(times), times):
        total += np.mean([rate_Bps(before + (t - before) * k / 50) for k in range(50)]) * (t - before)
        packets = int(total / payload)
        out.append((round(t, 4), packets * (payload + IPV4_UDP_HEADERS), packets))
    return out


def test_a_square_wave_s_edges_stay_in_their_seconds():
    """20 Mb/s from 0 to 3 s, sampled at 10 Hz half a period off the edges (2.95, 3.05): the three
    seconds read 20 and nothing leaks into the fourth (linear interpolation put 0.5 Mb/s there)."""
    times = [-0.45 + 0.1 * k for k in range(60)]
    samples = _meter(lambda t: 2.5e6 if 0 <= t < 3 else 0.0, times)
    out = counted(samples, 0.0)
    rates = [iv.bytes * 8 / iv.seconds / 1e6 for iv in out]
    assert [iv.end_s for iv in out][:3] == [1.0, 2.0, 3.0], out
    assert rates[:3] == [pytest.approx(20, rel=0.01)] * 3 and sum(iv.bytes for iv in out[3:]) <= 2000, out


def test_the_count_at_the_burst_s_start_is_its_zero_and_later_counts_are_not_its():
    times = [0.1 * k for k in range(200)]
    samples = _meter(lambda t: 1e6 if (2 <= t < 5) or (12 <= t < 14) else 0.0, times)
    out = counted(samples, 10.0, until_s=16.0)       # an earlier burst on the port counted from 2 s
    assert [round(iv.bytes / 1e6, 2) for iv in out] == [0.0, 0.0, 1.0, 1.0], out
    assert counted(samples, 10.0, until_s=11.0) == []


def test_a_stalled_meter_s_gap_is_shared_by_the_seconds_it_spans():
    times = [t / 100 for t in range(0, 90, 10)] + [1.46] + [t / 100 for t in range(156, 400, 10)]
    samples = _meter(lambda t: 1.25e6 if t < 3.5 else 0.0, times)
    out = counted(samples, 0.0)
    assert [round(iv.bytes * 8 / iv.seconds / 1e6, 1) for iv in out[:3]] == [10.0, 10.0, 10.0], out


def test_no_second_reads_faster_than_the_fastest_stretch_between_samples():
    rng = np.random.default_rng(7)
    for _ in range(200):
        times = np.cumsum(rng.uniform(0.02, 0.6, 40))
        counts = np.cumsum(rng.integers(0, 1_000_000, 40))
        fastest = max(np.diff(counts) / np.diff(times))
        out = bins({0: list(zip(times - times[0], counts - counts[0]))}, times[-1] - times[0])
        assert all(iv.bytes / iv.seconds <= fastest * 1.0001 for iv in out if iv.seconds > 0)
        assert sum(iv.bytes for iv in out) == counts[-1] - counts[0]       # nothing made or lost
