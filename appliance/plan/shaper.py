"""The replay's class shaper: an htb on the sender's egress interface with an OD, a BE and an
"other" class, transfers classified by their server's port range (u32). The leg agent on the sender
(drivers/agents/replay_leg.py) moves BE's cap at run time and reads the class counters, the
replay's per-second measure of what each class sent (drivers/agents/htb_caps.py).

Where: S1's test interface, the one place the replay can change at run time on every backend
(the routers' bottleneck shaping belongs to the lab, and on the ssh backend to a facility). What
is there already decides how the htb goes in:
- the kernel's default root qdisc (ssh and qemu hosts): the htb becomes the root; undo deletes it
  and the kernel puts its default back;
- a tbf (the netns lab's access link, hardware/routers/linux_tc.py access_plan): the htb becomes
  the tbf's child in place of its byte FIFO, so the access link keeps its rate; undo grafts a FIFO
  of the same limit back (deleting the child would leave tbf a black hole, the kernel's noop);
- anything else is someone's configuration: refused, nothing changed.

Pure parts (argv builders, parsers) are tested without a lab; `install` applies them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from longhaul.drivers.agents.htb_caps import (
    BE_CLASS,
    HANDLE,
    OD_CLASS,
    OTHER_CLASS,
    QUANTUM,
    ROOT_CLASS,
    burst_args,
    cap_argv,
    rate_arg,
)
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.routers.linux_tc import DEFAULT_QDISCS

LEAF_PACKETS = 10_000              # TCP small queues push back long before this


class ShaperError(RuntimeError):
    """The sender's interface has a qdisc the replay must not replace."""


@dataclass(frozen=True)
class PortRange:
    """size consecutive ports from base, a power of two aligned to it: one u32 mask matches all."""

    base: int
    size: int

    def __post_init__(self):
        if self.size < 1 or self.size & (self.size - 1) or self.base % self.size or not 0 < self.base < 65536 - self.size:
            raise ValueError(f"port range {self.base}+{self.size}: size a power of two, base a multiple of it")

    @property
    def ports(self) -> list[int]:
        return list(range(self.base, self.base + self.size))

    @property
    def mask(self) -> str:
        return f"0x{0xFFFF & ~(self.size - 1):04x}"


def port_ranges(od_servers: int, be_servers: int, base: int = 20_000) -> tuple[PortRange, PortRange]:
    """Two disjoint aligned ranges with room for the given numbers of servers."""
    od_size, be_size = _pow2(od_servers), _pow2(be_servers)
    od = PortRange(_align(base, od_size), od_size)
    be = PortRange(_align(od.base + od.size, be_size), be_size)
    return od, be


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _align(value: int, size: int) -> int:
    return -(-value // size) * size


@dataclass(frozen=True)
class Attach:
    """Where the htb goes on the interface and how the interface is put back."""

    parent: list[str]                 # tc's "root" or "parent X:1"
    undo: list[list[str]]


def attach_point(ifname: str, qdiscs: list[dict]) -> Attach:
    """From `tc -j qdisc show dev IF invisible`: the root qdisc decides (see the module's doc)."""
    root = next((q for q in qdiscs if q.get("root")), {})
    kind, handle = root.get("kind"), root.get("handle")
    if kind is None or (handle in (None, "0:") and kind in DEFAULT_QDISCS):
        return Attach(["root"], [["tc", "qdisc", "del", "dev", ifname, "root"]])
    if kind == "tbf":
        parent = f"{handle.rstrip(':')}:1"
        limit = _tbf_limit(root, qdiscs, parent)
        return Attach(["parent", parent], [["tc", "qdisc", "replace", "dev", ifname, "parent", parent,
                                            "bfifo", "limit", str(limit)]])
    raise ShaperError(f"{ifname} has root qdisc {kind} handle {handle}: the replay's class caps need the kernel's "
                      "default or a tbf there; remove it first or replay on a lab whose sender's interface is free")


def _tbf_limit(root: dict, qdiscs: list[dict], parent: str) -> int:
    """The tbf's queue: its (invisible) child FIFO's limit, else from the tbf's own numbers."""
    child = next((q for q in qdiscs if q.get("parent") == parent and q.get("kind") in ("bfifo", "pfifo")), None)
    if child and "limit" in child.get("options", {}):
        limit = int(child["options"]["limit"])
        return limit if child["kind"] == "bfifo" else limit * 1514
    options = root.get("options", {})
    if "limit" in options:
        return int(options["limit"])
    # tc prints latency instead: limit = rate x latency + burst
    return int(float(options.get("rate", 0)) * float(options.get("lat", 0)) / 1e6 + int(options.get("burst", 0)))


def install_plan(ifname: str, attach: Attach, root_bps: float, od: PortRange, be: PortRange, mtu: int,
                 be_cap_bps: float | None) -> list[list[str]]:
    """The htb, its classes, their FIFOs and the port filters; unclassified traffic (ARP, ssh,
    probes) goes to "other", so the OD counter counts OD transfers only."""
    dev = ["dev", ifname]
    # under a tbf: in place of its FIFO, which after an earlier replay's undo is no longer the
    # kernel's own (handle 0:), and only "replace" grafts over a qdisc someone added
    verb = "add" if attach.parent == ["root"] else "replace"
    plan = [["tc", "qdisc", verb, *dev, *attach.parent, "handle", f"{HANDLE}:", "htb", "default", "30"],
            ["tc", "class", "add", *dev, "parent", f"{HANDLE}:", "classid", ROOT_CLASS, "htb",
             "rate", rate_arg(root_bps), "ceil", rate_arg(root_bps), "quantum", str(QUANTUM), *burst_args(root_bps, mtu)]]
    for classid, prio in ((OD_CLASS, "0"), (OTHER_CLASS, "1")):
        plan.append(["tc", "class", "add", *dev, "parent", ROOT_CLASS, "classid", classid, "htb",
                     "rate", rate_arg(root_bps), "ceil", rate_arg(root_bps), "prio", prio, "quantum", str(QUANTUM),
                     *burst_args(root_bps, mtu)])
    plan.append(cap_argv(ifname, be_cap_bps, root_bps, mtu, verb="add"))
    for classid in (OD_CLASS, BE_CLASS, OTHER_CLASS):
        minor = classid.split(":")[1]
        plan.append(["tc", "qdisc", "add", *dev, "parent", classid, "handle", f"{HANDLE}{minor}:", "pfifo",
                     "limit", str(LEAF_PACKETS)])
    for ports, classid in ((od, OD_CLASS), (be, BE_CLASS)):
        plan.append(["tc", "filter", "add", *dev, "parent", f"{HANDLE}:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "dport", str(ports.base), ports.mask, "flowid", classid])
    return plan


def install(executor, ifname: str, root_bps: float, mtu: int, od: PortRange, be: PortRange,
            cleanup: CleanupStack) -> None:
    """The htb on one interface of one host, BE uncapped, its undo on the cleanup stack."""
    shown = executor.run(["tc", "-j", "qdisc", "show", "dev", ifname, "invisible"]).stdout
    attach = attach_point(ifname, json.loads(shown or "[]"))
    cleanup.push(f"remove the replay's htb on {executor.name} {ifname}",
                 lambda: [executor.run(argv, check=False) for argv in attach.undo])
    for argv in install_plan(ifname, attach, root_bps, od, be, mtu, None):
        executor.run(argv)
