"""Tool drivers: command lines, and parsers run on real captured output (tests/data)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from longhaul.drivers import fping, iperf3, ss

DATA = Path(__file__).resolve().parents[1] / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


# ------------------------------------------------------------------------------------------ iperf3

@pytest.fixture(scope="module")
def tcp():
    return iperf3.parse(read("iperf3_tcp_p2.json"))


@pytest.fixture(scope="module")
def udp():
    return iperf3.parse(read("iperf3_udp.json"))


def test_iperf3_tcp_summary(tcp):
    raw = json.loads(read("iperf3_tcp_p2.json"))
    assert (tcp.protocol, tcp.cca, tcp.streams) == ("tcp", "cubic", 2)
    assert tcp.bytes_sent == raw["end"]["sum_sent"]["bytes"] == 351_010_816
    assert tcp.bytes_received == raw["end"]["sum_received"]["bytes"] == 302_536_432
    assert tcp.retransmits == 10_901
    assert tcp.lost_percent is None and tcp.error is None
    assert tcp.seconds == pytest.approx(6.00012)
    assert tcp.local_ports == [54474, 54484] and tcp.remote_port == 5201


def test_iperf3_tcp_receiver_intervals(tcp):
    raw = json.loads(read("iperf3_tcp_p2.json"))
    server = raw["server_output_json"]["intervals"]
    assert len(tcp.receiver_intervals) == len(server) == 7
    for interval, item in zip(tcp.receiver_intervals, server):
        assert len(interval.streams) == 2
        assert sum(interval.streams) == interval.bytes == item["sum"]["bytes"]
        assert interval.end_s == pytest.approx(item["sum"]["end"])
        assert interval.seconds == pytest.approx(item["sum"]["seconds"])
    assert tcp.receiver_intervals[0].streams == [1_838_960, 1_838_960]
    # the receiver's intervals add up to what the receiver got in total
    assert sum(i.bytes for i in tcp.receiver_intervals) == tcp.bytes_received
    assert [i.end_s for i in tcp.receiver_intervals] == sorted(i.end_s for i in tcp.receiver_intervals)


def test_iperf3_intervals_receiver_view_without_tail_fragment(tcp):
    # the receiver's view; iperf3's end-of-test fragment (0.18 s here) is folded into the interval before it
    merged = tcp.intervals
    assert len(merged) == 6
    assert merged[:5] == tcp.receiver_intervals[:5]
    assert merged[-1].end_s == tcp.receiver_intervals[-1].end_s
    assert merged[-1].bytes == 58_908_984 + 10_577_640
    assert merged[-1].streams == [26_020_560 + 4_624_912, 32_888_424 + 5_952_728]
    assert all(i.seconds >= 0.5 for i in merged)
    assert sum(i.bytes for i in merged) == tcp.bytes_received


def test_iperf3_tcp_sender_intervals(tcp):
    assert len(tcp.sender_intervals) == 6
    assert all(sum(i.streams) == i.bytes for i in tcp.sender_intervals)
    assert tcp.sender_intervals[0].bytes == 11_534_336


def test_iperf3_udp(udp):
    raw = json.loads(read("iperf3_udp.json"))
    assert (udp.protocol, udp.streams, udp.retransmits) == ("udp", 1, None)
    assert udp.lost_percent == pytest.approx(20.4588, abs=1e-3)
    assert udp.bytes_sent == 206_214_024
    assert udp.bytes_received == raw["end"]["sum_received"]["bytes"] == 162_982_536
    assert udp.bytes_received == sum(i.bytes for i in udp.receiver_intervals)
    assert len(udp.receiver_intervals) == 4 and udp.local_ports == [55765] and udp.remote_port == 5201


def test_iperf3_udp_without_server_output():
    raw = json.loads(read("iperf3_udp.json"))
    del raw["server_output_json"]
    result = iperf3.parse(json.dumps(raw))
    assert result.receiver_intervals == [] and result.intervals == result.sender_intervals
    assert result.bytes_received == int(206_214_024 * (1 - raw["end"]["sum"]["lost_percent"] / 100))


def test_iperf3_error_field():
    result = iperf3.parse(json.dumps({"start": {}, "end": {}, "error": "unable to connect to server"}))
    assert result.error == "unable to connect to server"
    assert result.bytes_received == 0 and result.remote_port is None


@pytest.mark.parametrize("text", ["", "garbage", "[1, 2]", '{"end": {}}', "iperf3: error - unable to connect"])
def test_iperf3_parse_garbage(text):
    with pytest.raises(ValueError):
        iperf3.parse(text)


def test_server_argv():
    assert iperf3.server_argv(5201) == ["iperf3", "-s", "-p", "5201", "--json", "-i", "1"]
    assert iperf3.server_argv(5202, bind="10.2.1.2")[-2:] == ["-B", "10.2.1.2"]


def opt(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_client_argv_tcp():
    argv = iperf3.client_argv("D1", 5201, duration_s=40, streams=2, cca="bbr")
    assert argv[:4] == ["iperf3", "-c", "D1", "-p"] and opt(argv, "-p") == "5201"
    assert "--json" in argv and "--get-server-output" in argv
    assert (opt(argv, "-P"), opt(argv, "-t"), opt(argv, "-C")) == ("2", "40", "bbr")
    assert "-n" not in argv and "-u" not in argv and "-b" not in argv and "-w" not in argv


def test_client_argv_bytes_window_bind():
    argv = iperf3.client_argv("D1", 5201, bytes_=10**9, window_bytes=4_194_304, bind="10.1.1.2")
    assert opt(argv, "-n") == "1000000000" and "-t" not in argv
    assert opt(argv, "-w") == "4194304" and opt(argv, "-B") == "10.1.1.2"
    assert "-C" not in argv  # no cca given: the namespace default applies


@pytest.mark.parametrize("rate, streams, per_stream", [(500, 1, "500000000"), (500, 2, "250000000"),
                                                       (100, 3, "33333333")])
def test_client_argv_udp_rate_split(rate, streams, per_stream):
    argv = iperf3.client_argv("D1", 5201, protocol="udp", duration_s=2.5, streams=streams, udp_rate_mbps=rate,
                              cca="cubic")
    assert "-u" in argv and opt(argv, "-b") == per_stream and opt(argv, "-t") == "2.5"
    assert "-C" not in argv  # -C only for TCP


@pytest.mark.parametrize("kwargs", [{}, {"duration_s": 10, "bytes_": 100}, {"duration_s": 10, "protocol": "udp"},
                                    {"duration_s": 10, "protocol": "sctp"}])
def test_client_argv_errors(kwargs):
    with pytest.raises(ValueError):
        iperf3.client_argv("D1", 5201, **kwargs)


# ------------------------------------------------------------------------------------------ fping

def test_fping_burst():
    burst = fping.parse_burst(read("fping_burst.txt"))
    assert burst.target == "D1" and len(burst.rtts_ms) == 10
    assert burst.received == 10 and burst.mean_ms == 128.0


def test_fping_burst_lost():
    burst = fping.parse_burst(read("fping_burst_lost.txt"))
    assert burst.target == "10.2.9.9"
    assert burst.rtts_ms == (None,) * 10 and burst.received == 0 and burst.mean_ms is None


def test_fping_burst_partial_loss_and_noise():
    text = "fping: some warning\nD1 : 128.1 - 130.5 -\n"
    burst = fping.parse_burst(text)
    assert burst.rtts_ms == (128.1, None, 130.5, None) and burst.received == 2
    assert burst.mean_ms == pytest.approx(129.3)


@pytest.mark.parametrize("text", ["", "D1 : xmt/rcv/%loss = 10/10/0%", "no result here"])
def test_fping_burst_garbage(text):
    with pytest.raises(ValueError):
        fping.parse_burst(text)


def test_fping_interval_lines():
    lines = read("fping_interval.txt").splitlines()
    replies = [fping.parse_interval_line(line) for line in lines]
    assert all(r is not None for r in replies) and len(replies) == 21
    first, last = replies[0], replies[-1]
    assert (first.timestamp, first.target, first.seq, first.rtt_ms) == (1795338495.27833, "D1", 0, 129.0)
    assert (last.seq, last.rtt_ms) == (135, 128.0)
    assert [r.timestamp for r in replies] == sorted(r.timestamp for r in replies)


@pytest.mark.parametrize("line", [
    "D1 : xmt/rcv/%loss = 136/136/0%, min/avg/max = 128/128/129",
    "[1795338495.31047] D1 : [3], timed out (NaN avg, 25% loss)",
    "[09:08:15]",
    "",
])
def test_fping_interval_non_replies(line):
    assert fping.parse_interval_line(line) is None


def test_fping_argv_has_explicit_timeout():
    argv = fping.burst_argv("D1")
    assert argv[0] == "fping" and argv[-1] == "D1"
    assert argv[argv.index("-C") + 1] == "10" and argv[argv.index("-p") + 1] == "1"
    assert int(argv[argv.index("-t") + 1]) == fping.DEFAULT_TIMEOUT_MS > 128
    assert "-q" in argv
    argv = fping.interval_argv("D1", 10)
    assert {"-D", "-l"} <= set(argv) and argv[argv.index("-p") + 1] == "10"
    assert argv[argv.index("-t") + 1] == str(fping.DEFAULT_TIMEOUT_MS)


# ------------------------------------------------------------------------------------------ ss

@pytest.fixture(scope="module")
def sockets():
    return ss.parse(read("ss.txt"))


def test_ss_sockets(sockets):
    assert len(sockets) == 3
    assert [(s.src, s.sport, s.dst, s.dport) for s in sockets] == [
        ("10.1.1.2", 57576, "10.2.1.2", 5201), ("10.1.1.2", 57588, "10.2.1.2", 5201),
        ("10.1.1.2", 57598, "10.2.1.2", 5201)]
    assert all(s.cca == "bbr" and s.mss == 1448 for s in sockets)


def test_ss_fields(sockets):
    ctrl, a, b = sockets
    assert (ctrl.cwnd, a.cwnd, b.cwnd) == (13, 5492, 5119)
    assert (a.srtt_ms, a.rttvar_ms) == (248.729, 3.478)
    assert (ctrl.srtt_ms, ctrl.rttvar_ms) == (128.903, 36.434)
    assert (a.delivery_rate_bps, b.delivery_rate_bps, ctrl.delivery_rate_bps) == (219_722_400, 185_223_496, 179_832)
    assert (a.retrans_total, b.retrans_total, ctrl.retrans_total) == (1251, 1470, None)
    assert (a.bytes_acked, ctrl.bytes_acked, ctrl.bytes_received) == (12_486_142, 165, 4)


def test_ss_bytes_in_flight(sockets):
    """In loss recovery: unacked 8262, sacked 2812, lost 1251, retrans 1251/1251 -> the kernel's
    packets in flight is 8262 - 2812 - 1251 + 1251 = 5450, just under cwnd 5492."""
    ctrl, a, b = sockets
    assert (a.unacked, a.sacked, a.lost, a.retrans_out) == (8262, 2812, 1251, 1251)
    assert a.bytes_in_flight == 5450 * 1448 and b.bytes_in_flight == (7304 - 1932 - 1723 + 1470) * 1448
    assert a.bytes_in_flight <= a.cwnd * a.mss and b.bytes_in_flight <= b.cwnd * b.mss
    assert ctrl.bytes_in_flight == 0  # nothing unacked


@pytest.mark.parametrize("text, expected", [
    ("ESTAB 0 0 10.1.1.2:40000 10.2.1.2:5201\n\t cubic rtt:10/1 mss:1448 cwnd:10 delivery_rate 1.5Mbps\n",
     ("10.1.1.2", 40000, "cubic", 1.5e6)),
    ("0 0 [::1]:40000 [::1]:5201\n\t reno mss:1448 cwnd:10 delivery_rate 2Kbps\n", ("::1", 40000, "reno", 2e3)),
    ("0 0 10.1.1.2:40000 10.2.1.2:5201\n", ("10.1.1.2", 40000, None, None)),
])
def test_ss_variants(text, expected):
    (sock,) = ss.parse(text)
    assert (sock.src, sock.sport, sock.cca, sock.delivery_rate_bps) == expected


def test_ss_empty_and_argv():
    assert ss.parse("") == []
    assert ss.argv() == ["ss", "-tinH", "state", "established"]
