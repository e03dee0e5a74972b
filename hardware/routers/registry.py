"""Router OSes by the inventory's `os`: a router OS is one module implementing base.RouterOS plus
one entry here. FreeBSD's Dummynet plans (freebsd_ipfw.py) join once they have run on a router."""

from __future__ import annotations

from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.linux_tc import LinuxTc

ROUTERS: dict[str, RouterOS] = {"linux": LinuxTc()}
