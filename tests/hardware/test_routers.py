"""The router OS contract (hardware/routers/base.py) for Linux (FreeBSD: test_dummynet.py): the plans a backend runs on a
router and how it reads what is there before it."""
from __future__ import annotations

import json

from longhaul.hardware.routers.linux_tc import DirectionShape, LinuxTc, direction_plan
from longhaul.hardware.routers.registry import ROUTERS

SHAPE = DirectionShape("eth1", 500.0, 6_000_000, 64.0, 1500)


def test_router_oses_are_registered_by_the_inventorys_os_name():
    assert set(ROUTERS) == {"linux", "freebsd"} and all(router.name == name for name, router in ROUTERS.items())


def test_linux_shaping_is_the_tc_plan_and_its_undo_deletes_the_root():
    linux = LinuxTc()
    assert linux.shaping(SHAPE, netem=True) == direction_plan(SHAPE, use_netem=True)
    assert linux.shaping(SHAPE, netem=False) == direction_plan(SHAPE, use_netem=False)
    assert linux.unshaping(SHAPE) == [["tc", "qdisc", "del", "dev", "eth1", "root"]]
    assert linux.write_sysctls(linux.sysctls(SHAPE)) == [["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]]
    assert not linux.delays_itself


def test_linux_reads_the_root_qdisc_and_refuses_someone_elses():
    linux = LinuxTc()
    shown = json.dumps([{"kind": "fq_codel", "handle": "0:", "root": True}])
    assert linux.parse_shaping(shown) == {"kind": "fq_codel", "handle": "0:"}
    assert linux.in_the_way(linux.parse_shaping(shown), "eth1") is None
    assert linux.in_the_way(linux.parse_shaping(""), "eth1") is None
    theirs = linux.parse_shaping(json.dumps([{"kind": "htb", "handle": "1:", "root": True}]))
    assert "eth1 already has a root qdisc htb handle 1:" in linux.in_the_way(theirs, "eth1")
