"""sock_diag decoding on messages laid out as the kernel lays them out, and the probe's lines."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest

from longhaul.collectors.live.socket_sampler import SocketSampler, parse_probe_line
from longhaul.drivers.agents import sock_diag


def _tcp_info(**fields) -> bytes:
    info = bytearray(232)          # the size of struct tcp_info in 6.x kernels
    for name, offset, fmt in sock_diag._TCPI:
        struct.pack_into("=" + fmt, info, offset, fields.get(name, 0))
    return bytes(info)


def _rta(kind: int, data: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(data), kind)
    return head + data + b"\0" * (-(4 + len(data)) % 4)


def _message(sport: int, dport: int, info: bytes, cca: bytes = b"cubic\0") -> bytes:
    body = sock_diag._MSG.pack(socket.AF_INET, 1, 0, 0, socket.htons(sport), socket.htons(dport),
                               socket.inet_aton("10.1.1.2") + bytes(12), socket.inet_aton("10.2.1.2") + bytes(12),
                               0, 0, 0, 0, 0, 0)
    body += _rta(sock_diag.INET_DIAG_INFO, info) + _rta(sock_diag.INET_DIAG_CONG, cca)
    return sock_diag._NLMSG.pack(16 + len(body), sock_diag.SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body


def test_parse_dump_reads_the_fields_longhaul_records():
    info = _tcp_info(mss=1448, unacked=120, srtt_us=130_500, rttvar_us=2_000, cwnd=5000, retrans_total=7,
                     bytes_acked=10**9, bytes_received=0, delivery_rate_Bps=62_500_000)
    done = sock_diag._NLMSG.pack(20, sock_diag.NLMSG_DONE, 2, 1, 0) + bytes(4)
    sockets, finished = sock_diag.parse_dump(_message(40000, 5201, info) + _message(40002, 5204, info) + done)
    assert finished and len(sockets) == 2
    first = sockets[0]
    assert (first["src"], first["sport"], first["dst"], first["dport"]) == ("10.1.1.2", 40000, "10.2.1.2", 5201)
    assert first["cca"] == "cubic" and first["mss"] == 1448 and first["cwnd"] == 5000
    assert first["srtt_us"] == 130_500 and first["retrans_total"] == 7
    assert first["bytes_acked"] == 10**9 and first["delivery_rate_Bps"] == 62_500_000


def test_short_tcp_info_from_an_old_kernel_leaves_newer_fields_empty():
    (sock,), _ = sock_diag.parse_dump(_message(1, 2, _tcp_info(cwnd=10)[:104]))
    assert sock["cwnd"] == 10 and sock["bytes_acked"] is None and sock["delivery_rate_Bps"] is None


def test_request_asks_for_established_ipv4_tcp_with_info_and_congestion():
    raw = sock_diag.request(seq=9)
    length, kind, flags, seq, _ = sock_diag._NLMSG.unpack_from(raw)
    family, protocol, ext, states = struct.unpack_from("=BBBxI", raw, 16)
    assert length == len(raw) == 16 + 56 and kind == 20 and seq == 9 and flags & 0x300
    assert (family, protocol, states) == (socket.AF_INET, socket.IPPROTO_TCP, 1 << 1) and ext == 0b1010


def test_probe_line_becomes_sockets_in_longhaul_units():
    line = json.dumps({"t": 12.5, "s": [["10.1.1.2", 40000, "10.2.1.2", 5201, "bbr", 100, 1448, 50,
                                         128_000, 1_000, 3, 62_500_000, 2_000_000, 0]]})
    t, (sock,), dump_s = parse_probe_line(line)
    assert t == 12.5 and dump_s is None and sock.srtt_ms == 128.0 and sock.delivery_rate_bps == 500_000_000
    assert sock.bytes_in_flight == 50 * 1448 and sock.cca == "bbr"   # a row without the loss fields
    assert parse_probe_line(json.dumps({"fields": []})) is None and parse_probe_line("garbage") is None


def test_probe_line_with_loss_fields_counts_what_is_in_flight():
    row = ["10.1.1.2", 40000, "10.2.1.2", 5201, "bbr", 5492, 1448, 8262, 248_729, 3_478, 1251, 0, 0, 0,
           2812, 1251, 1251]
    _, (sock,), dump_s = parse_probe_line(json.dumps({"t": 1.0, "d": 0.0004, "s": [row]}))
    assert (sock.sacked, sock.lost, sock.retrans_out, dump_s) == (2812, 1251, 1251, 0.0004)
    assert sock.bytes_in_flight == 5450 * 1448


def test_parse_dump_reads_the_loss_counters_at_their_offsets():
    info = _tcp_info(unacked=100, sacked=20, lost=5, retrans_out=3, mss=1000)
    (sock,), _ = sock_diag.parse_dump(_message(1, 2, info))
    assert (sock["unacked"], sock["sacked"], sock["lost"], sock["retrans_out"]) == (100, 20, 5, 3)


def test_ipv6_sockets_show_v4_mapped_addresses_as_ipv4():
    """A server on `::` holds IPv4 clients on IPv6 sockets (iperf3's receivers): their addresses
    read as the IPv4 ones; a real IPv6 address reads as IPv6. Asking for both families is two dumps."""
    mapped = bytes(10) + b"\xff\xff" + socket.inet_aton("10.2.1.2")
    body = sock_diag._MSG.pack(socket.AF_INET6, 1, 0, 0, socket.htons(5201), socket.htons(40000), mapped,
                               socket.inet_pton(socket.AF_INET6, "fd00::1"), 0, 0, 0, 0, 0, 0)
    body += _rta(sock_diag.INET_DIAG_INFO, _tcp_info(cwnd=10))
    (sock,), _ = sock_diag.parse_dump(sock_diag._NLMSG.pack(16 + len(body), sock_diag.SOCK_DIAG_BY_FAMILY, 2, 1, 0)
                                      + body)
    assert (sock["src"], sock["sport"], sock["dst"], sock["dport"]) == ("10.2.1.2", 5201, "fd00::1", 40000)
    assert sock["cwnd"] == 10
    assert struct.unpack_from("=B", sock_diag.request(1, socket.AF_INET6), 16)[0] == socket.AF_INET6


class _Probe:
    """A probe process that has ended (Process's interface, as far as the sampler uses it)."""

    def read_stderr(self) -> str:
        return ""

    def poll(self):
        return 0

    def stop(self, *a, **kw):
        return 0


class _Host:
    """An executor of a host of its own whose probe prints `text` into its stdout file."""

    def __init__(self, text: str):
        self.text = text

    def namespace(self):
        return None

    def start(self, argv, label="", stdout=None, stderr=None):
        Path(stdout).write_text(self.text)
        return _Probe()


def test_a_sender_s_ticks_are_placed_on_the_trial_clock_by_the_wall_clock(tmp_path):
    """A VM or a real host shares only the wall clock with the controller (its CLOCK_MONOTONIC
    counts from its own boot): ticks come stamped with it; an older probe's monotonic stamps, which
    namespaces share with the controller, still land where they did."""
    row = ["10.1.1.2", 40000, "10.2.1.2", 5201, "bbr", 100, 1448, 50, 128_000, 1_000, 3, 62_500_000, 2_000_000, 0]
    t0 = time.monotonic()
    wall = time.time()
    text = "\n".join(json.dumps({"t": t, "s": [row]}) for t in (wall + 1.5, wall + 2.5)) + "\n"
    old = json.dumps({"t": t0 + 3.5, "s": [row]}) + "\n"
    sampler = SocketSampler({"S1": _Host(text), "S2": _Host(old)}, {5201: "fg"}, tmp_path)
    sampler.start(t0)
    samples = sampler.stop()
    assert [s.t_s for s in samples] == [pytest.approx(1.5, abs=0.05), pytest.approx(2.5, abs=0.05), 3.5]
