"""The host OS contract: what a lab backend asks of a router to emulate its side of the
bottleneck, and what `longhaul check --inventory` runs on any host of that OS, chosen per host by
the inventory's `os` (registry.py's ROUTERS). A router OS is one module and one entry there.

Each method returns argv lists or reads text (pure); the backend runs them on the router, records
the state before and after, and pushes the undo onto its cleanup stack.
"""

from __future__ import annotations

from typing import Protocol

from longhaul.hardware.routers.linux_tc import DirectionShape
from longhaul.hardware.verdicts import OsCheck


class RouterOS(Protocol):
    name: str
    uname: str              # what `uname -s` says on a host of this OS (readiness's os row)
    end_hosts: bool         # senders and receivers may run it, or routers only
    tools: tuple[str, ...]  # the programs a router of this OS shapes with (readiness's tools row)
    delays_itself: bool     # its shaper adds the delay too (Dummynet); else netem, or the delay line
    sets_offloads: bool     # the profile's [tuning] offloads are set on its lab interfaces (ethtool)
    meter_sh: str           # shell text reading the bottleneck shaper's counters, "$1" the interface

    def kernel_check(self) -> OsCheck:
        """Whether a router's kernel has the shaper (read-only: nothing is changed)."""
        ...

    def link_check(self, ifname: str, rate_mbps: float) -> OsCheck:
        """The interface's link state and speed against the inventory's rate."""
        ...

    def pci_check(self, pci: str) -> OsCheck | None:
        """The PCI device at that address and its driver; None where the OS cannot say."""
        ...

    def meter_counters(self, text: str) -> tuple[int, int, int] | None:
        """(bytes the shaper sent, bytes queued now, a count that grows while it holds packets
        back) from meter_sh's output; None when the shaper is not there (collectors/live/shaper_meter.py)."""
        ...

    def sysctls(self, shape: DirectionShape) -> dict[str, str]:
        """What a forwarding router needs set for this shaping (name -> value)."""
        ...

    def write_sysctls(self, values: dict[str, str]) -> list[list[str]]: ...

    def shaping(self, shape: DirectionShape, netem: bool) -> list[list[str]]:
        """One direction of the bottleneck on its egress port: rate, queue and (delays_itself or
        netem) half the RTT."""
        ...

    def unshaping(self, shape: DirectionShape) -> list[list[str]]: ...

    def read_shaping(self, ifname: str) -> list[str]:
        """argv whose output parse_shaping turns into the port's shaping state (recorded)."""
        ...

    def parse_shaping(self, text: str) -> dict: ...

    def in_the_way(self, state: dict, ifname: str) -> str | None:
        """Someone's configuration that the shaping would replace, in words; None when clear."""
        ...
