import pytest

from longhaul.collectors.live.acked_rate import per_second, retransmits
from longhaul.collectors.live.socket_sampler import Sample
from longhaul.drivers.ss import Socket


def _sock(sport, dport, acked, retrans=0):
    return Socket("10.1.1.2", sport, "10.2.1.2", dport, "cubic", 10, 1448, 0, 10.0, 1.0, retrans, None, acked, None)


def test_two_streams_per_second_from_cumulative_acked():
    samples = []
    for tick in range(0, 26):                  # 10 Hz from t=5.0 to 7.5 on the trial clock
        t = 5.0 + tick / 10
        samples.append(Sample(round(t, 3), "gf", _sock(40000, 5301, 100_000 * tick, retrans=tick // 10)))
        samples.append(Sample(round(t, 3), "gf", _sock(40001, 5301, 50_000 * tick)))
        samples.append(Sample(round(t, 3), "other", _sock(40002, 5211, 999_999 * tick)))
    out = per_second(samples, 5301, start_s=5.0)
    assert [iv.end_s for iv in out] == [1.0, 2.0, 2.5]
    assert out[0].streams == [1_000_000, 500_000] and out[0].bytes == 1_500_000
    assert out[1].bytes == 1_500_000 and out[2].seconds == 0.5 and out[2].bytes == 750_000
    assert retransmits(samples, 5301, 5.0) == 2


def test_nothing_sampled_gives_nothing():
    assert per_second([], 5301, 0.0) == [] and retransmits([], 5301, 0.0) is None


def test_a_stalled_probe_s_gap_is_shared_by_the_seconds_it_spans():
    """Constant 1.2 MB/s, sampled at 10 Hz but for a 0.56 s stall across the 1 s boundary (a VM
    under TCG, measured): both seconds get their share, not 0.6 s in one and 1.4 s in the other."""
    times = [t / 100 for t in range(0, 90, 10)] + [1.46] + [t / 100 for t in range(156, 301, 10)]
    samples = [Sample(t, "gf", _sock(40000, 5301, round(1_200_000 * t))) for t in times]
    out = per_second(samples, 5301, start_s=0.0)
    assert [iv.bytes for iv in out[:2]] == [1_200_000, 1_200_000]
    assert sum(iv.bytes for iv in out) == samples[-1].sock.bytes_acked     # nothing made or lost


def test_sacked_data_counts_when_it_arrived_not_when_the_hole_was_filled():
    """A loss at 1.0 s: the cumulative ACK stalls while the receiver SACKs 1 MB/s more, until the
    retransmission fills the hole at 1.8 s. Each second delivered 1 MB; bytes_acked alone would say
    0.2 MB, then 1.8 MB."""
    samples = []
    for tick in range(0, 31):
        t = tick / 10
        if 1.0 <= t < 1.8:
            acked, sacked = 1_000_000, round((t - 1.0) * 1_000_000 / 1000)
        else:
            acked, sacked = round(1_000_000 * t), 0
        sock = _sock(40000, 5301, acked)
        samples.append(Sample(t, "gf", Socket(**{**sock.__dict__, "mss": 1000, "sacked": sacked})))
    out = per_second(samples, 5301, start_s=0.0)
    assert [iv.bytes for iv in out] == [1_000_000, pytest.approx(1_000_000, abs=2000), pytest.approx(1_000_000, abs=2000)]
