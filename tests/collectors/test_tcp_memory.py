"""The end hosts' entries into TCP memory pressure, from the kernel's TcpExt counters: read from
/proc/net/netstat as captured in a namespace whose kernel was made short of TCP memory
(net.ipv4.tcp_mem 200/400/800 pages, an iperf3 over loopback for 3 s)."""

from __future__ import annotations

from pathlib import Path

from longhaul.collectors.live.tcp_memory import NETSTAT, Pressure, PressureMeter, difference, pressure_counters
from longhaul.hardware.executors.process import CommandError, Completed

CAPTURED = (Path(__file__).parents[1] / "data" / "netstat-tcp-pressure.txt").read_text()


def test_the_counters_are_read_from_the_tcpext_group():
    assert pressure_counters(CAPTURED) == Pressure(entered=20, ms=656)
    # an older kernel without them, and text that is no netstat
    assert pressure_counters(CAPTURED.replace("TCPMemoryPressures", "TCPSomethingElse")) is None
    assert pressure_counters("") is None


def test_the_difference_adds_the_hosts_read_at_both_ends():
    before = {"S1": Pressure(20, 656), "D1": Pressure(0, 0), "S2": Pressure(1, 5)}
    after = {"S1": Pressure(23, 900), "D1": Pressure(1, 0)}          # S2 was not read again
    assert difference(before, after) == Pressure(4, 244)
    assert difference({}, after) is None


class _Host:
    def __init__(self, texts, lost=None):
        self.texts, self.lost = list(texts), lost

    def run(self, argv, timeout=30.0, check=True, input=None):
        assert argv == ["cat", NETSTAT] and not check
        text = self.texts.pop(0)
        if isinstance(text, Exception):
            raise text
        return Completed(argv, 0, text, "")


def test_the_meter_reads_before_and_after_and_leaves_out_a_host_it_cannot_read():
    busier = CAPTURED.replace(" 20 656 ", " 22 700 ")
    hosts = {"S1": _Host([CAPTURED, busier]),
             "D1": _Host([CAPTURED, CommandError("D1", ["cat", NETSTAT], -1, "timed out")]),
             "S2": _Host([], lost="no answer over SSH")}
    meter = PressureMeter(hosts)
    meter.start()
    assert meter.stop() == Pressure(2, 44)
