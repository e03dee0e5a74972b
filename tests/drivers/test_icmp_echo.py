"""The microsecond ICMP echo agent (drivers/agents/icmp_echo.py): packets, parsing, and real echoes
over loopback. Its precision through the delay line is test_delayline's."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess

import pytest

from longhaul.drivers.agents import icmp_echo


def test_request_carries_a_valid_checksum_and_reply_reads_ident_and_seq():
    req = icmp_echo.request(socket.AF_INET, 0x1234, 7, bytes(56))
    assert len(req) == 64 and req[0] == 8
    assert icmp_echo.checksum(req) == 0                      # a correct checksum sums to zero
    # the host's answer: type 0, behind a 20-byte IPv4 header on a raw socket
    answer = bytes([0, 0]) + req[2:]
    ip = bytes([0x45]) + bytes(19)
    assert icmp_echo.reply(ip + answer, socket.AF_INET, raw=True) == (0x1234, 7)
    assert icmp_echo.reply(answer, socket.AF_INET, raw=False) == (0x1234, 7)
    assert icmp_echo.reply(ip + req, socket.AF_INET, raw=True) is None      # our own request
    v6 = icmp_echo.request(socket.AF_INET6, 1, 2, b"")
    assert v6[0] == 128 and struct.unpack("!H", v6[2:4])[0] == 0             # the kernel sums ICMPv6


def test_parse_takes_the_result_line():
    text = 'noise\n{"target":"10.0.0.2","socket":"raw","size":56,"rtts_ms":[128.0412,null,128.3]}\n'
    assert icmp_echo.parse(text) == [128.0412, None, 128.3]
    with pytest.raises(ValueError):
        icmp_echo.parse("icmp_echo: D9: Name or service not known\n")


def test_argv_is_the_agent_module():
    argv = icmp_echo.argv("10.0.0.2", 30)
    assert argv[1:4] == ["-m", "longhaul.drivers.agents.icmp_echo", "10.0.0.2"]
    assert argv[argv.index("--count") + 1] == "30" and argv[argv.index("--period-ms") + 1] == "1"


@pytest.mark.skipif(os.geteuid() != 0, reason="a raw ICMP socket needs root")
def test_echoes_over_loopback_are_timed_below_a_millisecond():
    res = subprocess.run(icmp_echo.argv("127.0.0.1", 20), capture_output=True, text=True, timeout=10, check=True)
    out = json.loads(res.stdout)
    assert out["socket"] == "raw" and out["target"] == "127.0.0.1"
    rtts = out["rtts_ms"]
    assert len(rtts) == 20 and all(r is not None for r in rtts), rtts
    # kernel receive stamps: loopback answers in tens of microseconds, never zero or negative; the
    # send is stamped in user space, so one echo in 20 may carry a preemption on a busy machine
    assert all(r > 0 for r in rtts) and sorted(rtts)[18] < 1.0, rtts
    assert sorted(rtts)[10] < 0.2, rtts


def test_a_bad_target_exits_2():
    res = subprocess.run(icmp_echo.argv("no-such-host.invalid", 1), capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "no-such-host.invalid" in res.stderr
