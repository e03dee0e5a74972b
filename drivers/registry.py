"""Every traffic tool longhaul drives, by the name a flow's `tool` key gives: the one place that
knows which driver runs which tool. Adding a tool is its driver module plus one entry here."""

from __future__ import annotations

from longhaul.drivers.dpdk_testpmd import DpdkTestpmd
from longhaul.drivers.gridftp import GridFTP
from longhaul.drivers.iperf3 import Iperf3
from longhaul.drivers.nfs import Nfs
from longhaul.drivers.paced_udp import PacedUdp
from longhaul.drivers.tool import Tool
from longhaul.drivers.trex_stl import TrexStl
from longhaul.drivers.udt import Udt

TOOLS: dict[str, type[Tool]] = {
    "iperf3": Iperf3,
    "gridftp": GridFTP,
    "udt": Udt,
    "nfs": Nfs,
    "paced-udp": PacedUdp,
    "dpdk": DpdkTestpmd,
    "trex": TrexStl,
}


def tool_for(name: str) -> Tool:
    try:
        return TOOLS[name]()
    except KeyError:
        raise ValueError(f"no driver for tool {name!r} in this build; tools: {', '.join(TOOLS)}") from None
