"""A lab inventory to netboot, and `longhaul netboot serve` started in a namespace: what the
netboot system tests share (tests/system/test_netboot_dhcp.py, test_netboot_proxy.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from longhaul.hardware.executors.process import wait_until
from longhaul.hardware.netboot import service

S1_MAC, D1_MAC, STRANGER = "52:54:00:aa:00:11", "52:54:00:aa:00:21", "52:54:00:aa:00:99"
SERVER = "10.231.1.1"
PORT = 8067


def sh(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=timeout)


def cli(*args: str, ns: str | None = None, **kw):
    argv = [sys.executable, "-m", "longhaul.appliance.cli", *args]
    return ["ip", "netns", "exec", ns, *argv] if ns else argv


INVENTORY = """
[inventory]
name = "nbtest"
ssh_key = "controller_ed25519"
known_hosts = "known_hosts"

[[hosts]]
name = "S1"
role = "sender"
management = "10.231.1.11"
mac = "{s1}"
[[hosts.interfaces]]
name = "eth1"
address = "10.221.1.2/24"
rate_mbps = 1000
mac = "52:54:00:aa:01:11"

[[hosts]]
name = "D1"
role = "receiver"
management = "10.231.1.21"
mac = "{d1}"
[[hosts.interfaces]]
name = "eth1"
address = "10.222.1.2/24"
rate_mbps = 1000

[[hosts]]
name = "R1"
role = "router"
management = "10.231.1.31"
[[hosts.interfaces]]
name = "s1"
address = "10.221.1.1/24"
rate_mbps = 1000
[[hosts.interfaces]]
name = "wan"
address = "10.220.0.1/30"
rate_mbps = 1000
link = "bottleneck"

[[hosts]]
name = "R2"
role = "router"
management = "10.231.1.32"
[[hosts.interfaces]]
name = "d1"
address = "10.222.1.1/24"
rate_mbps = 1000
[[hosts.interfaces]]
name = "wan"
address = "10.220.0.2/30"
rate_mbps = 1000
link = "bottleneck"

[bottleneck]
r1 = "R1"
r2 = "R2"

[[pairs]]
sender = "S1"
receiver = "D1"
"""


def serve(ns: str, inventory: Path, interface: str, image: Path, *extra: str) -> subprocess.Popen:
    """`longhaul netboot serve` in namespace ns, once its state file says it serves."""
    proc = subprocess.Popen(cli("netboot", "serve", "--inventory", str(inventory), "--interface", interface,
                                "--image", str(image), *extra, ns=ns),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    state = service.state_path(interface)
    wait_until(lambda: state.exists() or proc.poll() is not None, timeout=30, interval=0.1, what="netboot serve's state")
    assert proc.poll() is None, proc.communicate()
    return proc


def stop(proc: subprocess.Popen, interface: str) -> tuple[subprocess.CompletedProcess, str, str]:
    """`longhaul netboot stop` for the server proc, then its output (it is killed if it outlived the stop)."""
    stopped = sh(*cli("netboot", "stop", "--interface", interface), check=False)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    return stopped, out, err
