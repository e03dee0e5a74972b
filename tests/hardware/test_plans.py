"""Pure plans: the dumbbell, tc shaping, host sysctls, traffic patterns and the whole netns lab plan."""
from __future__ import annotations

import pytest

from longhaul.appliance.config.schema import Flow
from longhaul.core.shaping import BURST_S, GSO_MAX, tbf_burst
from longhaul.drivers.patterns import bursts, on_seconds, span
from longhaul.hardware.backends.base import LinkSettings, bottleneck_shapes
from longhaul.hardware.backends.netns.features import Features
from longhaul.hardware.backends.netns.lab import lab_plan
from longhaul.hardware.routers.linux_tc import DirectionShape, access_plan, direction_plan, netem_limit_packets
from longhaul.hardware.topology import dumbbell, netns_name
from longhaul.hardware.tuning import buffer_limit, host_sysctls, router_sysctls, sysctl_argv

TAG = "t0042"

# ------------------------------------------------------------------------------------------ topology


@pytest.mark.parametrize("pairs", [1, 3])
def test_dumbbell_hosts(pairs):
    topo = dumbbell(TAG, pairs, 1000, 500)
    names = [h.name for h in topo.hosts]
    expected = {"R1", "R2"} | {f"S{i}" for i in range(1, pairs + 1)} | {f"D{i}" for i in range(1, pairs + 1)}
    assert set(names) == expected and len(names) == len(expected)
    roles = {h.name: h.role for h in topo.hosts}
    assert roles["R1"] == roles["R2"] == "router"
    assert all(roles[f"S{i}"] == "sender" and roles[f"D{i}"] == "receiver" for i in range(1, pairs + 1))
    for host in topo.hosts:
        assert TAG in host.netns and host.netns == netns_name(TAG, host.name) == f"lh-{TAG}-{host.name}"
    assert topo.pairs == pairs and topo.mtu == 1500


def test_dumbbell_addresses_and_links():
    topo = dumbbell(TAG, 2, 1000, 500, mtu=9000)
    bn = topo.bottleneck()
    assert (bn.a.host, bn.a.ifname, bn.a.address) == ("R1", "wan", "10.0.0.1/30")
    assert (bn.b.host, bn.b.ifname, bn.b.address) == ("R2", "wan", "10.0.0.2/30")
    assert bn.rate_mbps == 500 and topo.mtu == 9000
    access = {(l.a.host, l.a.ifname, l.a.address, l.b.host, l.b.ifname, l.b.address, l.rate_mbps)
              for l in topo.links if l.kind == "access"}
    assert access == {
        ("S1", "eth0", "10.1.1.2/24", "R1", "s1", "10.1.1.1/24", 1000),
        ("D1", "eth0", "10.2.1.2/24", "R2", "d1", "10.2.1.1/24", 1000),
        ("S2", "eth0", "10.1.2.2/24", "R1", "s2", "10.1.2.1/24", 1000),
        ("D2", "eth0", "10.2.2.2/24", "R2", "d2", "10.2.2.1/24", 1000),
    }
    assert [topo.address(h) for h in ("R1", "R2", "S1", "D1", "S2", "D2")] == \
        ["10.0.0.1", "10.0.0.2", "10.1.1.2", "10.2.1.2", "10.1.2.2", "10.2.2.2"]


def test_dumbbell_routes():
    topo = dumbbell(TAG, 2, 1000, 500)
    routes = {(r.host, r.destination, r.via) for r in topo.routes}
    assert routes == {
        ("R1", "10.2.0.0/16", "10.0.0.2"), ("R2", "10.1.0.0/16", "10.0.0.1"),
        ("S1", "default", "10.1.1.1"), ("S2", "default", "10.1.2.1"),
        ("D1", "default", "10.2.1.1"), ("D2", "default", "10.2.2.1"),
    }


def test_hosts_file():
    text = dumbbell(TAG, 1, 1000, 500).hosts_file()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0] == "127.0.0.1\tlocalhost"
    assert set(lines[1:]) == {"10.0.0.1\tR1 r1", "10.0.0.2\tR2 r2", "10.1.1.2\tS1 s1", "10.2.1.2\tD1 d1"}


@pytest.mark.parametrize("pairs", [0, 251])
def test_dumbbell_pairs_range(pairs):
    with pytest.raises(ValueError):
        dumbbell(TAG, pairs, 1000, 500)


def test_unknown_host():
    topo = dumbbell(TAG, 1, 1000, 500)
    with pytest.raises(KeyError):
        topo.host("S9")
    with pytest.raises(KeyError):
        topo.address("S9")


# ------------------------------------------------------------------------------------------ shaping

SHAPE = DirectionShape("wan", 500, 6_000_000, 64, 1500)


def test_direction_plan_netem():
    plan = direction_plan(SHAPE, use_netem=True)
    assert len(plan) == 2
    netem, tbf = plan
    assert netem[:9] == ["tc", "qdisc", "add", "dev", "wan", "root", "handle", "1:", "netem"]
    assert netem[netem.index("delay") + 1] == "64ms"
    assert int(netem[netem.index("limit") + 1]) == netem_limit_packets(SHAPE) >= 1000
    assert tbf[:10] == ["tc", "qdisc", "add", "dev", "wan", "parent", "1:1", "handle", "10:", "tbf"]
    assert tbf[tbf.index("rate") + 1] == "500mbit"
    assert tbf[tbf.index("limit") + 1] == "6000000"
    assert tbf[tbf.index("burst") + 1] == str(tbf_burst(500, 1500))


def test_direction_plan_without_netem():
    plan = direction_plan(SHAPE, use_netem=False)
    assert plan == [["tc", "qdisc", "add", "dev", "wan", "root", "handle", "1:", "tbf", "rate", "500mbit",
                     "burst", str(tbf_burst(500, 1500)), "limit", "6000000"]]
    assert not any("netem" in argv for argv in plan)


def test_direction_plan_zero_delay_has_no_netem():
    plan = direction_plan(DirectionShape("wan", 500, 6_000_000, 0, 1500), use_netem=True)
    assert len(plan) == 1 and "netem" not in plan[0] and plan[0][5] == "root"


def test_fractional_delay_and_rate():
    netem, tbf = direction_plan(DirectionShape("wan", 12.5, 30_000, 0.5, 1500), use_netem=True)
    assert netem[netem.index("delay") + 1] == "0.5ms" and tbf[tbf.index("rate") + 1] == "12.5mbit"


def test_netem_limit_covers_delay_at_line_rate():
    # 500 Mb/s of 64-byte packets for 64 ms, x2
    assert netem_limit_packets(SHAPE) == int(500e6 / 8 / 64 * 0.064 * 2)
    assert netem_limit_packets(DirectionShape("wan", 1, 3000, 1, 1500)) == 1000


@pytest.mark.parametrize("rate, mtu, expected", [
    (1, 1500, GSO_MAX), (50, 1500, GSO_MAX), (500, 1500, 625_000), (1000, 1500, 1_250_000),
    (10_000, 1500, 12_500_000), (1, 20_000, 80_000),
])
def test_tbf_burst(rate, mtu, expected):
    burst = tbf_burst(rate, mtu)
    assert burst == expected
    assert burst >= GSO_MAX and burst >= 4 * mtu and burst >= rate * 1e6 / 8 * BURST_S


@pytest.mark.parametrize("rate, expected_limit", [(1000, 8 * 2**20), (10_000, 25_000_000), (10, 8 * 2**20)])
def test_access_plan(rate, expected_limit):
    (argv,) = access_plan("eth0", rate, 1500)
    assert argv[:9] == ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "tbf"]
    assert argv[argv.index("rate") + 1] == f"{rate}mbit"
    assert int(argv[argv.index("limit") + 1]) == expected_limit


@pytest.mark.parametrize("buffer, limit", [("default", None), ("normal", 256 * 2**20), ("large", 2**30),
                                           (8_388_608, 8_388_608)])
def test_host_sysctls_buffers(buffer, limit):
    assert buffer_limit(buffer) == limit
    got = host_sysctls("cubic", buffer, ["cubic", "reno"])
    assert got["net.ipv4.tcp_no_metrics_save"] == "1"
    if limit is None:
        assert not any(k in got for k in ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem",
                                          "net.ipv4.tcp_wmem"))
    else:
        assert got["net.core.rmem_max"] == got["net.core.wmem_max"] == str(limit)
        assert got["net.ipv4.tcp_rmem"] == f"4096 131072 {limit}"
        assert got["net.ipv4.tcp_wmem"] == f"4096 16384 {limit}"


@pytest.mark.parametrize("cca, allowed, set_", [("cubic", ["cubic", "reno"], True), ("bbr", ["cubic", "reno"], False),
                                                ("bbr", ["reno", "bbr"], True), ("cubic", [], False)])
def test_host_sysctls_cca_only_when_allowed(cca, allowed, set_):
    got = host_sysctls(cca, "default", allowed)
    assert got.get("net.ipv4.tcp_congestion_control") == (cca if set_ else None)


def test_router_sysctls_and_argv():
    assert router_sysctls() == {"net.ipv4.ip_forward": "1"}
    assert sysctl_argv({"a.b": "1", "c": "4096 1"}) == [["sysctl", "-q", "-w", "a.b=1"],
                                                        ["sysctl", "-q", "-w", "c=4096 1"]]


# ------------------------------------------------------------------------------------------ patterns

def flow(**kw) -> Flow:
    return Flow(name="f", role="background", **kw)


def test_constant_pattern():
    (b,) = bursts(flow(duration_s=30, start_s=4))
    assert (b.index, b.start_s, b.duration_s, b.bytes, b.stop_s) == (0, 4, 30, None, 34)
    (b,) = bursts(flow(bytes=10**6, start_s=2))
    assert (b.start_s, b.duration_s, b.bytes, b.stop_s) == (2, None, 10**6, None)
    assert on_seconds(flow(bytes=10**6)) is None


@pytest.mark.parametrize("start", [0, 5])
def test_square_pattern(start):
    f = flow(pattern="square", on_s=10, off_s=10, duration_s=60, start_s=start)
    planned = bursts(f)
    assert [(b.index, b.start_s, b.duration_s, b.bytes) for b in planned] == \
        [(0, start, 10, None), (1, start + 20, 10, None), (2, start + 40, 10, None)]
    assert span(f) == (start, start + 50) and on_seconds(f) == 30


def test_bursty_udp_1_5():
    f = flow(protocol="udp", udp_rate_mbps=100, pattern="bursty", burst_s=1, every_s=5, duration_s=20)
    assert [(b.start_s, b.duration_s) for b in bursts(f)] == [(0, 1), (5, 1), (10, 1), (15, 1)]
    assert on_seconds(f) == 4


@pytest.mark.parametrize("duration, last", [
    (45, (40, 5)),          # a partial last burst is cut at the end
    (40.6, (40, 0.6)),      # still longer than 0.5 s: kept
    (40.5, (20, 10)),       # 0.5 s or less: not worth a connection, dropped
    (40.4, (20, 10)),
    (50, (40, 10)),
])
def test_last_partial_burst(duration, last):
    planned = bursts(flow(pattern="square", on_s=10, off_s=10, duration_s=duration))
    assert (planned[-1].start_s, pytest.approx(planned[-1].duration_s)) == last
    assert all(b.stop_s <= duration + 1e-9 for b in planned)


# ------------------------------------------------------------------------------------------ lab plan

def features(netem: bool) -> Features:
    return Features(root=True, netem=netem, tbf=True, htb=True, nfqueue=True,
                    congestion_controls=("reno", "cubic", "bbr"), allowed_congestion_controls=("reno", "cubic"))


SETTINGS = LinkSettings(rtt_ms=128, queue_bytes=6_000_000, cca="cubic", buffer="normal")


def by_host(steps, prefix):
    return {(s.host, " ".join(s.argv)) for s in steps if " ".join(s.argv).startswith(prefix)}


@pytest.mark.parametrize("netem", [False, True])
def test_lab_plan_every_host(netem):
    topo = dumbbell(TAG, 2, 1000, 500)
    steps = lab_plan(topo, SETTINGS, features(netem))
    hosts = [h.name for h in topo.hosts]
    assert all(s.host in hosts or s.host is None for s in steps)
    assert {s.host for s in steps if s.argv == ["ip", "link", "set", "lo", "up"]} == set(hosts)
    veths = [(s.host, s.argv) for s in steps if s.argv[:3] == ["ip", "link", "add"]]
    assert len(veths) == len(topo.links) == 5
    # each made inside its first end's namespace (the controller's own eth0 must not collide)
    assert ("R1", ["ip", "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", f"lh-{TAG}-R2"]) in veths
    assert ("S2", ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "s2", "netns", f"lh-{TAG}-R1"]) in veths
    for link in topo.links:
        for port in (link.a, link.b):
            assert (port.host, f"ip addr add {port.address} dev {port.ifname}") in by_host(steps, "ip addr")
            assert (port.host, f"ip link set {port.ifname} mtu 1500 up") in by_host(steps, "ip link set")
    assert by_host(steps, "ip route") == {(r.host, f"ip route add {r.destination} via {r.via}") for r in topo.routes}
    sysctls = by_host(steps, "sysctl")
    for router in ("R1", "R2"):
        assert (router, "sysctl -q -w net.ipv4.ip_forward=1") in sysctls
    for end in ("S1", "S2", "D1", "D2"):
        assert (end, "sysctl -q -w net.ipv4.tcp_congestion_control=cubic") in sysctls
        assert (end, f"sysctl -q -w net.core.rmem_max={256 * 2**20}") in sysctls
        assert (end, "sysctl -q -w net.ipv4.ip_forward=1") not in sysctls
    tc = [s for s in steps if s.argv[0] == "tc"]
    shaped = {(s.host, s.argv[4]) for s in tc}
    assert shaped == {("S1", "eth0"), ("S2", "eth0"), ("D1", "eth0"), ("D2", "eth0"), ("R1", "s1"), ("R1", "s2"),
                      ("R2", "d1"), ("R2", "d2"), ("R1", "wan"), ("R2", "wan")}
    wan = [s.argv for s in tc if s.argv[4] == "wan"]
    for argv in wan:
        if "tbf" in argv:
            assert argv[argv.index("limit") + 1] == "6000000" and argv[argv.index("rate") + 1] == "500mbit"
    netem_cmds = [argv for argv in wan if "netem" in argv]
    if netem:
        assert len(netem_cmds) == 2 and all(argv[argv.index("delay") + 1] == "64ms" for argv in netem_cmds)
    else:
        assert not any("netem" in s.argv for s in steps)
        assert len(wan) == 2


def test_lab_plan_order():
    steps = lab_plan(dumbbell(TAG, 1, 1000, 500), SETTINGS, features(False))
    kinds = [" ".join(s.argv[:2]) for s in steps]
    first = {k: kinds.index(k) for k in ("ip link", "ip route", "sysctl -q", "tc qdisc")}
    # veths and addresses before routes, routes before sysctls, shaping last
    assert first["ip link"] < first["ip route"] < first["sysctl -q"] < first["tc qdisc"]


def test_lab_plan_disallowed_cca_not_set():
    settings = LinkSettings(rtt_ms=10, queue_bytes=10**6, cca="bbr", buffer="default")
    steps = lab_plan(dumbbell(TAG, 1, 1000, 500), settings, features(False))
    assert not any("tcp_congestion_control" in " ".join(s.argv) for s in steps)
    assert not any("rmem_max" in " ".join(s.argv) for s in steps)


def test_bottleneck_shapes_split_rtt():
    shapes = bottleneck_shapes(dumbbell(TAG, 1, 1000, 500), SETTINGS)
    assert [(host, s.ifname, s.rate_mbps, s.queue_bytes, s.delay_ms) for s, host in shapes] == \
        [("R1", "wan", 500, 6_000_000, 64), ("R2", "wan", 500, 6_000_000, 64)]


def test_lab_plan_leaves_global_core_limits_alone():
    """On a kernel whose net.core.rmem_max/wmem_max are not per namespace (Debian 12's 6.1), the
    lab sets only the TCP autotuning limits, which every namespace has."""
    plain = Features(root=True, netem=True, tbf=True, htb=True, nfqueue=True, congestion_controls=("reno", "cubic"),
                     allowed_congestion_controls=("reno", "cubic"), core_mem_in_netns=False)
    sysctls = {" ".join(s.argv) for s in lab_plan(dumbbell(TAG, 1, 1000, 500), SETTINGS, plain) if s.argv[0] == "sysctl"}
    assert not any("net.core." in s for s in sysctls)
    assert f"sysctl -q -w net.ipv4.tcp_rmem=4096 131072 {256 * 2**20}" in sysctls
