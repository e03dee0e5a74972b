"""What `longhaul netboot` serves, as data: each inventory host's boot by MAC, its seed, dnsmasq's argv.

Pure: an inventory (hardware/backends/ssh/inventory.py) and the served interface's network in,
records and argv lists out; hardware/netboot/server.py realises them. The boot chain:

1. DHCP (dnsmasq, answering on one interface, only to the inventory's MACs): a host's PXE ROM
   gets iPXE from TFTP (undionly.kpxe under BIOS, ipxe.efi under UEFI), iPXE itself (a qemu NIC's
   ROM, or the chainloaded one) gets `boot.ipxe` over HTTP;
2. boot.ipxe chains to the host's own script, by the MAC it booted from: the image's newest
   kernel and initrd with live-boot's `fetch=` of the shared root (a squashfs, read-only) and
   `longhaul.seed=`, the host's seed directory;
3. live-boot loads the squashfs into RAM under a tmpfs overlay (each host writes only its own
   RAM), and longhaul-firstboot reads the seed: name, role, addresses by MAC, routes, the
   controller's key and the host key the controller keeps for it (known_hosts stays true across
   boots of a root that forgets everything).

A host without a seat in the inventory gets no DHCP answer and no script.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from longhaul.hardware.backends.ssh.inventory import Host, Interface, Inventory
from longhaul.hardware.image_files import INITRD, SQUASHFS, VMLINUZ

TFTP_BIOS = "undionly.kpxe"                 # Debian's ipxe package: iPXE for a BIOS PXE ROM
TFTP_UEFI = "ipxe.efi"                      # ... and for a UEFI one (unsigned: no Secure Boot)
IPXE_DIR = "/usr/lib/ipxe"
# the live root's own kernel arguments; the image's disk boot has root=LABEL=... instead
APPEND = "boot=live console=tty0 console=ttyS0,115200n8 net.ifnames=0"


@dataclass(frozen=True)
class Served:
    """Where the server answers: one interface, its address and network, the HTTP port."""
    interface: str
    address: str                 # the server's IPv4 address on it
    network: str                 # its network, e.g. 10.213.7.0/24
    port: int = 8067
    proxy: bool = False          # a facility's DHCP server gives the addresses; we add the boot

    @property
    def base_url(self) -> str:
        return f"http://{self.address}:{self.port}"


@dataclass(frozen=True)
class NetbootHost:
    name: str
    role: str
    mac: str                     # lower case, colons
    address: str                 # its management address: the lease
    seed: dict = field(compare=False)

    @property
    def mac_hyphens(self) -> str:
        """iPXE's ${mac:hexhyp}, the key of the host's script."""
        return self.mac.replace(":", "-")


class NetbootError(ValueError):
    pass


def netboot_hosts(inventory: Inventory, served: Served, authorized_key: str) -> list[NetbootHost]:
    """Every host with a mac; their management addresses must be on the served network (unless a
    facility's DHCP gives them, in proxy mode)."""
    net = ipaddress.ip_network(served.network)
    out = []
    for host in inventory.hosts:
        if host.mac is None:
            continue
        try:
            address = ipaddress.ip_address(host.management)
        except ValueError:
            raise NetbootError(f"{host.name}: management = {host.management!r}: a netbooted host's "
                               "management is an address (its lease)") from None
        if not served.proxy and address not in net:
            raise NetbootError(f"{host.name}: management {address} is not on {served.interface}'s network {net}")
        if str(address) == served.address:
            raise NetbootError(f"{host.name}: management {address} is the server's own address")
        out.append(NetbootHost(host.name, host.role, host.mac.lower(), str(address),
                               host_seed(inventory, host, None if served.proxy else net.prefixlen, authorized_key)))
    if not out:
        raise NetbootError("no host of the inventory has a mac: nothing to boot")
    return out


def host_seed(inventory: Inventory, host: Host, prefix: int | None, authorized_key: str) -> dict:
    """The firstboot.toml of a netbooted host (appliance/image/firstboot.py's format): the
    inventory's wiring, which a disk-booted host keeps on its own disk."""
    mgmt: dict = {"mac": host.mac.lower()} if host.mac else {}
    if prefix is not None:
        mgmt["address"] = f"{host.management}/{prefix}"
    interfaces = [mgmt] + [_seed_interface(i) for i in host.interfaces]
    return {"name": host.name, "role": host.role, "authorized_keys": [authorized_key],
            "host_key": host_key_name(host.name), "interfaces": interfaces,
            "routes": [{"to": to, "via": via} for to, via in routes(inventory, host)]}


def host_key_name(name: str) -> str:
    return f"{name}_ed25519"


def _seed_interface(iface: Interface) -> dict:
    out: dict = {"mac": iface.mac.lower()} if iface.mac else {"match": iface.name}
    out["name"] = iface.name
    if not iface.dpdk:                   # a DPDK port stays without an address: it is bound away
        out["address"] = iface.address
    if iface.mtu != 1500:
        out["mtu"] = iface.mtu
    return out


def _net(iface: Interface):
    return ipaddress.ip_interface(iface.address).network


def routes(inventory: Inventory, host: Host) -> list[tuple[str, str]]:
    """(to, via): an end host reaches the far side's networks through its router's port on its
    own segment, a router through the other router's bottleneck address. What a facility's own
    hosts carry in their network configuration; a RAM root has none."""
    if inventory.bottleneck is None:
        return []
    r1, r2 = inventory.routers()
    senders = [s for s, _ in inventory.pair_hosts()]
    receivers = [d for _, d in inventory.pair_hosts()]

    def access_nets(hosts: list[Host]) -> list:
        return sorted({_net(i) for h in hosts for i in h.interfaces if i.link == "access" and not i.dpdk}, key=str)

    def wan(router: Host) -> Interface:
        return next(i for i in router.interfaces if i.link == "bottleneck")

    own = {_net(i) for i in host.interfaces}
    if host.name == r1.name:
        return [(str(n), wan(r2).ip) for n in access_nets(receivers) if n not in own]
    if host.name == r2.name:
        return [(str(n), wan(r1).ip) for n in access_nets(senders) if n not in own]
    router, far = (r1, receivers) if host in senders else (r2, senders) if host in receivers else (None, [])
    if router is None:
        return []
    gateways = [i for i in router.interfaces if i.link == "access" and _net(i) in own]
    if not gateways:
        return []
    return [(str(n), gateways[0].ip) for n in access_nets(far) if n not in own]


def boot_script(served: Served) -> str:
    """What every iPXE gets first: the chain to its own host's script, by the NIC it booted from."""
    return ("#!ipxe\n"
            f"chain {served.base_url}/host/${{netX/mac:hexhyp}}.ipxe || "
            "echo longhaul netboot: this MAC is not in the inventory\n")


def host_script(host: NetbootHost, served: Served, append: str = APPEND) -> str:
    """A host's kernel, initrd and command line: live-boot fetches the shared root, BOOTIF tells
    it which NIC to configure, longhaul.seed where firstboot finds the host's identity."""
    url = served.base_url
    args = (f"initrd={INITRD} {append} fetch={url}/live/{SQUASHFS} BOOTIF=01-{host.mac_hyphens} "
            f"longhaul.seed={url}/seed/{host.name}/")
    return f"#!ipxe\nkernel {url}/{VMLINUZ} {args}\ninitrd {url}/{INITRD}\nboot\n"


def dnsmasq_argv(served: Served, hosts: list[NetbootHost], tftp_root: str) -> list[str]:
    """dnsmasq on one interface, no DNS, no config file of the machine's, DHCP only to the
    inventory's MACs (known), logging every exchange to stderr (the server keeps it)."""
    net = ipaddress.ip_network(served.network)
    argv = ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--log-facility=-",
            "--log-dhcp", "--leasefile-ro", f"--interface={served.interface}", "--bind-interfaces",
            "--except-interface=lo", "--dhcp-ignore=tag:!known", "--dhcp-match=set:ipxe,175",
            "--dhcp-match=set:efi64,option:client-arch,7", "--dhcp-match=set:efi64,option:client-arch,9",
            "--enable-tftp", f"--tftp-root={tftp_root}", "--tftp-no-blocksize"]
    script = f"{served.base_url}/boot.ipxe"
    if served.proxy:
        # the facility's server leases; we answer PXE clients only with where to boot from
        # (argv, not a config file: the menu text needs no quotes; x86PC's basename gets ".0")
        argv += [f"--dhcp-range={net.network_address},proxy,{net.netmask}",
                 "--pxe-service=tag:!ipxe,x86PC,longhaul,undionly",
                 f"--pxe-service=tag:!ipxe,X86-64_EFI,longhaul,{TFTP_UEFI}",
                 f"--pxe-service=tag:ipxe,x86PC,longhaul,{script}",
                 f"--pxe-service=tag:ipxe,X86-64_EFI,longhaul,{script}"]
        argv += [f"--dhcp-host={h.mac},set:known" for h in hosts]
    else:
        argv += [f"--dhcp-range={net.network_address},static,{net.netmask},1h",
                 f"--dhcp-boot=tag:ipxe,{script}", f"--dhcp-boot=tag:!ipxe,tag:efi64,{TFTP_UEFI}",
                 f"--dhcp-boot=tag:!ipxe,tag:!efi64,{TFTP_BIOS}",
                 "--dhcp-option=option:router"]      # none: a lab host routes nothing through the controller
        argv += [f"--dhcp-host={h.mac},{h.address},{h.name}" for h in hosts]
    return argv
