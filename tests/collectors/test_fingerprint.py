"""The environment fingerprint: the agent's parsers on real captured output (tests/data/fingerprint/,
capture.sh on this machine, vm_capture.py on the appliance image's Debian kernel), the agent run
for real here and in a namespace, taking it through executors, the runner storing it, and the
diff and its summary as known answers."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeBackend, use_fake_backend, write_fake_config
from lab_support import scratch_namespace
from rich.console import Console

from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.live.fingerprint import (
    agent_argv,
    fingerprint_host,
    lab_fingerprint,
    parse_agent_output,
    take_fingerprints,
)
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.fingerprint import (
    Change,
    diff_fingerprints,
    fingerprint_of,
    flatten,
    summarise,
)
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.provenance import tool_versions
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.drivers.agents import fingerprint as agent
from longhaul.hardware.executors.process import LocalExecutor, NetnsExecutor, ProcessTable

DATA = Path(__file__).parents[1] / "data" / "fingerprint"
OLD_RUN = Path(__file__).parents[1] / "data" / "run-v1" / "20261123-222341-a39045"
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="namespaces need root and ip")


def data(name: str) -> str:
    return (DATA / name).read_text()


@pytest.fixture(scope="module")
def vm_fp() -> dict:
    """The agent's whole output on the appliance image's Debian 6.1 kernel (vm_capture.py)."""
    return parse_agent_output(data("agent_debian_vm.json"))


# -- the parsers, on real output -----------------------------------------------------------------

def test_ethtool_info_of_virtio_veth_and_an_interface_without_a_driver():
    assert agent.parse_ethtool_info(data("ethtool_i_virtio.txt")) == {
        "driver": "virtio_net", "driver_version": "1.0.0", "firmware": None, "bus_info": "0000:00:03.0"}
    assert agent.parse_ethtool_info(data("ethtool_i_veth.txt")) == {
        "driver": "veth", "driver_version": "1.0", "firmware": None, "bus_info": None}
    assert agent.parse_ethtool_info(data("ethtool_i_virtio_debian.txt"))["driver"] == "virtio_net"
    with pytest.raises(agent.Unreadable, match="no driver line"):
        agent.parse_ethtool_info(data("ethtool_i_lo.txt"))     # "Operation not supported"


def test_ethtool_features_keep_the_state_as_printed():
    virtio = agent.parse_ethtool_features(data("ethtool_k_virtio.txt"))
    assert virtio["rx-checksumming"] == "on [fixed]" and virtio["tcp-segmentation-offload"] == "on"
    assert virtio["tx-checksum-ipv4"] == "off [fixed]"          # a sub-feature, indented in the text
    assert virtio["large-receive-offload"] == "off [fixed]" and not any(k.startswith("Features") for k in virtio)
    veth = agent.parse_ethtool_features(data("ethtool_k_veth.txt"))
    assert veth["generic-receive-offload"] == "off" and veth["tx-scatter-gather-fraglist"] == "on"
    debian = agent.parse_ethtool_features(data("ethtool_k_virtio_debian.txt"))
    assert debian["tx-checksumming"] == "off" and len(debian) > 40
    with pytest.raises(agent.Unreadable):
        agent.parse_ethtool_features(data("ethtool_k_absent.txt"))     # a device that is not there


def test_qdiscs_root_first_then_the_others_without_handles_or_counters():
    lab = agent.parse_qdiscs(data("tc_qdisc_lab.json"))
    assert lab == {"a0": "htb r2q=10 default=0x1 direct_qlen=1000; pfifo limit=1000",
                   "a1": "noqueue", "b0": "tbf rate=12500000 burst=32762 lat=50000; ingress",
                   "b1": "noqueue", "lo": "noqueue"}
    netem = agent.parse_qdiscs(data("tc_qdisc_netem.json"))
    assert netem["a0"] == ("htb r2q=10 default=0x1 direct_qlen=1000; netem limit=1000 delay.delay=0.02 "
                           "delay.jitter=0.001 delay.correlation=0.25 ecn=false gap=0")
    assert netem["eth0"].startswith("fq_codel limit=10240 flows=1024 ") and "ecn=true" in netem["eth0"]
    host = agent.parse_qdiscs(data("tc_qdisc_host.json"))
    assert host["eth0"] == "pfifo_fast bands=3 priomap=1,2,2,2,1,2,0,0,1,1,1,1,1,1,1,1 multiqueue=false"


def test_cpuinfo_and_modules():
    assert agent.parse_cpuinfo(data("cpuinfo_epyc.txt")) == {"model": "AMD EPYC", "count": 2}
    assert agent.parse_cpuinfo(data("cpuinfo_qemu_tcg.txt")) == {"model": "QEMU Virtual CPU version 2.5+", "count": 2}
    assert agent.parse_modules(data("proc_modules_debian.txt")) == ["tcp_bbr", "tcp_htcp"]


def test_the_agent_on_a_debian_kernel(vm_fp):
    assert vm_fp["kernel"]["release"] == "6.1.0-50-amd64"
    assert vm_fp["cca"]["loaded_modules"] == ["tcp_bbr", "tcp_htcp"] and "tcp_htcp.ko" in vm_fp["cca"]["module_files"]
    assert vm_fp["qdisc"]["default"] == "fq_codel" and vm_fp["nics"]["eth0"]["driver"] == "virtio_net"
    # the VM had eth0, a0 and b0: of the per-interface trees only all and default are kept
    assert {k.split(".")[3] for k in vm_fp["sysctl"] if k.startswith("net.ipv4.conf.")} == {"all", "default"}
    assert {k.split(".")[3] for k in vm_fp["sysctl"] if k.startswith("net.ipv6.neigh.")} == {"default"}


def test_agent_output_is_found_after_a_banner_and_checked():
    line = json.dumps(agent.FINGERPRINT.stamp())
    assert parse_agent_output(f"Welcome to the lab\n{line}\n")["version"] == 1
    with pytest.raises(ValueError, match="not a host fingerprint"):
        parse_agent_output('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match="no fingerprint"):
        parse_agent_output("")


# -- the agent, for real -------------------------------------------------------------------------

def test_the_agent_on_this_machine():
    started = time.monotonic()
    res = subprocess.run(agent_argv(), capture_output=True, text=True, timeout=60, cwd="/")
    took = time.monotonic() - started
    assert res.returncode == 0, res.stderr
    fp = parse_agent_output(res.stdout)
    assert fp["format"] == agent.FINGERPRINT.name and list(fp)[2:] == list(agent.SECTIONS)
    assert fp["kernel"]["release"] == os.uname().release
    assert fp["sysctl"]["net.ipv4.tcp_congestion_control"] == Path("/proc/sys/net/ipv4/tcp_congestion_control") \
        .read_text().strip()
    assert "cubic" in fp["cca"]["available"] and fp["cca"]["default"] in fp["cca"]["available"]
    assert "lo" not in fp["nics"] and fp["cpu"]["count"] == os.cpu_count()
    assert fp["tools"]["python"].startswith("Python 3.") and fp["longhaul"]["version"]
    assert took < 5.0, took          # well under a second unloaded; the bound allows a busy CI


def test_tool_versions_keep_the_manifests_keys():
    found = tool_versions()
    assert list(found) == ["iperf3", "fping", "iproute2", "iptables"]
    if shutil.which("iperf3"):
        assert found["iperf3"] == subprocess.run(["iperf3", "--version"], capture_output=True,
                                                 text=True).stdout.splitlines()[0].strip()


@pytest.fixture
def veth_namespace():
    """A namespace with a veth pair in it (MTU 9000 on one end, a tbf on it), deleted after."""
    with scratch_namespace() as ns:
        def run(*argv):
            subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)
        run("ip", "link", "add", "fpa", "type", "veth", "peer", "name", "fpb")
        run("ip", "link", "set", "fpa", "mtu", "9000")
        run("ip", "link", "set", "fpa", "up")
        run("ip", "link", "set", "fpb", "up")
        run("tc", "qdisc", "add", "dev", "fpa", "root", "tbf", "rate", "100mbit", "burst", "32kb", "latency", "50ms")
        yield ns


@needs_root
def test_the_agent_in_a_namespace_sees_its_interfaces(veth_namespace):
    fp = take_fingerprints({"N": NetnsExecutor("N", veth_namespace, ProcessTable())})["N"]
    assert fp["kernel"]["release"] == os.uname().release       # namespaces share the machine's kernel
    assert set(fp["nics"]) == {"fpa", "fpb"}
    assert fp["nics"]["fpa"]["driver"] == "veth" and fp["nics"]["fpa"]["mtu"] == 9000
    assert fp["qdisc"]["fpa"].startswith("tbf rate=12500000 ") and fp["qdisc"]["default"] is None
    assert "net.ipv4.tcp_congestion_control" in fp["sysctl"] and "cubic" in fp["cca"]["available"]


@needs_root
def test_take_fingerprints_in_parallel_a_failing_host_is_one_line(veth_namespace):
    procs = ProcessTable()
    found = take_fingerprints({"here": LocalExecutor("here", procs),
                               "N": NetnsExecutor("N", veth_namespace, procs),
                               "gone": NetnsExecutor("gone", "lh-no-such-namespace", procs)})
    assert list(found) == ["here", "N", "gone"]
    assert found["here"]["kernel"]["release"] == found["N"]["kernel"]["release"] == os.uname().release
    assert set(found["gone"]) == {"error"} and "\n" not in found["gone"]["error"]
    assert "lh-no-such-namespace" in found["gone"]["error"]
    slow = take_fingerprints({"slow": LocalExecutor("slow", procs)}, timeout=0.01)["slow"]
    assert slow == {"error": slow["error"]} and "timed out" in slow["error"]


def test_the_controller_and_a_whole_section():
    assert fingerprint_host(LocalExecutor("controller", ProcessTable()))["kernel"]["release"] == os.uname().release
    sect = lab_fingerprint({"S1": LocalExecutor("S1", ProcessTable())}, lab="lab-1")
    assert list(sect) == ["controller", "hosts", "taken", "lab"] and list(sect["hosts"]) == ["S1"]
    assert sect["lab"] == "lab-1" and sect["taken"].endswith("Z")
    assert diff_fingerprints(sect, sect) == []


# -- stored by the runner ------------------------------------------------------------------------

class Recording:
    """A second store that keeps the manifests it was handed (a RunWriter, like InfluxMirror)."""

    def __init__(self):
        self.run_id, self.manifests = "r", []

    def write_manifest(self, manifest: RunManifest) -> None:
        self.manifests.append(copy.deepcopy(manifest))


def test_update_manifest_reaches_the_file_and_the_mirrors(tmp_path):
    mirror = Recording()
    store = FileRunWriter.create(tmp_path, "run-1", mirrors=[mirror])
    store.write_manifest(RunManifest(run_id="run-1"))
    store.update_manifest(fingerprint={"hosts": {}})
    assert json.loads((store.dir / fmt.MANIFEST).read_text())["fingerprint"] == {"hosts": {}}
    assert [m.fingerprint for m in mirror.manifests] == [None, {"hosts": {}}]


def test_a_misspelt_manifest_field_fails_where_it_is_written(tmp_path):
    store = FileRunWriter.create(tmp_path, "run-1")
    store.write_manifest(RunManifest(run_id="run-1"))
    with pytest.raises(TypeError, match="fingerprints"):
        store.update_manifest(fingerprints={"hosts": {}})
    with pytest.raises(TypeError, match="host_tunning"):
        RunManifest(run_id="run-1", host_tunning=[])
    assert "fingerprints" not in json.loads((store.dir / fmt.MANIFEST).read_text())


def test_a_fake_lab_run_stores_a_fingerprint_and_goes_on(tmp_path, monkeypatch):
    use_fake_backend(monkeypatch, FakeBackend())
    config = load_config(write_fake_config(tmp_path))
    before = list(logging.getLogger().handlers)
    try:
        store = Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    finally:
        for handler in [h for h in logging.getLogger().handlers if h not in before]:
            logging.getLogger().removeHandler(handler)
            handler.close()
    assert store.manifest.status == "complete"
    section = load_store(store.dir).manifest.fingerprint
    assert section["lab"] == "lab-1" and section["controller"]["kernel"]["release"] == os.uname().release
    assert set(section["hosts"]) == {"S1", "S2", "R1", "R2", "D1", "D2"}
    # the fake lab's executors run nothing: every host says why it has no fingerprint
    assert all(set(fp) == {"error"} for fp in section["hosts"].values())


# -- the diff, known answers ---------------------------------------------------------------------

LAB = ("S1", "R1", "R2", "D1")


def lab_section(fp: dict, **per_host) -> dict:
    hosts = {name: copy.deepcopy(per_host.get(name, fp)) for name in LAB}
    return {"controller": copy.deepcopy(fp), "hosts": hosts, "taken": "2026-11-24T00:00:00Z", "lab": "lab-1"}


def with_kernel(fp: dict, release: str) -> dict:
    out = copy.deepcopy(fp)
    out["kernel"]["release"] = release
    return out


def test_flatten(vm_fp):
    flat = flatten(vm_fp)
    assert flat["kernel.release"] == "6.1.0-50-amd64" and flat["cca.available"] == "bbr cubic htcp reno"
    assert flat["sysctl.net.ipv4.tcp_rmem"] == "4096 131072 6291456"
    assert flat["nics.eth0.offloads.tcp-segmentation-offload"] == "off" and flat["nics.a0.mtu"] == "1500"
    assert "nics.eth0.firmware" not in flat and "format" not in flat and "version" not in flat
    assert flat["cpu.governors"] == "" and flat["qdisc.eth0"].startswith("fq_codel ")
    assert flatten({"kernel": {"error": "no"}, "format": agent.FINGERPRINT.name}) == {"kernel.error": "no"}


def test_identical_fingerprints_differ_in_nothing(vm_fp):
    assert diff_fingerprints(lab_section(vm_fp), lab_section(vm_fp)) == []


def test_a_kernel_upgrade_on_four_hosts_is_one_line(vm_fp):
    new = with_kernel(vm_fp, "6.1.0-53-amd64")
    changes = diff_fingerprints(lab_section(vm_fp), lab_section(vm_fp, **dict.fromkeys(LAB, new)))
    assert changes == [Change(h, "kernel.release", "6.1.0-50-amd64", "6.1.0-53-amd64") for h in LAB]
    assert summarise(changes) == ["kernel: 6.1.0-50-amd64 -> 6.1.0-53-amd64 on S1, R1, R2, D1 (4 hosts)"]
    assert {c.category for c in changes} == {"kernel"}


def test_a_sysctl_on_one_host_and_a_host_on_one_side(vm_fp):
    tuned = copy.deepcopy(vm_fp)
    tuned["sysctl"]["net.ipv4.tcp_rmem"] = "4096 87380 6291456"
    after = lab_section(vm_fp, R1=tuned)
    after["hosts"]["D2"] = copy.deepcopy(vm_fp)
    after["hosts"]["R2"] = {"error": "timed out after 60.0s"}
    changes = diff_fingerprints(lab_section(vm_fp), after)
    assert changes == [Change("R1", "sysctl.net.ipv4.tcp_rmem", "4096 131072 6291456", "4096 87380 6291456"),
                       Change("R2", "(error)", None, "timed out after 60.0s"),
                       Change("D2", "(host)", None, "present")]
    assert summarise(changes) == ["sysctl net.ipv4.tcp_rmem: 4096 131072 6291456 -> 4096 87380 6291456 on R1",
                                  "hosts: D2 only in the second run",
                                  "no fingerprint of R2 in the second run: timed out after 60.0s"]
    assert {c.category for c in changes} == {"sysctl", "(error)", "(host)"}
    assert diff_fingerprints(None, lab_section(vm_fp))[0] == Change("controller", "(host)", None, "present")


def test_the_summary_puts_the_kernel_first_and_bounds_each_category(vm_fp):
    new = with_kernel(vm_fp, "6.1.0-53-amd64")
    for key in sorted(new["sysctl"])[:14]:
        new["sysctl"][key] += "0"
    new["tools"]["iperf3"] = "iperf 3.16 (cJSON 1.7.15)"
    lines = summarise(diff_fingerprints(lab_section(vm_fp), lab_section(vm_fp, S1=new)), per_category=10)
    assert lines[0] == "kernel: 6.1.0-50-amd64 -> 6.1.0-53-amd64 on S1"
    assert lines[1].startswith("sysctl net.") and lines[11] == "sysctl: and 4 more changes"
    assert lines[12] == "tools iperf3: iperf 3.12 (cJSON 1.7.15) -> iperf 3.16 (cJSON 1.7.15) on S1"
    assert len(lines) == 13


def test_an_old_run_still_says_what_changed(vm_fp):
    manifest = load_store(OLD_RUN).manifest
    old = fingerprint_of(manifest)
    assert old["controller"]["kernel"] == {"release": "6.18.44-fc-v657"}
    assert old["controller"]["tools"]["ip"] == "ip utility, iproute2-6.1.0, libbpf 1.1.2"
    assert old["hosts"] == {} and old["taken"] == manifest.started
    # an old run records no lab hosts and no sysctls: unknown, not absent; the kernel is named
    changes = diff_fingerprints(old, lab_section(vm_fp))
    assert changes == [Change("controller", "kernel.release", "6.18.44-fc-v657", "6.1.0-50-amd64")]
    assert fingerprint_of(dataclasses.replace(manifest, fingerprint=lab_section(vm_fp)))["hosts"]["S1"] == vm_fp
    assert fingerprint_of(RunManifest()) is None


def test_the_agent_runs_as_a_module_of_the_hosts_python():
    assert agent_argv("/opt/longhaul/.venv/bin/python") == ["/opt/longhaul/.venv/bin/python", "-m",
                                                           "longhaul.drivers.agents.fingerprint"]
    assert agent_argv() == [sys.executable, "-m", agent.MODULE]
