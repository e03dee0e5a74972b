"""A real lab of namespace "hosts" reached by SSH (sshd in each), shaped and restored by
longhaul's ssh backend: the fixture and the state readers test_hosts_lab and test_host_failure share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lab_support import lab_skip_reason as netns_skip_reason
from ssh_lab import (
    ensure_privsep,
    host_leftovers,
    known_hosts_line,
    lab_skip_reason,
    make_keys,
    sh,
    start_sshd,
    stop_sshd,
)

from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.executors.process import wait_until

REPO = Path(__file__).resolve().parents[2]


# -- real: longhaul run over SSH against namespace "hosts" ------------------------------------------

def skip_reason() -> str | None:
    reason = lab_skip_reason() or netns_skip_reason()
    if reason:
        return reason
    if not os.access(delayline.helper_path(), os.X_OK):
        return f"the delay-line helper is not built ({delayline.helper_path()}; make setup)"
    return None


PROFILE = """
[profile]
description = "one CUBIC flow over a real (namespace) lab reached by SSH"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 20
rtt_ms = 20
queue = "1bdp"
[tuning]
offloads = { gro = true, tso = false }      # a veth has GRO off and TSO on: both change, both restored
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 5
"""
# S1 -- R1 ==== R2 -- D1 (test networks) and a management /24 to every host
HOSTS = {   # lab name: (management address, [(ifname, address, peer host, peer ifname)])
    "S1": ("10.205.0.11", [("eth0", "10.204.1.2/24")]),
    "R1": ("10.205.0.31", [("s1", "10.204.1.1/24"), ("wan", "10.204.0.1/30")]),
    "R2": ("10.205.0.32", [("d1", "10.204.2.1/24"), ("wan", "10.204.0.2/30")]),
    "D1": ("10.205.0.21", [("eth0", "10.204.2.2/24")]),
}
VETHS = [("S1", "eth0", "R1", "s1"), ("R1", "wan", "R2", "wan"), ("R2", "d1", "D1", "eth0")]
ROUTES = [("S1", "default", "10.204.1.1"), ("D1", "default", "10.204.2.1"),
          ("R1", "10.204.2.0/24", "10.204.0.2"), ("R2", "10.204.1.0/24", "10.204.0.1")]
ROLES = {"S1": "sender", "D1": "receiver", "R1": "router", "R2": "router"}
WATCHED = {"S1": ["net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_congestion_control"],
           "D1": ["net.ipv4.tcp_no_metrics_save"], "R1": ["net.ipv4.ip_forward"], "R2": ["net.ipv4.ip_forward"]}


def inventory_toml(tmp: Path) -> str:
    text = f"""[inventory]
name = "hlab"
ssh_user = "root"
ssh_key = "{tmp / 'user_key'}"
known_hosts = "{tmp / 'known_hosts'}"
"""
    for name, (mgmt, ifaces) in HOSTS.items():
        text += f'\n[[hosts]]\nname = "{name}"\nrole = "{ROLES[name]}"\nmanagement = "{mgmt}"\n'
        for ifname, address in ifaces:
            link = 'link = "bottleneck"\n' if ifname == "wan" else ""
            text += f'[[hosts.interfaces]]\nname = "{ifname}"\naddress = "{address}"\nrate_mbps = 10000\n{link}'
    return text + '\n[bottleneck]\nr1 = "R1"\nr2 = "R2"\n[[pairs]]\nsender = "S1"\nreceiver = "D1"\n'


def in_ns(ns: str, *argv) -> str:
    return sh("ip", "netns", "exec", ns, *argv).stdout


def host_state(ns: dict[str, str]) -> dict:
    state = {h: in_ns(ns[h], "sysctl", "-n", *keys).split("\n")[:len(keys)] for h, keys in WATCHED.items()}
    for router in ("R1", "R2"):
        state[f"{router}:qdisc"] = [(q["kind"], q.get("handle")) for q in
                                    json.loads(in_ns(ns[router], "tc", "-j", "qdisc", "show", "dev", "wan"))]
        state[f"{router}:iptables"] = in_ns(ns[router], "iptables", "-w", "-t", "mangle", "-S", "FORWARD")
    for host, (_, ifaces) in HOSTS.items():
        for ifname, _ in ifaces:
            state[f"{host}:{ifname}:offloads"] = [line for line in in_ns(ns[host], "ethtool", "-k", ifname).splitlines()
                                                  if line.startswith(("generic-receive", "tcp-segmentation"))]
    return state


class RealLab:
    def __init__(self, tmp: Path):
        pid = os.getpid()
        self.tmp = tmp
        self.ns = {h: f"lhhl-{pid}-{h.lower()}" for h in HOSTS}
        self.controller = f"lhhl-{pid}-c"
        self.created: list[str] = []
        self.sshds: dict[str, subprocess.Popen] = {}
        self.made_privsep = False
        self.etc_dirs: list[Path] = []

    def build(self) -> None:
        ns, controller = self.ns, self.controller
        for name in (controller, *ns.values()):
            sh("ip", "netns", "add", name)
            self.created.append(name)
        for name in self.created:
            sh("ip", "-n", name, "link", "set", "lo", "up")
        # the management network: a bridge in the controller, one veth to each host
        sh("ip", "-n", controller, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", controller, "addr", "add", "10.205.0.1/24", "dev", "br0")
        sh("ip", "-n", controller, "link", "set", "br0", "up")
        for host, (mgmt, _) in HOSTS.items():
            sh("ip", "link", "add", f"m{host.lower()}", "netns", controller, "type", "veth",
               "peer", "name", "mgmt0", "netns", ns[host])
            sh("ip", "-n", controller, "link", "set", f"m{host.lower()}", "master", "br0", "up")
            sh("ip", "-n", ns[host], "addr", "add", f"{mgmt}/24", "dev", "mgmt0")
            sh("ip", "-n", ns[host], "link", "set", "mgmt0", "up")
        # the test networks, wired and routed by "the facility"
        for a, a_if, b, b_if in VETHS:
            sh("ip", "link", "add", a_if, "netns", ns[a], "type", "veth", "peer", "name", b_if, "netns", ns[b])
        for host, (_, ifaces) in HOSTS.items():
            for ifname, address in ifaces:
                sh("ip", "-n", ns[host], "addr", "add", address, "dev", ifname)
                sh("ip", "-n", ns[host], "link", "set", ifname, "up")
        for host, dest, via in ROUTES:
            sh("ip", "-n", ns[host], "route", "add", dest, "via", via)
        in_ns(ns["R1"], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")    # R1 forwards already, R2 not:
        in_ns(ns["R2"], "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")    # both must come back as found

        # the facility's names for the test addresses, as its /etc/hosts or DNS gives them (GridFTP's
        # server looks up its own address at start); `ip netns exec` puts these over /etc/hosts
        names = "".join(f"{a.split('/')[0]} {h.lower()}-{i}\n" for h, (_, ifs) in HOSTS.items() for i, a in ifs)
        for host in HOSTS:
            etc = Path("/etc/netns") / ns[host]
            etc.mkdir(parents=True, exist_ok=True)
            self.etc_dirs.append(etc)
            (etc / "hosts").write_text("127.0.0.1 localhost\n" + names)
        tmp = self.tmp
        make_keys(tmp)
        (tmp / "known_hosts").write_text("".join(known_hosts_line(tmp, m) for m, _ in HOSTS.values()))
        self.made_privsep = ensure_privsep()
        for host, (mgmt, _) in HOSTS.items():
            self.sshds[host] = start_sshd(tmp, ns[host], host, mgmt)
        self.inventory = tmp / "hlab.toml"
        self.inventory.write_text(inventory_toml(tmp))

    def config(self, where: Path, profile: str = PROFILE) -> Path:
        (where / "profiles").mkdir(parents=True)
        (where / "profiles" / "hl.toml").write_text(profile)
        config = where / "config.toml"
        config.write_text(f'[lab]\nbackend = "ssh"\ninventory = "{self.inventory}"\n[store]\ndir = "runs"\n'
                          '[run]\nprofiles = ["hl"]\n[report]\nformats = ["html"]\n'
                          '[verify]\nattempts = 6\nretry_pause_s = 8\n')
        return config

    def argv(self, config: Path) -> list[str]:
        return ["ip", "netns", "exec", self.controller, sys.executable, "-m", "longhaul.appliance.cli",
                "run", "--config", str(config)]

    def assert_as_found(self, before: dict) -> None:
        """sysctls, root qdiscs and delay-line rules as before; no processes of the run anywhere."""
        state = host_state(self.ns)
        assert state == before, {k: {"before": before.get(k), "now": state.get(k)}
                                 for k in before.keys() | state.keys() if before.get(k) != state.get(k)}
        wait_until(lambda: not any(host_leftovers(self.ns[h], self.sshds[h]) for h in HOSTS)
                   and not host_leftovers(self.controller, None), 10, interval=0.2,
                   what="the run's processes to end")

    def close(self) -> None:
        for proc in self.sshds.values():
            stop_sshd(proc)
        for name in self.created:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        for etc in self.etc_dirs:
            shutil.rmtree(etc, ignore_errors=True)
        if self.made_privsep:
            try:
                os.rmdir("/run/sshd")
            except OSError:
                pass
