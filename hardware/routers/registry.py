"""Router OSes by the inventory's `os`: a router OS is one module implementing base.RouterOS plus
one entry here."""

from __future__ import annotations

from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.freebsd_ipfw import FreeBSDIpfw
from longhaul.hardware.routers.linux_tc import LinuxTc

ROUTERS: dict[str, RouterOS] = {"linux": LinuxTc(), "freebsd": FreeBSDIpfw()}
