"""The ssh lab backend's plans without a lab (hardware/backends/ssh/lab.py): the topology and the
steps a build runs, from the example inventory; a FreeBSD router shaped by Dummynet, a standing
lab retuned in place and the path floor, against recording stand-in hosts; the traffic generator
taken into the lab. tests/system/test_hosts_lab.py runs the backend over SSH on a lab of namespaces.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from longhaul.hardware.backends.base import LinkSettings
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.backends.ssh.lab import (
    HostsLab,
    delay_settings,
    inventory_dumbbell,
    shaping_steps,
    sysctl_steps,
    tuned_sysctls,
)
from longhaul.hardware.backends.ssh.preflight import HostFacts, HostsFeatures
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import Completed, ProcessTable

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "hardware" / "example-inventory.toml"


def hosts_plan(topo, settings, allowed, netem, path_rtt_ms=None, may_allow=frozenset()):
    """Everything a lab build runs on the hosts, in order: sysctls, then the bottleneck's shaping."""
    return sysctl_steps(topo, settings, allowed, may_allow=may_allow) + shaping_steps(topo, settings, netem, path_rtt_ms)


# -- pure: topology and plan from the example inventory ------------------------------------------

def test_dumbbell_from_the_example_inventory():
    inv = load_inventory(EXAMPLE)
    topo, names = inventory_dumbbell(inv, "t1", 2, 500, 1500)
    assert names == {"R1": "R1", "R2": "R2", "S1": "S1", "D1": "D1", "S2": "S2", "D2": "D2"}
    assert [h.name for h in topo.hosts] == ["R1", "R2", "S1", "D1", "S2", "D2"]
    link = topo.bottleneck()
    assert (link.a.host, link.a.ifname, link.a.address) == ("R1", "wan", "10.0.0.1/30")
    assert (link.b.host, link.b.ifname, link.b.address) == ("R2", "wan", "10.0.0.2/30")
    assert link.rate_mbps == 500
    s2 = topo.access_link("S2")          # the router's port on the host's own subnet
    assert (s2.a.ifname, s2.a.address, s2.b.host, s2.b.ifname) == ("enp59s0f0", "10.1.2.2/24", "R1", "s2")
    assert (topo.access_link("D1").b.host, topo.access_link("D1").b.ifname) == ("R2", "d1")
    assert topo.address("D1") == "10.2.1.2" and topo.address("S2") == "10.1.2.2"
    assert topo.routes == ()            # the facility routes; longhaul never does
    with pytest.raises(ValueError, match="needs 3 pair"):
        inventory_dumbbell(inv, "t1", 3, 500, 1500)


def test_plan_touches_only_sysctls_and_the_bottleneck():
    inv = load_inventory(EXAMPLE)
    topo, _ = inventory_dumbbell(inv, "t1", 1, 500, 1500)
    settings = LinkSettings(rtt_ms=40, queue_bytes=2_500_000, cca="cubic", buffer="normal")
    allowed = {"S1": ("reno", "cubic"), "D1": ("reno",)}
    steps = hosts_plan(topo, settings, allowed, {"R1": True, "R2": False})
    assert {s.argv[0] for s in steps} == {"sysctl", "tc"}          # no ip addr/route/link
    by_host = {}
    for step in steps:
        by_host.setdefault(step.host, []).append(step.argv)
    assert ["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic"] in by_host["S1"]
    assert not any("tcp_congestion_control" in " ".join(a) for a in by_host["D1"])   # not allowed there
    assert ["sysctl", "-q", "-w", "net.core.rmem_max=268435456"] in by_host["S1"]
    assert by_host["R1"][0] == ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]
    r1_tc = [a for a in by_host["R1"] if a[0] == "tc"]
    assert [a[5:8] for a in r1_tc] == [["root", "handle", "1:"], ["parent", "1:1", "handle"]]
    assert r1_tc[0][8:11] == ["netem", "delay", "20ms"] and "tbf" in r1_tc[1]    # netem on R1
    r2_tc = [a for a in by_host["R2"] if a[0] == "tc"]
    assert len(r2_tc) == 1 and r2_tc[0][4] == "wan" and "tbf" in r2_tc[0]       # delay line on R2
    assert all(a[4] == "wan" for a in r1_tc + r2_tc)
    # the path's own RTT comes off the added delay (6 ms of emulated hops: 34 ms added, 17 each way);
    # a path under 0.5 ms (namespaces, a LAN) is left alone; the sysctls (BDP) keep the target RTT
    slow = hosts_plan(topo, settings, allowed, {"R1": True, "R2": True}, path_rtt_ms=6.0)
    roots = [st.argv for st in slow if st.argv[0] == "tc" and st.argv[6:8] == ["handle", "1:"]]
    assert [a[8:11] for a in roots] == [["netem", "delay", "17ms"]] * 2
    assert [st for st in slow if st.argv[0] == "sysctl"] == [st for st in steps if st.argv[0] == "sysctl"]
    assert delay_settings(settings, 0.3) == settings and delay_settings(settings, 50).rtt_ms == 0


def test_a_host_of_its_own_gets_the_cell_s_cca_allowed_and_as_its_default():
    """A real host's (or VM's) allowed list is extended by the cell's CCA for the run, before the
    default is set; a host whose list is read-only (a network namespace) keeps per-socket CCAs."""
    topo, _ = inventory_dumbbell(load_inventory(EXAMPLE), "t1", 1, 500, 1500)
    settings = LinkSettings(rtt_ms=40, queue_bytes=2_500_000, cca="htcp", buffer="normal")
    allowed = {"S1": ("reno", "cubic"), "D1": ("reno", "cubic")}
    steps = hosts_plan(topo, settings, allowed, {"R1": True, "R2": True}, may_allow=frozenset({"S1"}))
    s1 = [st.argv[3] for st in steps if st.host == "S1"]
    assert s1.index("net.ipv4.tcp_allowed_congestion_control=reno cubic htcp") \
        < s1.index("net.ipv4.tcp_congestion_control=htcp")
    assert not any("congestion_control" in st.argv[3] for st in steps if st.host == "D1")


def test_lab_interface_without_touching_hosts():
    inv = load_inventory(EXAMPLE)
    topo, names = inventory_dumbbell(inv, "t1", 1, 500, 1500)
    features = HostsFeatures("x.toml", {"S1": HostFacts("S1", "sender", ("reno", "cubic")),
                                        "D1": HostFacts("D1", "receiver", ("reno",)),
                                        "R1": HostFacts("R1", "router", netem=False),
                                        "R2": HostFacts("R2", "router", netem=False)})
    from longhaul.hardware.cleanup import CleanupStack
    from longhaul.hardware.executors.process import ProcessTable
    lab = HostsLab(inv, topo, names, LinkSettings(20, 50_000, "cubic", "default"), features, ProcessTable(),
                   CleanupStack(), Path("/tmp"))
    assert lab.address("D1") == "10.2.1.2" and lab.executor("R1").host == "192.0.2.31"
    assert lab.sysctls["S1"]["net.ipv4.tcp_congestion_control"] == "cubic"
    assert lab.sysctls["R2"] == {"net.ipv4.ip_forward": "1"}
    assert features.delay == "delayline" and features.as_dict()["hosts"]["R1"]["netem"] is False


class RecordingHost:
    """A FreeBSD or Linux machine that answers what a lab build reads and records every command
    (no FreeBSD can boot here: this checks the dispatch, not Dummynet)."""

    remote, lost = True, None          # a machine of its own, answering

    def __init__(self, name, log, ipfw_state="65535 allow ip from any to any\n"):
        self.name, self.log, self.ipfw_state = name, log, ipfw_state

    def run(self, argv, timeout=30.0, check=True, input=None):
        self.log.append((self.name, list(argv)))
        out = ""
        if argv[:2] == ["sysctl", "-n"]:
            out = "".join("0\n" for _ in argv[2:])
        elif argv[:2] == ["sh", "-c"] and "ipfw list" in argv[2]:
            out = self.ipfw_state + "--- pipes\n"
        elif argv[:2] == ["tc", "-j"]:
            out = "[]"
        return Completed(argv, 0, out, "")


def freebsd_lab(monkeypatch, ipfw_state="65535 allow ip from any to any\n"):
    inv = load_inventory(EXAMPLE)
    inv = inv.model_copy(update={"hosts": [h.model_copy(update={"os": "freebsd"}) if h.role == "router" else h
                                           for h in inv.hosts]})
    log = []
    monkeypatch.setattr(type(inv), "executor", lambda self, name, procs, via=None: RecordingHost(
        name, log, ipfw_state if name in ("R1", "R2") else ""))
    topo, names = inventory_dumbbell(inv, "t1", 1, 100, 1500)
    features = HostsFeatures("x.toml", {"S1": HostFacts("S1", "sender", ("reno", "cubic")),
                                        "D1": HostFacts("D1", "receiver", ("reno",)),
                                        "R1": HostFacts("R1", "router"), "R2": HostFacts("R2", "router")})
    cleanup = CleanupStack()
    lab = HostsLab(inv, topo, names, LinkSettings(25, 312_500, "cubic", "default"), features, ProcessTable(),
                   cleanup, Path("/tmp"))
    return lab, cleanup, log


def test_a_freebsd_router_is_shaped_by_dummynet_and_restored(monkeypatch):
    lab, cleanup, log = freebsd_lab(monkeypatch)
    lab.build()
    r1 = [argv for host, argv in log if host == "R1"]
    assert ["ipfw", "pipe", "50", "config", "bw", "100Mbit/s", "delay", "13", "queue", "306Kbytes"] in r1
    assert ["ipfw", "-q", "add", "50", "pipe", "50", "ip", "from", "any", "to", "any", "out", "xmit", "wan"] in r1
    assert ["sysctl", "net.inet.ip.forwarding=1"] in r1 and ["sysctl", "net.inet.ip.fw.one_pass=1"] in r1
    assert not any(argv[0] in ("tc", "iptables", "ip") for argv in r1)           # no Linux tool on FreeBSD
    assert lab.record["delay"] == {"R1": "shaper", "R2": "shaper"} and not lab.delaylines
    assert lab.record["hosts"]["R1"]["qdisc"]["before"] == {"kind": "dummynet", "rules": [65535], "pipes": []}
    log.clear()
    assert cleanup.close() == []
    r2 = [argv for host, argv in log if host == "R2"]
    assert ["ipfw", "-q", "delete", "50"] in r2 and ["ipfw", "pipe", "delete", "50"] in r2
    assert ["sysctl", "net.inet.ip.forwarding=0"] in r2                          # as found
    assert lab.record["restored"] is True


class NoModules(RecordingHost):
    """A host whose kernel has no module for the algorithm asked."""

    def run(self, argv, timeout=30.0, check=True, input=None):
        if argv[0] == "modprobe":
            raise RuntimeError(f"modprobe: FATAL: Module {argv[1]} not found")
        return super().run(argv, timeout, check, input)


def test_a_standing_lab_takes_another_cca_in_place_and_restores_what_it_found(monkeypatch):
    """Lab.retune on hosts of their own: the next cell's algorithm loaded, allowed and the
    default, recorded in turn, and what the build found restored at teardown; a cell whose
    tuning writes other keys (buffer limits) or asks another path is refused (rebuilt)."""
    lab, cleanup, log = freebsd_lab(monkeypatch)
    lab._may_allow = frozenset({"S1", "D1"})   # real hosts: their allowed list is theirs to extend for the run
    lab.sysctls = tuned_sysctls(lab.topo, lab.settings, lab._allowed, lab.routers, lab._may_allow)
    lab.build()
    log.clear()
    htcp = dataclasses.replace(lab.settings, cca="htcp")
    assert lab.retune(htcp) and lab.settings == htcp
    s1 = [argv for host, argv in log if host == "S1"]
    assert ["modprobe", "tcp_htcp"] in s1
    writes = [argv[-1] for argv in s1 if argv[:2] == ["sysctl", "-q"]]
    assert writes.index("net.ipv4.tcp_allowed_congestion_control=reno cubic htcp") \
        < writes.index("net.ipv4.tcp_congestion_control=htcp")
    tuned = lab.record["hosts"]["S1"]
    assert [a["net.ipv4.tcp_congestion_control"] for a in tuned["sysctl"]["applied_in_turn"]] == ["cubic", "htcp"]
    assert tuned["sysctl"]["applied"]["net.ipv4.tcp_congestion_control"] == "htcp"
    assert tuned["modules_loaded"] == ["tcp_cubic", "tcp_htcp"]       # this fake host lists none loaded
    assert not lab.retune(dataclasses.replace(htcp, buffer="large"))    # tcp_rmem & co: keys the build never read
    assert not lab.retune(dataclasses.replace(htcp, rtt_ms=50))
    sender = lab._executors["S1"]
    lab._executors["S1"] = NoModules("S1", log)
    with pytest.raises(RuntimeError, match="modprobe"):
        lab.retune(dataclasses.replace(htcp, cca="scalable"))
    assert lab.settings == htcp            # not half-applied: the next cell asking for it tries again
    lab._executors["S1"] = sender
    log.clear()
    assert cleanup.close() == [] and lab.record["restored"] is True
    s1 = [argv[-1] for host, argv in log if host == "S1" and argv[:2] == ["sysctl", "-q"]]
    assert "net.ipv4.tcp_congestion_control=0" in s1                  # as this fake host first read it


class EchoingHost(RecordingHost):
    """A sender whose echoes to D1 answer with the least RTTs given, one reading after another."""

    def __init__(self, name, log, readings):
        super().__init__(name, log)
        self.readings = readings

    def run(self, argv, timeout=30.0, check=True, input=None):
        if "longhaul.drivers.agents.icmp_echo" in argv:
            least = self.readings.pop(0)
            return Completed(argv, 0, json.dumps({"rtts_ms": [least + 0.5, least, None]}) + "\n", "")
        return super().run(argv, timeout, check, input)


def test_a_path_floor_read_while_busy_is_corrected_once_the_delay_is_set(monkeypatch):
    """The floor read before shaping was 18 ms (busy TCG hops) on a 3 ms path: with 7 ms added, the
    path's least RTT is 10 ms, below the configured 25. The lab sets the delay again for a 3 ms
    floor (22 ms added: 11 each way) and reads 25 ms; nothing is left below the floor."""
    lab, cleanup, log = freebsd_lab(monkeypatch)
    readings = [18.0, 10.0, 25.0]
    s1 = EchoingHost("S1", log, readings)
    lab._executors["S1"] = s1
    lab.build()
    assert readings == [] and lab.record["path_rtt_checks_ms"] == [18.0, 10.0, 25.0]
    assert lab.record["path_rtt_ms"] == 3.0 and lab.record["added_rtt_ms"] == 22.0
    r1 = [argv for host, argv in log if host == "R1"]
    configs = [argv for argv in r1 if argv[:4] == ["ipfw", "pipe", "50", "config"]]
    assert [c[c.index("delay") + 1] for c in configs] == ["4", "11"], configs     # 7 ms, then 22 ms in all
    assert r1.index(["ipfw", "pipe", "delete", "50"]) < r1.index(configs[1])      # undone before it is set again
    log.clear()
    assert cleanup.close() == []
    assert [argv for host, argv in log if host == "R1"].count(["ipfw", "pipe", "delete", "50"]) == 1


def test_an_emulated_path_takes_nothing_off_the_delay(monkeypatch):
    """A lab that says its path has no floor (VMs under TCG): the 3 ms read before shaping is
    recorded, the routers add the whole 25 ms, and the path reads 28 ms, never below the profile's."""
    lab, cleanup, log = freebsd_lab(monkeypatch)
    lab.compensate_path = False
    readings = [3.0, 28.0]
    lab._executors["S1"] = EchoingHost("S1", log, readings)
    lab.build()
    assert readings == [] and lab.record["path_rtt_checks_ms"] == [3.0, 28.0]
    assert lab.record["path_rtt_ms"] is None and lab.record["added_rtt_ms"] == 25.0
    configs = [argv for host, argv in log if host == "R1" and argv[:4] == ["ipfw", "pipe", "50", "config"]]
    assert [c[c.index("delay") + 1] for c in configs] == ["13"], configs         # half of 25, rounded up, once
    assert cleanup.close() == []


def test_a_freebsd_router_with_our_rule_numbers_taken_is_left_alone(monkeypatch):
    lab, _, log = freebsd_lab(monkeypatch, "00050 allow ip from any to any\n65535 deny ip from any to any\n")
    with pytest.raises(RuntimeError, match="already has ipfw rule 50"):
        lab.build()
    assert not any(argv[0] == "ipfw" and "config" in argv for _, argv in log)


def test_a_freebsd_router_needs_no_netem_or_delay_line():
    from longhaul.hardware.backends.ssh.preflight import _facts
    inv = load_inventory(EXAMPLE)
    r1 = inv.host("R1").model_copy(update={"os": "freebsd"})
    facts, problems = _facts(inv, r1, None)          # Dummynet delays itself: nothing to ask the router
    assert (facts.netem, problems) == (False, [])


def _with_generator(tmp_path: Path) -> Path:
    """The example inventory with its commented generator block taken in."""
    text = EXAMPLE.read_text()
    start = text.index('# [[hosts]]\n# name = "G1"')
    end = text.index("\n\n", start)
    block = "\n".join(line[2:] for line in text[start:end].splitlines())
    path = tmp_path / "example-with-generator.toml"
    path.write_text(text[:start] + block + text[end:])
    return path


def test_the_generator_is_g1_of_the_lab_and_gives_trex_its_tree_port_and_receiver(tmp_path):
    from longhaul.hardware.backends.base import LabSpec
    from longhaul.hardware.backends.ssh.backend import SshBackend, SshConfigured, SshSession
    from longhaul.hardware.backends.ssh.preflight import _facts, lab_machines
    from longhaul.hardware.topology import GENERATOR
    path = _with_generator(tmp_path)
    inv = load_inventory(path)
    assert SshBackend().has_generator(SshConfigured(path)) and not SshBackend().has_generator(SshConfigured(EXAMPLE))
    assert [h.name for h in lab_machines(inv, 1)] == ["R1", "R2", "S1", "D1"]
    assert [h.name for h in lab_machines(inv, 1, generator=True)] == ["R1", "R2", "S1", "D1", "G1"]
    facts, problems = _facts(inv, inv.host("G1"), None)       # nothing asked over SSH: DPDK owns its ports
    assert facts.role == "generator" and problems == []
    hosts = {"S1": HostFacts("S1", "sender", ("reno", "cubic")), "D1": HostFacts("D1", "receiver", ("reno",)),
             "R1": HostFacts("R1", "router", netem=True), "R2": HostFacts("R2", "router", netem=True)}
    spec = LabSpec(1, 1000, 500, 1500, LinkSettings(20, 50_000, "cubic", "default"))
    without = SshSession(inv, HostsFeatures(str(path), dict(hosts)), ProcessTable(), "ssh").lab(
        spec, "t1", CleanupStack(), tmp_path)
    assert GENERATOR not in without.names                      # the run did not ask for it
    hosts["G1"] = facts
    lab = SshSession(inv, HostsFeatures(str(path), hosts), ProcessTable(), "ssh").lab(spec, "t1", CleanupStack(), tmp_path)
    assert lab.names[GENERATOR] == "G1" and lab.executor(GENERATOR).host == "192.0.2.41"
    assert lab.generator_facts(1) == {"trex_path": "/opt/trex/v3.04", "trex_ports": [0], "src_ip": "10.1.3.2",
                                      "line_rate_mbps": 10000, "dst_ip": lab.address("D1"),
                                      "rx_iface": lab.topo.access_link("D1").a.ifname}
    assert "G1" not in lab.sysctls and lab.record["hosts"]["G1"]["machine"] == "G1"


def test_a_cca_a_sender_lacks_runs_as_its_bpf_version_where_both_ends_can_run_it():
    from longhaul.hardware.backends.ssh import readiness
    from longhaul.hardware.backends.ssh.preflight import stand_ins_for
    lacking = {"S1": HostFacts("S1", "sender", ccas=("reno", "cubic"), lacks=("htcp",)),
               "D1": HostFacts("D1", "receiver")}
    ok = [readiness.Row(h, role, readiness.STAND_INS_CHECK, readiness.OK, "can register lh_htcp")
          for h, role in (("S1", "sender"), ("D1", "receiver"))]
    assert stand_ins_for(lacking, ok, ("htcp",)) == ({"htcp": "lh_htcp"}, [])
    cannot = ok[:1] + [readiness.Row("D1", "receiver", readiness.STAND_INS_CHECK, readiness.WARN, "no BTF")]
    chosen, problems = stand_ins_for(lacking, cannot, ("htcp",))
    assert problems == ["D1 (receiver) cannot run lh_htcp, and S1 lacks htcp: no BTF"]
    # a sender with the kernel's own (loaded or loadable) needs no stand-in, whatever the ends can run
    having = {**lacking, "S1": HostFacts("S1", "sender", ccas=("reno", "cubic", "htcp"))}
    assert stand_ins_for(having, cannot, ("htcp",)) == ({}, [])
    assert stand_ins_for(lacking, cannot, ()) == ({}, [])
