"""Router shaping plans for Linux: pure functions from the bottleneck's settings to tc argv lists.

The forward direction (R1 -> R2) gets the configured rate, a byte-limited FIFO of the configured
size and half the RTT; the reverse direction gets the same rate and the other half of the RTT.
With netem the delay is a netem root qdisc with the rate limiter as its child (the arrangement
the netem documentation gives for delay plus rate); without netem the delay comes from the
userspace delay line on NFQUEUE (hardware/delayline/helper.py) and tc only limits rate and queue.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import partial

from longhaul.core.shaping import tbf_burst
from longhaul.hardware.tuning import router_sysctls, sysctl_argv
from longhaul.hardware.verdicts import (
    FAIL,
    KERNEL_SH,
    OK,
    WARN,
    OsCheck,
    kernel_feature,
    kernel_lines,
    rate_verdict,
    worst,
)


@dataclass(frozen=True)
class DirectionShape:
    ifname: str
    rate_mbps: float
    queue_bytes: int
    delay_ms: float
    mtu: int


def _tbf(ifname: str, parent: list[str], handle: str, rate_mbps: float, limit: int, mtu: int) -> list[str]:
    return ["tc", "qdisc", "add", "dev", ifname, *parent, "handle", handle, "tbf",
            "rate", f"{rate_mbps:g}mbit", "burst", str(tbf_burst(rate_mbps, mtu)), "limit", str(limit)]


def netem_limit_packets(shape: DirectionShape) -> int:
    """netem's own queue only holds packets in flight on the 'wire' (rate x delay) and must never
    be the drop point: size it for the whole delay at line rate in minimum-size packets, x2."""
    pps = shape.rate_mbps * 1e6 / 8 / 64
    return max(1000, int(pps * shape.delay_ms / 1e3 * 2))


def direction_plan(shape: DirectionShape, use_netem: bool) -> list[list[str]]:
    if use_netem and shape.delay_ms > 0:
        return [
            ["tc", "qdisc", "add", "dev", shape.ifname, "root", "handle", "1:", "netem",
             "delay", f"{shape.delay_ms:g}ms", "limit", str(netem_limit_packets(shape))],
            _tbf(shape.ifname, ["parent", "1:1"], "10:", shape.rate_mbps, shape.queue_bytes, shape.mtu),
        ]
    return [_tbf(shape.ifname, ["root"], "1:", shape.rate_mbps, shape.queue_bytes, shape.mtu)]


ACCESS_QUEUE_MIN = 8 * 2**20


def access_plan(ifname: str, rate_mbps: float, mtu: int) -> list[list[str]]:
    """An access link at line rate. A real NIC pushes back on the sender (TCP small queues,
    a stopped queue) instead of dropping; a tbf on the sender's own interface drops instead, which
    TCP takes for congestion. So its queue is deep enough (1000 packets, 20 ms at rate, at least
    8 MB) never to be where the experiment's drops happen: those belong to the bottleneck."""
    limit = max(1000 * mtu, int(rate_mbps * 1e6 / 8 * 0.020), ACCESS_QUEUE_MIN)
    return [_tbf(ifname, ["root"], "1:", rate_mbps, limit, mtu)]


def tbf_counters(text: str) -> tuple[int, int, int] | None:
    """(bytes sent, backlog bytes, overlimits) of the tbf in `tc -s -j qdisc show` output."""
    for qdisc in json.loads(text or "[]"):
        if qdisc.get("kind") == "tbf":
            return int(qdisc.get("bytes", 0)), int(qdisc.get("backlog", 0)), int(qdisc.get("overlimits", 0))
    return None


# -- readiness: what `longhaul check --inventory` runs on a Linux host, and how it reads ----------

QDISCS = (("tbf", True), ("netem", False), ("htb", False))   # (qdisc, required); netem: else the delay line
_LINK_SH = 'cd "/sys/class/net/$1" 2>/dev/null || { echo absent; exit 1; }; cat operstate; cat speed 2>&1; exit 0'
_PCI_SH = r"""d="/sys/bus/pci/devices/$1"; [ -e "$d" ] || { echo absent; exit 1; }
if [ -e "$d/driver" ]; then basename "$(readlink "$d/driver")"; else echo none; fi"""


def read_qdiscs(done, qdiscs=QDISCS) -> tuple[str, str]:
    found = kernel_lines(done.stdout)
    statuses, parts = [], []
    for name, required in qdiscs:
        state, words = kernel_feature(found.get(name, "unknown"))
        if state == "available":
            statuses.append(OK)
        elif state == "loadable":
            statuses.append(OK)               # tc loads sch_* modules by itself when run as root
        elif state == "missing":
            statuses.append(FAIL if required else WARN)
        else:
            statuses.append(WARN)
        note = "" if required or state in ("available", "loadable") else \
            (" (the delay then comes from the userspace delay line)" if name == "netem" else " (optional)")
        parts.append(f"{name}: {words}{note}")
    return worst(statuses), "; ".join(parts)


def read_link(done, rate: float) -> tuple[str, str]:
    """sysfs's operstate and speed of a lab interface against the inventory's rate_mbps."""
    lines = [ln.strip() for ln in done.stdout.splitlines()]
    if done.returncode != 0 or not lines or lines[0] == "absent":
        return FAIL, "no such interface on this host"
    state = lines[0]
    speed = lines[1] if len(lines) > 1 else ""
    if re.match(r"^\d+$", speed) and int(speed) > 0:
        return rate_verdict(float(speed), rate, state)
    why = "virtual NIC or link down" if speed == "-1" or "Invalid argument" in speed else speed or "no speed"
    return WARN, f"speed unknown ({why}); link {state}; inventory {rate:g} Mb/s"


def read_pci(done) -> tuple[str, str]:
    text = done.stdout.strip()
    if done.returncode != 0 or text == "absent" or not text:
        return FAIL, "no PCI device at this address (lspci -D lists the host's)"
    return OK, "present, " + ("no driver bound" if text == "none" else f"driver {text}")


# What a kernel attaches by itself (handle 0:); anything else on a router is someone's config.
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "cake")


class LinuxTc:
    """A Linux router (hardware/routers/base.py's RouterOS): tbf and a byte FIFO on the egress
    port, netem for the delay where the kernel has it (else the delay line on NFQUEUE)."""

    name = "linux"
    uname = "Linux"
    end_hosts = True         # senders and receivers run it too
    tools = ("ip", "tc")
    delays_itself = False
    sets_offloads = True     # ethtool on its lab interfaces, like an end host
    meter_sh = 'tc -s -j qdisc show dev "$1"'

    def kernel_check(self) -> OsCheck:
        names = tuple(q for q, _ in QDISCS)
        return OsCheck("qdiscs", ("sh", "-c", KERNEL_SH, "sh", "sch", "NET_SCH", *names), read_qdiscs)

    def link_check(self, ifname: str, rate_mbps: float) -> OsCheck:
        return OsCheck(f"link {ifname}", ("sh", "-c", _LINK_SH, "sh", ifname), partial(read_link, rate=rate_mbps))

    def pci_check(self, pci: str) -> OsCheck | None:
        return OsCheck(f"pci {pci}", ("sh", "-c", _PCI_SH, "sh", pci.lower()), read_pci)

    def sysctls(self, shape: DirectionShape) -> dict[str, str]:
        return router_sysctls()

    def write_sysctls(self, values: dict[str, str]) -> list[list[str]]:
        return sysctl_argv(values)

    def shaping(self, shape: DirectionShape, netem: bool) -> list[list[str]]:
        return direction_plan(shape, use_netem=netem)

    def unshaping(self, shape: DirectionShape) -> list[list[str]]:
        return [["tc", "qdisc", "del", "dev", shape.ifname, "root"]]

    def read_shaping(self, ifname: str) -> list[str]:
        return ["tc", "-j", "qdisc", "show", "dev", ifname]

    def parse_shaping(self, text: str) -> dict:
        root = next((q for q in json.loads(text or "[]") if q.get("root")), {})
        return {"kind": root.get("kind"), "handle": root.get("handle")}

    def meter_counters(self, text: str) -> tuple[int, int, int] | None:
        return tbf_counters(text)

    def in_the_way(self, state: dict, ifname: str) -> str | None:
        if state["handle"] in (None, "0:") and state["kind"] in (None, *DEFAULT_QDISCS):
            return None
        return (f"{ifname} already has a root qdisc {state['kind']} handle {state['handle']}: someone's "
                f"configuration, which longhaul would replace; remove it first (tc qdisc del dev {ifname} root)")
