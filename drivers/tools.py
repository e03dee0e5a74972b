"""The driver for a flow's `tool` name: one place that knows which module runs which tool."""

from __future__ import annotations

from .tool import Tool


def tool_for(name: str) -> Tool:
    if name == "iperf3":
        from .iperf3 import Iperf3
        return Iperf3()
    if name == "gridftp":
        from .gridftp import GridFTP
        return GridFTP()
    if name == "paced-udp":
        from .paced_udp import PacedUdp
        return PacedUdp()
    if name == "dpdk":
        from .dpdk_testpmd import DpdkTestpmd
        return DpdkTestpmd()
    if name == "trex":
        from .trex_stl import TrexStl
        return TrexStl()
    if name == "nfs":
        from .nfs import Nfs
        return Nfs()
    if name == "udt":
        from .udt import Udt
        return Udt()
    raise ValueError(f"no driver for tool {name!r} in this build")
