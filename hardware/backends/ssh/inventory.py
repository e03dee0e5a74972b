"""The inventory of a real lab: which machines play S1..Sn, D1..Dn, R1, R2, how to reach them.

An inventory is a TOML file (`hardware/<name>.toml`, named from config.toml; see
example-inventory.toml beside this file for every key with a comment). It is validated like every
other config: a pydantic model per table, unknown keys rejected, and every problem reported as
`file:line: key = value: what is allowed` (appliance.validation), including the checks that span
several entries (a pair naming an unknown host, a duplicate address, a router that is not a router).

Hosts are reached over SSH with keys only; `known_hosts` is the file their host keys are checked
against (strictly unless `trust_on_first_use = true`). Relative paths are relative to the
inventory file, so an inventory directory can be moved as a whole.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from longhaul.core.errors import ConfigError
from longhaul.core.model import NAME, Strict
from longhaul.core.paths import REPO
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.routers.registry import ROUTERS

ROLES = ("sender", "receiver", "router", "generator", "controller")
# lspci/sysfs form domain:bus:device.function, as DPDK's dpdk-devbind and EAL -a expect it
PCI = r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
_USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
MAC = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"


class Interface(Strict):
    """A test interface: carries experiment traffic, never the management SSH session."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,15}$")      # IFNAMSIZ - 1 on Linux
    address: str                                               # CIDR, e.g. 10.1.1.2/24
    rate_mbps: float = Field(gt=0, le=1_000_000)               # the link's line rate
    link: Literal["access", "bottleneck"] = "access"           # bottleneck: a router's WAN side
    mtu: int = Field(1500, ge=576, le=9216)
    pci: str | None = None                                     # for DPDK (TRex, generators)
    # a sender's DPDK port: bound to vfio-pci/uio_pci_generic for a DPDK flow's burst and given
    # back after; on the sender's access segment (frames go to the same router), its address is
    # the frames' source and must not be configured on the kernel interface
    dpdk: bool = False
    # the NIC's MAC: a netbooted host (hardware/netboot) names and addresses it by it; without
    # one, the interface must already have this name when the host boots
    mac: str | None = Field(None, pattern=MAC)

    @field_validator("address")
    @classmethod
    def _cidr(cls, value: str) -> str:
        if "/" not in value:
            raise ValueError("an address with its prefix length, e.g. 10.1.1.2/24")
        try:
            ipaddress.ip_interface(value)
        except ValueError:
            raise ValueError("an IPv4 or IPv6 address with prefix length, e.g. 10.1.1.2/24") from None
        return value

    @field_validator("pci")
    @classmethod
    def _pci(cls, value: str | None) -> str | None:
        if value is not None and not re.match(PCI, value):
            raise ValueError("a PCI address domain:bus:device.function as lspci -D shows it, e.g. 0000:3b:00.0")
        return value

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)


class Host(Strict):
    name: str = Field(pattern=NAME)
    role: Literal["sender", "receiver", "router", "generator", "controller"]
    os: str = "linux"                          # a host OS module: hardware/routers/registry.py
    management: str                            # what SSH connects to: an address or a DNS name
    # the management NIC's MAC: `longhaul netboot` answers this host's PXE requests by it and
    # gives it `management` (an address, then) as its lease
    mac: str | None = Field(None, pattern=MAC)
    ssh_user: str | None = Field(None, pattern=_USER)    # default: [inventory] ssh_user
    ssh_key: str | None = None                           # default: [inventory] ssh_key
    ssh_port: int = Field(22, ge=1, le=65535)
    interfaces: list[Interface] = []
    # a generator's TRex release tree (t-rex-64, automation/trex_control_plane/interactive); its
    # interfaces with a pci are TRex's ports 0, 1, ... in this order, as in its trex_cfg.yaml
    trex_path: str | None = Field(None, pattern=r"^/[^\s\"]*$")
    description: str = ""

    @field_validator("os")
    @classmethod
    def _known_os(cls, value: str) -> str:
        if value not in ROUTERS:         # read at validation: a new OS module is one registry entry
            raise ValueError(" or ".join(repr(name) for name in ROUTERS))
        return value

    @field_validator("management")
    @classmethod
    def _reachable_name(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            pass
        if not _HOSTNAME.match(value):
            raise ValueError("an IP address or a DNS name (no user@, no port: use ssh_user, ssh_port)")
        return value



class Pair(Strict):
    """Profile pair i (S_i -> D_i) is the i-th [[pairs]] entry."""

    sender: str = Field(pattern=NAME)
    receiver: str = Field(pattern=NAME)


class Bottleneck(Strict):
    r1: str = Field(pattern=NAME)              # the senders' router: its WAN egress is S -> D
    r2: str = Field(pattern=NAME)              # the receivers' router


class InventorySection(Strict):
    name: str = Field(pattern=NAME)
    description: str = ""
    ssh_user: str = Field("root", pattern=_USER)
    ssh_key: str | None = None                 # private key, used for every host without its own
    known_hosts: str                           # host keys are checked against this file only
    trust_on_first_use: bool = False           # accept (and record) unknown host keys: opt-in only
    # short commands share one SSH connection per host (hardware/executors/ssh_masters.py);
    # false: a connection per command, for an sshd that refuses multiplexed sessions
    share_connections: bool = True
    # where longhaul is installed on the hosts (its .venv and build/ helpers); unset: at the same
    # path as on the controller. The appliance image has it at /opt/longhaul.
    longhaul_root: str | None = Field(None, pattern=r"^/[^\s\"]*$")


class Inventory(Strict):
    inventory: InventorySection
    hosts: list[Host] = Field(min_length=1)
    pairs: list[Pair] = []
    bottleneck: Bottleneck | None = None

    # -- lookups -------------------------------------------------------------------------------

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def by_role(self, role: str) -> list[Host]:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        return [h for h in self.hosts if h.role == role]

    def generator(self) -> Host | None:
        """The traffic generator (TRex) the run's generator flows send from, if there is one."""
        found = self.by_role("generator")
        return found[0] if found else None

    def pair_hosts(self) -> list[tuple[Host, Host]]:
        """(sender, receiver) per profile pair, pair 1 first."""
        return [(self.host(p.sender), self.host(p.receiver)) for p in self.pairs]

    def routers(self) -> tuple[Host, Host]:
        if self.bottleneck is None:
            raise KeyError("this inventory has no [bottleneck] routers")
        return self.host(self.bottleneck.r1), self.host(self.bottleneck.r2)

    def ssh_user(self, host: Host) -> str:
        return host.ssh_user or self.inventory.ssh_user

    def ssh_key(self, host: Host) -> str | None:
        return host.ssh_key or self.inventory.ssh_key

    def executor(self, name: str, procs, via=None):
        """An SshExecutor for one host (the controller's own commands run locally instead)."""
        host = self.host(name)
        key = self.ssh_key(host)
        if key is None:
            raise KeyError(f"{name} has no ssh_key")
        return SshExecutor(name, procs, host=host.management, user=self.ssh_user(host), key=key,
                           known_hosts=self.inventory.known_hosts, port=host.ssh_port,
                           trust_on_first_use=self.inventory.trust_on_first_use, via=via,
                           path_map=self.path_map(), share=self.inventory.share_connections)

    def path_map(self) -> tuple[tuple[str, str], ...]:
        """The controller's install paths -> the hosts' (longhaul_root), for the SSH executor."""
        root = self.inventory.longhaul_root
        here = REPO
        if root is None or Path(root) == here:
            return ()
        root = root.rstrip("/")
        return tuple((f"{here}/{sub}/", f"{root}/{sub}/") for sub in (".venv", "build"))

    # -- checks that span entries: (key path, value, what is allowed) ---------------------------

    def cross_field_problems(self) -> list[tuple[tuple, object, str]]:
        problems: list[tuple[tuple, object, str]] = []
        names: dict[str, int] = {}
        for i, host in enumerate(self.hosts):
            if host.name in names:
                problems.append((("hosts", i, "name"), host.name,
                                 f"host names must be unique (hosts[{names[host.name]}] has it)"))
            names.setdefault(host.name, i)
        roles = {h.name: h.role for h in self.hosts}

        def must_be(loc, name, role):
            if name not in roles:
                problems.append((loc, name, f"a host of this inventory ({', '.join(roles)})"))
            elif roles[name] != role:
                problems.append((loc, name, f"a host with role = '{role}' ({name} is a {roles[name]})"))

        used: dict[str, tuple] = {}
        for i, pair in enumerate(self.pairs):
            for side, role in (("sender", "sender"), ("receiver", "receiver")):
                name = getattr(pair, side)
                must_be(("pairs", i, side), name, role)
                if name in used:
                    problems.append((("pairs", i, side), name,
                                     f"each host plays one pair ({name} is already in pairs[{used[name][1]}])"))
                used.setdefault(name, ("pairs", i))
        if self.bottleneck is not None:
            must_be(("bottleneck", "r1"), self.bottleneck.r1, "router")
            must_be(("bottleneck", "r2"), self.bottleneck.r2, "router")
            if self.bottleneck.r1 == self.bottleneck.r2:
                problems.append((("bottleneck", "r2"), self.bottleneck.r2, "a router other than r1"))
        elif self.pairs:
            problems.append((("pairs",), None, "pairs need a [bottleneck] with r1 and r2 routers"))

        for role in ("controller", "generator"):
            for i in [i for i, h in enumerate(self.hosts) if h.role == role][1:]:
                problems.append((("hosts", i, "role"), role, f"at most one {role}"))
        for i, host in enumerate(self.hosts):
            if host.role == "generator":
                if host.trex_path is None:
                    problems.append((("hosts", i, "trex_path"), None,
                                     "a generator's TRex release tree, e.g. '/opt/trex/v3.04'"))
                if not any(iface.pci for iface in host.interfaces):
                    problems.append((("hosts", i, "interfaces"), None,
                                     "a generator has at least one interface with pci (its TRex ports)"))
            elif host.trex_path is not None:
                problems.append((("hosts", i, "trex_path"), host.trex_path,
                                 f"only on a host with role = 'generator' ({host.name} is a {host.role})"))

        mgmt: dict[str, tuple] = {}
        addresses: dict[str, tuple] = {}
        pcis: dict[tuple[str, str], tuple] = {}
        for i, host in enumerate(self.hosts):
            key = (host.management.lower(), host.ssh_port)
            if key in mgmt:
                problems.append((("hosts", i, "management"), host.management,
                                 f"a management address used once (hosts[{mgmt[key][1]}] has it)"))
            mgmt.setdefault(key, ("hosts", i))
            if not ROUTERS[host.os].end_hosts and host.role != "router":
                # end hosts are tuned with Linux sysctls (hardware/tuning.py)
                hosts_ok = ", ".join(repr(n) for n, o in ROUTERS.items() if o.end_hosts)
                problems.append((("hosts", i, "os"), host.os,
                                 f"{hosts_ok}; os = '{host.os}' is supported for routers only"))
            if host.role != "controller" and self.ssh_key(host) is None:
                problems.append((("hosts", i, "ssh_key"), None,
                                 "a private key file: here or as [inventory] ssh_key (keys only, no passwords)"))
            ifnames: set[str] = set()
            for j, iface in enumerate(host.interfaces):
                loc = ("hosts", i, "interfaces", j)
                problems += _dpdk_port_problems(host, iface, loc)
                if iface.name in ifnames:
                    problems.append((loc + ("name",), iface.name, "interface names unique on a host"))
                ifnames.add(iface.name)
                if iface.ip in addresses:
                    a = addresses[iface.ip]
                    problems.append((loc + ("address",), iface.address,
                                     f"an address used once (hosts[{a[1]}].interfaces[{a[3]}] has it)"))
                addresses.setdefault(iface.ip, loc)
                if iface.pci is not None:
                    pci = (host.name, iface.pci.lower())
                    if pci in pcis:
                        problems.append((loc + ("pci",), iface.pci, "each NIC port belongs to one interface"))
                    pcis.setdefault(pci, loc)
            if host.role == "router" and host.interfaces:
                wan = [iface for iface in host.interfaces if iface.link == "bottleneck"]
                if len(wan) != 1:
                    problems.append((("hosts", i, "interfaces"), None,
                                     f"a router has exactly one interface with link = 'bottleneck' (found {len(wan)})"))
            elif host.role != "router":
                for j, iface in enumerate(host.interfaces):
                    if iface.link == "bottleneck":
                        problems.append((("hosts", i, "interfaces", j, "link"), "bottleneck",
                                         "only a router's interface is on the bottleneck"))
        return problems


def _dpdk_port_problems(host: Host, iface: Interface, loc: tuple) -> list[tuple]:
    if not iface.dpdk:
        return []
    if host.role != "sender":
        return [(loc + ("dpdk",), True, f"only on a sender ({host.name} is a {host.role}; a generator's "
                                        "pci ports are TRex's)")]
    if iface.pci is None:
        return [(loc + ("pci",), None, "a DPDK port's PCI address, e.g. 0000:3b:00.0")]
    if iface.link != "access" or next((x for x in host.interfaces if x.link == "access"), None) is iface:
        return [(loc + ("dpdk",), True, "a second access interface: the first is the sender's test "
                                        "interface, which its TCP flows and the RTT probe use")]
    return []


def _resolve(path: str, base: Path) -> str:
    expanded = Path(os.path.expanduser(path))
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


def load_inventory(path: Path) -> Inventory:
    """Read, validate and cross-check an inventory; paths in it come back absolute."""
    path = Path(path)
    source = load(path)
    inv = validate(source, Inventory)
    for loc, value, allowed in inv.cross_field_problems():
        raise ConfigError(source.path, source.line_of(loc), loc, value, allowed)
    base = path.resolve().parent
    section = inv.inventory.model_copy(update={
        "known_hosts": _resolve(inv.inventory.known_hosts, base),
        "ssh_key": _resolve(inv.inventory.ssh_key, base) if inv.inventory.ssh_key else None})
    hosts = [h.model_copy(update={"ssh_key": _resolve(h.ssh_key, base)}) if h.ssh_key else h for h in inv.hosts]
    return inv.model_copy(update={"inventory": section, "hosts": hosts})


def inventory_path(name: str, base_dir: Path) -> Path:
    """config.toml names an inventory; it lives in <base_dir>/hardware/<name>.toml."""
    if not re.match(NAME, name):
        raise ConfigError.option("inventory", name, "a name of letters, digits, - and _")
    return Path(base_dir) / "hardware" / f"{name}.toml"
