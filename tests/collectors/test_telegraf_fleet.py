"""Telegraf's fleet (collectors/live/telegraf.py: TelegrafFleet) for real: build/bin/telegraf on two
namespaces joined by a veth while iperf3 runs (root), and on a "remote" host behind a real sshd
(tests/support/ssh_lab.py). The pure parts are tests/collectors/test_telegraf.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from influx_lines import parse_file, parse_line
from netns_wiring import veth_pair
from ssh_lab import lab_skip_reason as ssh_skip_reason
from ssh_lab import ssh_lab

from longhaul.collectors.live import telegraf as tg
from longhaul.hardware.executors.process import NetnsExecutor, ProcessTable, wait_until
from longhaul.hardware.topology import Dumbbell, Host, Link, Port

BINARY = tg.LOCAL_BINARY


class FakeLab:
    """What TelegrafFleet uses of a Lab: the topology and an executor per host."""

    def __init__(self, topo: Dumbbell, executors: dict):
        self.topo, self._executors = topo, executors

    def executor(self, host: str):
        return self._executors[host]


def pair_topology(ns_a: str, ns_b: str) -> Dumbbell:
    hosts = (Host("S1", "sender", ns_a), Host("D1", "receiver", ns_b))
    link = Link(Port("S1", "tga", "10.206.0.1/24"), Port("D1", "tgb", "10.206.0.2/24"), "access", 1000.0)
    return Dumbbell("tg", 1, hosts, (link,), (), 1500)


def netns_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not os.access(BINARY, os.X_OK):
        return f"{BINARY} is not built (make telegraf builds it where a Go >= 1.25 is)"
    if not shutil.which("iperf3"):
        return "iperf3 is not installed (make setup installs it)"
    return None


@pytest.fixture
def netns_pair():
    reason = netns_skip_reason()
    if reason:
        pytest.skip(reason)
    ns_a, ns_b = f"lhtg{os.getpid()}-a", f"lhtg{os.getpid()}-b"
    try:
        veth_pair(ns_a, ns_b, "10.206.0.1", "10.206.0.2", "tga", "tgb")
        yield ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _listening(executor, port: int) -> bool:
    return f":{port}" in executor.run(["ss", "-Hltn", f"sport = :{port}"], check=False).stdout


@pytest.mark.lab
def test_fleet_on_a_namespace_pair_records_the_hosts_while_iperf3_runs(netns_pair, tmp_path):
    ns_a, ns_b = netns_pair
    procs = ProcessTable()
    executors = {"S1": NetnsExecutor("S1", ns_a, procs), "D1": NetnsExecutor("D1", ns_b, procs)}
    lab = FakeLab(pair_topology(ns_a, ns_b), executors)
    assert tg.unavailable(lab) == {}
    out = tmp_path / "influx"
    fleet = tg.TelegrafFleet(lab, "run-tg-1", out, {"backend": "netns"}, interval_s=0.5, work_dir=tmp_path / "lab")
    try:
        assert fleet.start() == {}
        assert all(path.stat().st_size > 0 for path in fleet.outputs())     # ready: first points written
        server = executors["D1"].start(["iperf3", "-s", "-1", "-p", "5299"], label="iperf3-server")
        wait_until(lambda: server.poll() is not None or _listening(executors["D1"], 5299), 10, interval=0.05,
                   what="iperf3 server")
        client = executors["S1"].run(["iperf3", "-c", "10.206.0.2", "-p", "5299", "-t", "3", "-b", "200M"],
                                     timeout=30)
        assert "receiver" in client.stdout
    finally:
        fleet.stop()
        fleet.stop()                                                        # twice is fine
        procs.stop_all()
    assert not procs.pids()
    for host, role, iface in (("S1", "sender", "tga"), ("D1", "receiver", "tgb")):
        points = parse_file(out / f"telegraf-{host}.lp")
        names = {name for name, *_ in points}
        assert {"net", "cpu", "nstat", "netstat", "lh_host_tcpinfo"} <= names, (host, names)
        for _, tags, _, _ in points:
            assert (tags["run"], tags["host"], tags["role"], tags["backend"]) == ("run-tg-1", host, role, "netns")
        assert {tags["interface"] for name, tags, _, _ in points if name == "net"} == {iface}   # its own only
        assert (tmp_path / "lab" / f"telegraf-{host}.conf").exists()
    sender = parse_file(out / "telegraf-S1.lp")
    data = [(tags, fields) for name, tags, fields, _ in sender if name == "lh_host_tcpinfo" and tags["dport"] == "5299"]
    assert data, "no tcp_info of the iperf3 connections on S1"
    assert max(fields.get("bytes_acked", 0) for _, fields in data) > 10_000_000
    assert all(tags["src"] == "10.206.0.1" and tags["dst"] == "10.206.0.2" and fields["srtt_us"] > 0
               for tags, fields in data)
    sent = [fields["bytes_sent"] for name, tags, fields, _ in sender if name == "net"]
    assert sent[-1] - sent[0] > 10_000_000


@pytest.mark.lab
def test_fleet_reports_a_host_without_telegraf_and_goes_on(netns_pair, tmp_path):
    ns_a, ns_b = netns_pair
    procs = ProcessTable()
    lab = FakeLab(pair_topology(ns_a, ns_b), {"S1": NetnsExecutor("S1", ns_a, procs),
                                              "D1": NetnsExecutor("D1", ns_b, procs)})
    fleet = tg.TelegrafFleet(lab, "run-tg-2", tmp_path, binary=str(tmp_path / "no-telegraf"))
    try:
        problems = fleet.start()
    finally:
        fleet.stop()
    assert set(problems) == {"S1", "D1"} and all("no-telegraf" in p for p in problems.values())
    assert not procs.pids()


# -- the fleet on a "remote" host behind a real sshd ---------------------------------------------------

@pytest.fixture
def remote(tmp_path):
    reason = ssh_skip_reason() or (None if os.access(BINARY, os.X_OK) else f"{BINARY} is not built")
    if reason:
        pytest.skip(reason)
    keys = tmp_path / "ssh"
    keys.mkdir()
    with ssh_lab(keys, "lhtg", "10.207.0") as lab:       # namespaces lhtg-<pid>-a (client), -b (host)
        yield lab


@pytest.mark.lab
def test_fleet_on_an_ssh_host_writes_remotely_and_brings_the_file_home(remote, tmp_path):
    executor = remote.executor()
    topo = Dumbbell("tg", 1, (Host("S1", "sender", ""),),
                    (Link(Port("S1", "vb", "10.207.0.2/24"), Port("R1", "x", "10.207.0.9/24"), "access", 1000.0),),
                    (), 1500)
    lab = FakeLab(topo, {"S1": executor})
    assert tg.is_remote(executor)
    out = tmp_path / "influx"
    out.mkdir()
    (out / "telegraf-S1.lp").write_text("earlier x=1i 1\n")            # an earlier lab's points stay
    # the "remote" host shares this machine's files: the built binary stands in for the image's
    fleet = tg.TelegrafFleet(lab, "run-tg-3", out, interval_s=0.5, binary=str(BINARY))
    try:
        assert fleet.start() == {}
        (agent,) = fleet.agents.values()
        assert agent.remote_dir.startswith("/tmp/longhaul-telegraf.") and agent.output.startswith(agent.remote_dir)
        wait_until(lambda: "lh_host_tcpinfo" in Path(agent.output).read_text(), 15, interval=0.2,
                   what="the ssh session's tcp_info")
    finally:
        fleet.stop()
        fleet.stop()
    assert not Path(agent.remote_dir).exists()                           # the remote files are gone
    text = (out / "telegraf-S1.lp").read_text()
    assert text.startswith("earlier x=1i 1\n")
    points = [parse_line(t) for t in text.splitlines()[1:]]
    names = {name for name, *_ in points}
    assert {"net", "nstat", "lh_host_tcpinfo"} <= names, names
    assert all(tags["run"] == "run-tg-3" and tags["host"] == "S1" for _, tags, _, _ in points)
    assert {tags["interface"] for name, tags, _, _ in points if name == "net"} == {"vb"}
    assert "[[inputs.execd]]" in (out / "telegraf-S1.conf").read_text()   # a copy of the config stays here
    remote.assert_clean()
