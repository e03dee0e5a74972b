"""The qemu lab as data: `fleet_plan` gives the VMs (S1..Sn, R1, R2, D1..Dn, and G1 with a
generator), their NICs and bridges, the seed each one boots with (appliance/image/firstboot.py
reads it), the inventory that describes them, and the namespace that joins them; nothing here
starts anything (hardware/backends/qemu/fleet.py realises it).

Every sender has a second NIC on its access segment for DPDK (`dpdk = true` in the inventory) at
a fixed PCI address, left without an address by first boot, so a DPDK flow can bind it, send from
it and give it back.
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from longhaul.hardware.backends.qemu import generator as qemu_generator
from longhaul.hardware.topology import GENERATOR

DPDK_PCI = "0000:00:10.0"      # the senders' DPDK NIC: a slot clear of the machine's own devices
MGMT_PREFIX = "10.213"          # 10.213.<k>.0/24; <k> picked per fleet so two fleets can coexist
WAN_NET = "10.220.0.0/30"


@dataclass(frozen=True)
class Nic:
    bridge: str            # the fleet namespace's bridge this NIC's TAP joins
    tap: str
    mac: str
    name: str              # the interface name inside the VM (the seed renames to it)
    address: str | None = None
    bottleneck: bool = False
    pci: str | None = None      # a DPDK port: at this fixed PCI address, no address in the VM


@dataclass(frozen=True)
class Vm:
    name: str
    role: str
    mgmt: str                                   # management address (no prefix)
    nics: tuple[Nic, ...]
    routes: tuple[tuple[str, str], ...] = ()    # (to, via) on the test network


@dataclass(frozen=True)
class FleetPlan:
    ns: str
    index: int
    bridges: tuple[str, ...]
    vms: tuple[Vm, ...]
    controller_ip: str
    veth: tuple[str, str]                       # (this machine's end, the namespace's end)

    def vm(self, name: str) -> Vm:
        return next(v for v in self.vms if v.name == name)


def _mac(index: int, vm: int, nic: int) -> str:
    return f"52:54:{index:02x}:{vm:02x}:{nic:02x}:01"


def fleet_plan(tag: str, index: int, pairs: int, ns: str | None = None, generator: bool = False) -> FleetPlan:
    """S<i> -- R1 -- R2 -- D<i>: one /24 per access link, a /30 between the routers, and a
    management NIC (eth0) on every VM; with `generator`, G1 on a segment of its own into R1
    (hardware/backends/qemu/generator.py). tag names the TAPs (short: IFNAMSIZ) and, unless ns is
    given, the namespace."""
    if not 1 <= pairs <= 8:
        raise ValueError(f"pairs = {pairs}: the qemu lab builds 1 to 8 pairs")
    if not 1 <= index <= 254:
        raise ValueError(f"index = {index}: 1..254")
    mgmt = f"{MGMT_PREFIX}.{index}"
    wan = ipaddress.ip_network(WAN_NET)
    r1_wan, r2_wan = (f"{h}/{wan.prefixlen}" for h in list(wan.hosts())[:2])
    bridges = ["mgmt", "wan"]
    vms: list[Vm] = []
    counter = iter(range(1, 64))

    def mgmt_nic(n: int, vm_no: int) -> Nic:
        return Nic("mgmt", f"{tag}m{vm_no}", _mac(index, vm_no, 0), "eth0", f"{mgmt}.{n}/24")

    r1_nics: list[Nic] = []
    r2_nics: list[Nic] = []
    r1_no, r2_no = next(counter), next(counter)
    for i in range(1, pairs + 1):
        s_net, d_net = f"10.221.{i}", f"10.222.{i}"
        bridges += [f"s{i}", f"d{i}"]
        s_no, d_no = next(counter), next(counter)
        vms.append(Vm(f"S{i}", "sender", f"{mgmt}.{10 + i}",
                      (mgmt_nic(10 + i, s_no), Nic(f"s{i}", f"{tag}t{s_no}", _mac(index, s_no, 1), "eth1", f"{s_net}.2/24"),
                       Nic(f"s{i}", f"{tag}p{s_no}", _mac(index, s_no, 2), "dpdk0", f"{s_net}.3/24", pci=DPDK_PCI)),
                      routes=(("10.222.0.0/16", f"{s_net}.1"),)))
        vms.append(Vm(f"D{i}", "receiver", f"{mgmt}.{20 + i}",
                      (mgmt_nic(20 + i, d_no), Nic(f"d{i}", f"{tag}t{d_no}", _mac(index, d_no, 1), "eth1", f"{d_net}.2/24")),
                      routes=(("10.221.0.0/16", f"{d_net}.1"),)))
        r1_nics.append(Nic(f"s{i}", f"{tag}t{r1_no}{i}", _mac(index, r1_no, 1 + i), f"s{i}", f"{s_net}.1/24"))
        r2_nics.append(Nic(f"d{i}", f"{tag}t{r2_no}{i}", _mac(index, r2_no, 1 + i), f"d{i}", f"{d_net}.1/24"))
    r2_routes = [("10.221.0.0/16", r1_wan.split("/")[0])]
    if generator:           # G1's TRex port: no address in G1's kernel (DPDK's), R1 its next hop
        bridges.append(qemu_generator.BRIDGE)
        g_no, net = next(counter), qemu_generator.GEN_NET
        vms.append(Vm(GENERATOR, "generator", f"{mgmt}.41",
                      (mgmt_nic(41, g_no), Nic(qemu_generator.BRIDGE, f"{tag}p{g_no}", _mac(index, g_no, 1), "trex0",
                                               f"{net}.2/24", pci=DPDK_PCI))))
        r1_nics.append(Nic(qemu_generator.BRIDGE, f"{tag}g{r1_no}", _mac(index, r1_no, 0x20), "g1", f"{net}.1/24"))
        r2_routes.append((f"{net}.0/24", r1_wan.split("/")[0]))
    r1 = Vm("R1", "router", f"{mgmt}.31",
            (mgmt_nic(31, r1_no), Nic("wan", f"{tag}w1", _mac(index, r1_no, 1), "wan", r1_wan, True), *r1_nics),
            routes=(("10.222.0.0/16", r2_wan.split("/")[0]),))
    r2 = Vm("R2", "router", f"{mgmt}.32",
            (mgmt_nic(32, r2_no), Nic("wan", f"{tag}w2", _mac(index, r2_no, 1), "wan", r2_wan, True), *r2_nics),
            routes=tuple(r2_routes))
    ordered = ([v for v in vms if v.role in ("sender", "generator")] + [r1, r2]
               + [v for v in vms if v.role == "receiver"])
    return FleetPlan(ns=ns or f"{tag}-ns", index=index, bridges=tuple(bridges), vms=tuple(ordered),
                     controller_ip=f"{mgmt}.1", veth=(f"{tag}c", f"{tag}cp"))


def seed(vm: Vm, authorized_key: str, host_key_file: str) -> dict:
    """The firstboot.toml of one VM (appliance/image/firstboot.py's format)."""
    return {"name": vm.name, "role": vm.role, "authorized_keys": [authorized_key], "host_key": host_key_file,
            # a DPDK port is named but gets no address: its kernel interface must be idle to be bound
            "interfaces": [{"mac": n.mac, "name": n.name, "address": None if n.pci else n.address} for n in vm.nics],
            "routes": [{"to": to, "via": via} for to, via in vm.routes]}


def inventory_toml(plan: FleetPlan, key: Path, known_hosts: Path, kernel_note: str = "",
                   trex_path: str | None = None) -> str:
    """The inventory the ssh backend runs against: the same format a facility writes. trex_path:
    the generator's release tree (G1 mounts this machine's at the same path)."""
    lines = ["[inventory]", f'name = "{plan.ns}"',
             f'description = "qemu lab: the appliance image as VMs{(" (" + kernel_note + ")") if kernel_note else ""}"',
             'ssh_user = "root"', f'ssh_key = "{key}"', f'known_hosts = "{known_hosts}"',
             "trust_on_first_use = false", 'longhaul_root = "/opt/longhaul"', ""]
    for vm in plan.vms:
        lines += ["[[hosts]]", f'name = "{vm.name}"', f'role = "{vm.role}"', 'os = "linux"',
                  f'management = "{vm.mgmt}"', f'mac = "{vm.nics[0].mac}"']
        if vm.role == "generator":
            lines.append(f'trex_path = "{trex_path}"')
        for nic in vm.nics[1:]:
            lines += ["[[hosts.interfaces]]", f'name = "{nic.name}"', f'address = "{nic.address}"',
                      "rate_mbps = 1000", f'mac = "{nic.mac}"']
            if nic.bottleneck:
                lines.append('link = "bottleneck"')
            if nic.pci:         # a sender's DPDK port for testpmd, or the generator's TRex port
                lines += [f'pci = "{nic.pci}"'] + (["dpdk = true"] if vm.role == "sender" else [])
        lines.append("")
    lines += ["[bottleneck]", 'r1 = "R1"', 'r2 = "R2"', ""]
    for vm in plan.vms:
        if vm.role == "sender":
            lines += ["[[pairs]]", f'sender = "{vm.name}"', f'receiver = "D{vm.name[1:]}"', ""]
    return "\n".join(lines)


def free_index(pid: int, addresses_json: str) -> int:
    """A management /24 (10.213.<k>) that no address of this machine is on, starting from the pid
    so that concurrent runs spread out. addresses_json: `ip -j -4 addr` of this machine."""
    used = {int(a["local"].split(".")[2]) for link in json.loads(addresses_json or "[]")
            for a in link.get("addr_info", []) if a.get("local", "").startswith(MGMT_PREFIX + ".")}
    for step in range(254):
        k = (pid + step) % 254 + 1
        if k not in used:
            return k
    raise RuntimeError(f"every {MGMT_PREFIX}.<k>.0/24 is in use on this machine")


def namespace_plan(plan: FleetPlan) -> list[list[str]]:
    """ip argv lists (run on this machine) that make the namespace, bridges, TAPs and the veth."""
    ns = plan.ns
    argv = [["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "set", "lo", "up"]]
    for br in plan.bridges:
        argv += [["ip", "-n", ns, "link", "add", br, "type", "bridge"], ["ip", "-n", ns, "link", "set", br, "up"]]
    for vm in plan.vms:
        for nic in vm.nics:
            argv += [["ip", "-n", ns, "tuntap", "add", "dev", nic.tap, "mode", "tap"],
                     ["ip", "-n", ns, "link", "set", nic.tap, "master", nic.bridge],
                     ["ip", "-n", ns, "link", "set", nic.tap, "up"]]
    outer, inner = plan.veth
    argv += [["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns],
             ["ip", "-n", ns, "link", "set", inner, "master", "mgmt"], ["ip", "-n", ns, "link", "set", inner, "up"],
             ["ip", "addr", "add", f"{plan.controller_ip}/24", "dev", outer], ["ip", "link", "set", outer, "up"]]
    return argv
