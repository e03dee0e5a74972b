"""Dummynet/ipfw plans against ipfw(8)'s documented syntax (no FreeBSD host here: syntax only).

Section names refer to ipfw(8) as shipped with dummynet ipfw-2012 (FreeBSD sbin/ipfw/ipfw.8, 2010).
"""

from __future__ import annotations

import pytest

from longhaul.hardware.routers import freebsd_ipfw as dn


def test_pipe_plan_matches_the_documented_config_form():
    # SYNOPSIS: ipfw {pipe|queue|sched} number config config-options
    # PIPE ... CONFIGURATION: bw in [K|M]{bit/s|Byte/s} with the unit right after the number,
    # delay in ms, queue {slots | size Kbytes}
    assert dn.pipe_plan(1, 500, 64, 50) == [
        ["ipfw", "pipe", "1", "config", "bw", "500Mbit/s", "delay", "64", "queue", "50"]]


def test_queue_in_bytes_is_written_in_kbytes_rounded_up():
    # "queue {slots | size Kbytes}"; EXAMPLES write `queue 10Kbytes`; the parser multiplies K by 1024
    assert dn.pipe_plan(2, 500, 64, "6MB")[0][-2:] == ["queue", "5860Kbytes"]   # 6000000/1024 = 5859.4
    assert dn.queue_arg("4MiB") == "4096Kbytes"
    assert dn.queue_arg("6000000") == "5860Kbytes"             # bare bytes


def test_queue_in_slots_accepts_packet_spellings():
    assert dn.queue_arg(100) == "100"
    assert dn.queue_arg("400p") == "400"        # dummynet counts slots natively: no MTU conversion
    assert dn.queue_arg("20 slots") == "20"
    with pytest.raises(ValueError):
        dn.queue_arg(0)
    with pytest.raises(ValueError):
        dn.queue_arg(True)
    with pytest.raises(ValueError):
        dn.queue_arg("1bdp")                    # needs the rate and RTT: a byte size or slots here
    with pytest.raises(ValueError):
        dn.queue_arg("6 parsecs")


@pytest.mark.parametrize("mbps, text", [(500, "500Mbit/s"), (1000, "1000Mbit/s"), (10000, "10000Mbit/s"),
                                        (0.3, "300Kbit/s"), (1.5, "1500Kbit/s"), (0.0005, "500bit/s")])
def test_bandwidth_uses_documented_units_exactly(mbps, text):
    # [K|M]{bit/s|Byte/s}: no G in the documented units, so 10 Gb/s is 10000Mbit/s
    assert dn.bw_arg(mbps) == text


def test_bad_values_are_refused():
    with pytest.raises(ValueError):
        dn.bw_arg(0)                            # 0 means unlimited in dummynet: not a bottleneck
    with pytest.raises(ValueError):
        dn.pipe_plan(1, 500, 12.5, 50)          # delay is parsed as an integer number of ms
    with pytest.raises(ValueError):
        dn.pipe_plan(0, 500, 10, 50)
    with pytest.raises(ValueError):
        dn.rule_argv(65535, 1, "em0")           # the default rule
    with pytest.raises(ValueError):
        dn.rule_argv(100, 1, "em0; reboot")


def test_egress_plan_is_one_direction():
    assert dn.egress_plan("ix1", 1000, 64, 100, rule=60, pipe_id=9) == [
        ["ipfw", "pipe", "9", "config", "bw", "1000Mbit/s", "delay", "64", "queue", "100"],
        ["ipfw", "-q", "add", "60", "pipe", "9", "ip", "from", "any", "to", "any", "out", "xmit", "ix1"]]


def test_teardown_deletes_only_its_own_numbers_rules_first():
    # SYNOPSIS: ipfw [-q] [set N] {delete|zero|resetlog} [number ...];
    #           ipfw {pipe|queue|sched} {delete|list|show} [number ...]
    plan = dn.teardown_plan()
    assert plan == [["ipfw", "-q", "delete", "50", "51"], ["ipfw", "pipe", "delete", "50", "51"]]
    assert dn.teardown_plan(200, 7, count=1) == [["ipfw", "-q", "delete", "200"], ["ipfw", "pipe", "delete", "7"]]
    flat = [a for argv in plan for a in argv]
    assert "flush" not in flat and "-f" not in flat


def test_sysctls_raise_the_documented_limits_only_when_needed():
    # SYSCTL VARIABLES: pipe_byte_limit 1048576 and pipe_slot_limit 100 bound the queue sizes
    base = [["sysctl", "net.inet.ip.forwarding=1"], ["sysctl", "net.inet.ip.fw.one_pass=1"],
            ["sysctl", "net.inet.ip.dummynet.io_fast=0"]]
    assert dn.sysctl_plan(50) == base
    assert dn.sysctl_plan("1MiB") == base                       # exactly the default limit
    assert dn.sysctl_plan("6MB") == base + [["sysctl", "net.inet.ip.dummynet.pipe_byte_limit=6000640"]]
    assert dn.sysctl_plan(1000) == base + [["sysctl", "net.inet.ip.dummynet.pipe_slot_limit=1000"]]
    for argv in dn.sysctl_plan("6MB"):
        name, _, value = argv[1].partition("=")
        assert name.startswith("net.inet.ip.") and value.isdigit()


def test_hz_is_judged():
    assert dn.hz_problem("1000\n") is None
    assert "10 ms" in dn.hz_problem("100")


# `ipfw pipe show 50` as ipfw's dummynet.c prints it (list_flow: tot_pkts tot_bytes len len_bytes drops)
PIPE_SHOW = """00050:  10.000 Mbit/s   13 ms burst 0
q131122 306 KB 1 flows (1 buckets) sched 65586 weight 0 lmax 0 pri 0 droptail
 sched 65586 type FIFO flags 0x0 0 buckets 1 active
BKT Prot ___Source IP/port____ ____Dest. IP/port____ Tot_pkt/bytes Pkt/Byte Drp
  0 ip           0.0.0.0/0             0.0.0.0/0     1020  1516004 12 18000  10
"""


def test_pipe_counters_subtract_what_is_queued_and_dropped():
    sent, queued, drops = dn.pipe_counters(PIPE_SHOW)
    assert (queued, drops) == (18000, 10)
    assert sent == round(1516004 - 18000 - 10 * 1516004 / 1020)
    assert dn.pipe_counters("") is None                       # no pipe 50: not shaped here
    older = "00050:  10.000 Mbit/s   13 ms   50 sl. 1 queues (1 buckets) droptail\n" + PIPE_SHOW.splitlines()[-1]
    assert dn.pipe_counters(older)[1:] == (18000, 10)          # ipfw-2012's single header line too


def test_the_meter_reads_a_freebsd_pipe():
    from longhaul.collectors.live.shaper_meter import parse_samples
    text = f"100.0\n{PIPE_SHOW}=100.2\n"
    assert parse_samples(text, dn.FreeBSDIpfw()) == [(pytest.approx(100.1), *dn.pipe_counters(PIPE_SHOW))]
