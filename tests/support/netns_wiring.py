"""Small namespace labs for tool tests: two hosts on one veth, or two hosts through a router.

Interfaces: a0 (host a), b0 (host b), and on the router r0 (towards a) and r1 (towards b), so a
shaper on r1 acts on the a -> b direction. Callers delete the namespaces in their own `finally`.
"""
from __future__ import annotations

import subprocess


def sh(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=True)


def _hosts(*namespaces: str) -> None:
    for ns in namespaces:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def _address(ns: str, dev: str, addr: str) -> None:
    sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
    sh("ip", "-n", ns, "link", "set", dev, "up")


def veth_pair(ns_a: str, ns_b: str, a_ip: str, b_ip: str, a_if: str = "a0", b_if: str = "b0") -> None:
    """a -- b on one /24."""
    _hosts(ns_a, ns_b)
    sh("ip", "-n", ns_a, "link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", ns_b)
    _address(ns_a, a_if, a_ip)
    _address(ns_b, b_if, b_ip)


def routed(ns_a: str, ns_r: str, ns_b: str, a_ip: str, r_a_ip: str, r_b_ip: str, b_ip: str) -> None:
    """a -- r -- b on two /24s, r forwarding, default routes via r."""
    _hosts(ns_a, ns_r, ns_b)
    sh("ip", "-n", ns_a, "link", "add", "a0", "type", "veth", "peer", "name", "r0", "netns", ns_r)
    sh("ip", "-n", ns_b, "link", "add", "b0", "type", "veth", "peer", "name", "r1", "netns", ns_r)
    for ns, dev, addr in ((ns_a, "a0", a_ip), (ns_r, "r0", r_a_ip), (ns_r, "r1", r_b_ip), (ns_b, "b0", b_ip)):
        _address(ns, dev, addr)
    sh("ip", "-n", ns_a, "route", "add", "default", "via", r_a_ip)
    sh("ip", "-n", ns_b, "route", "add", "default", "via", r_b_ip)
    sh("ip", "netns", "exec", ns_r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
