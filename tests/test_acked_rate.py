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
