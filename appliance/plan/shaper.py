"""The replay's class shaper: an htb on the sender's egress interface with an OD, a BE and an
"other" class, transfers classified by their server's port range (u32), BE's ceil changed at run
time. Its class counters are also the replay's per-second measure of what each class sent.

Where: S1's test interface, the one place the replay can change at run time on every backend
(the routers' bottleneck shaping belongs to the lab, and on the ssh backend to a facility). What
is there already decides how the htb goes in:
- the kernel's default root qdisc (ssh and qemu hosts): the htb becomes the root; undo deletes it
  and the kernel puts its default back;
- a tbf (the netns lab's access link, hardware/routers/linux_tc.py access_plan): the htb becomes
  the tbf's child in place of its byte FIFO, so the access link keeps its rate; undo grafts a FIFO
  of the same limit back (deleting the child would leave tbf a black hole, the kernel's noop);
- anything else is someone's configuration: refused, nothing changed.

Pure parts (argv builders, parsers) are tested without a lab; `ClassShaper` applies them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.routers.linux_tc import DEFAULT_QDISCS, tbf_burst

HANDLE = "7e"                      # the htb's major; its leaves are 7e10:, 7e20:, 7e30:
OD_CLASS, BE_CLASS, OTHER_CLASS = f"{HANDLE}:10", f"{HANDLE}:20", f"{HANDLE}:30"
ROOT_CLASS = f"{HANDLE}:1"
QUANTUM = 30_000                   # DRR quantum: explicit, so no rate makes htb warn about r2q
LEAF_PACKETS = 10_000              # TCP small queues push back long before this
MIN_RATE_BPS = 100_000             # htb needs a positive rate: a "zero" cap is this


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


def _rate(bps: float) -> str:
    return f"{max(bps, MIN_RATE_BPS):.0f}bit"


def _bursts(bps: float, mtu: int) -> list[str]:
    burst = str(tbf_burst(max(bps, MIN_RATE_BPS) / 1e6, mtu))
    return ["burst", burst, "cburst", burst]


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
             "rate", _rate(root_bps), "ceil", _rate(root_bps), "quantum", str(QUANTUM), *_bursts(root_bps, mtu)]]
    for classid, prio in ((OD_CLASS, "0"), (OTHER_CLASS, "1")):
        plan.append(["tc", "class", "add", *dev, "parent", ROOT_CLASS, "classid", classid, "htb",
                     "rate", _rate(root_bps), "ceil", _rate(root_bps), "prio", prio, "quantum", str(QUANTUM),
                     *_bursts(root_bps, mtu)])
    plan.append(cap_argv(ifname, be_cap_bps, root_bps, mtu, verb="add"))
    for classid in (OD_CLASS, BE_CLASS, OTHER_CLASS):
        minor = classid.split(":")[1]
        plan.append(["tc", "qdisc", "add", *dev, "parent", classid, "handle", f"{HANDLE}{minor}:", "pfifo",
                     "limit", str(LEAF_PACKETS)])
    for ports, classid in ((od, OD_CLASS), (be, BE_CLASS)):
        plan.append(["tc", "filter", "add", *dev, "parent", f"{HANDLE}:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "dport", str(ports.base), ports.mask, "flowid", classid])
    return plan


def cap_argv(ifname: str, be_cap_bps: float | None, root_bps: float, mtu: int, verb: str = "change") -> list[str]:
    """BE's class at its cap (rate = ceil: it never borrows beyond it); None: uncapped."""
    cap = root_bps if be_cap_bps is None else min(be_cap_bps, root_bps)
    return ["tc", "class", verb, "dev", ifname, "parent", ROOT_CLASS, "classid", BE_CLASS, "htb",
            "rate", _rate(cap), "ceil", _rate(cap), "prio", "1", "quantum", str(QUANTUM), *_bursts(cap, mtu)]


_CLASS_LINE = re.compile(r"^class \S+ (\S+)")
_SENT_LINE = re.compile(r"^\s*Sent (\d+) bytes")


def class_bytes(text: str) -> dict[str, int]:
    """classid -> bytes sent, from `tc -s class show dev IF`: iproute2 6.1 prints classes as text
    even with -j, so the text is read (a JSON list, from a tc that has it, is read too)."""
    if text.lstrip().startswith("["):
        return {item["handle"]: int(item.get("stats", item).get("bytes", 0))
                for item in json.loads(text) if "handle" in item}
    out, current = {}, None
    for line in text.splitlines():
        if match := _CLASS_LINE.match(line):
            current = match.group(1)
        elif (match := _SENT_LINE.match(line)) and current is not None:
            out[current] = int(match.group(1))
            current = None
    return out


class ClassShaper:
    """The htb on one interface of one host: install (undo on the cleanup stack), cap, read."""

    def __init__(self, executor, ifname: str, root_bps: float, mtu: int, od: PortRange, be: PortRange,
                 min_step_bps: float = 0.0):
        """min_step_bps: a cap that moved less than this is left alone (a tc call saved)."""
        self.executor, self.ifname, self.root_bps, self.mtu = executor, ifname, root_bps, mtu
        self.od, self.be = od, be
        self.min_step_bps = min_step_bps
        self.cap_bps: float | None = None
        self.changes = 0

    def install(self, cleanup: CleanupStack, be_cap_bps: float | None = None) -> None:
        shown = self.executor.run(["tc", "-j", "qdisc", "show", "dev", self.ifname, "invisible"]).stdout
        attach = attach_point(self.ifname, json.loads(shown or "[]"))
        cleanup.push(f"remove the replay's htb on {self.executor.name} {self.ifname}",
                     lambda: [self.executor.run(argv, check=False) for argv in attach.undo])
        for argv in install_plan(self.ifname, attach, self.root_bps, self.od, self.be, self.mtu, be_cap_bps):
            self.executor.run(argv)
        self.cap_bps = be_cap_bps

    def set_be_cap(self, be_cap_bps: float | None) -> bool:
        """Change BE's cap if it moved by min_step_bps or more; True if it was changed."""
        old, new = self.cap_bps, be_cap_bps
        if (old is None and new is None) or (old is not None and new is not None
                                             and abs(old - new) < self.min_step_bps):
            return False
        self.executor.run(cap_argv(self.ifname, new, self.root_bps, self.mtu))
        self.cap_bps = new
        self.changes += 1
        return True

    def counters(self) -> dict[str, int]:
        return class_bytes(self.executor.run(["tc", "-s", "class", "show", "dev", self.ifname]).stdout)
