"""The qemu lab's traffic generator: a VM G1 beside the senders that runs TRex from the engineer's
release tree ([lab.trex] path) on a virtio-net PCI port bound to DPDK.

G1's TRex port sits on a segment of its own into R1 (R1 `g1`, TRex's address the packets' source;
R2 routes the segment back over the bottleneck, so R1's reverse-path filter passes them, as in the
embedded lab's G1). The tree is this machine's, shared read-only into G1 over 9p at the same path,
so the inventory's trex_path is the config's. Once the fleet is up, G1's port is handed to DPDK
with its huge pages (drivers/agents/dpdk_port.py, as a sender's DPDK port is for testpmd), TRex's
trex_cfg.yaml is written on G1 and its server started there (hardware/generator.py) before the
session checks that it listens; it stops with the fleet. TRex cannot be installed on this machine:
the plan, the arguments and the configuration are tested here (tests/hardware/test_qemu_generator.py).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from longhaul.drivers.agents import dpdk_port
from longhaul.hardware.executors.process import Executor, Process
from longhaul.hardware.generator import TrexPort, TrexSection, start_server

GEN_NET = "10.223.0"            # G1's TRex port .2 and R1's g1 .1, /24 (the fleet's test nets are 10.22x)
BRIDGE = "g1"
TREE_TAG = "lhtrex"             # the 9p share's mount tag
HUGEPAGES_MB = 1024             # TRex's packet memory on G1, beside what the VM's system needs
HOST_DIR = "/run/longhaul-trex"     # on G1: trex_cfg.yaml and the port's saved state

MOUNT_SH = ('mkdir -p "$2" && { mountpoint -q "$2" || '
            'mount -t 9p -o trans=virtio,version=9p2000.L,ro "$1" "$2"; }')


def share_argv(tree: str) -> list[str]:
    """qemu's arguments that share the release tree with G1, read-only."""
    return ["-virtfs", f"local,path={tree},mount_tag={TREE_TAG},security_model=none,readonly=on"]


def trex_port(pci: str) -> TrexPort:
    return TrexPort(None, f"{GEN_NET}.2", f"{GEN_NET}.1", pci=pci)


def prepare_argv(tree: str, pci: str, python: str = sys.executable) -> list[list[str]]:
    """What G1 runs before TRex starts: the tree mounted where the config names it, the port
    handed to DPDK with its huge pages (the VM is discarded with the fleet, so nothing is given
    back). `python` is this machine's, which the inventory maps to the image's longhaul."""
    return [["sh", "-c", MOUNT_SH, "sh", TREE_TAG, tree],
            ["mkdir", "-p", HOST_DIR],
            [python, "-m", dpdk_port.__name__, "bind", pci, "--hugepages-mb", str(HUGEPAGES_MB),
             "--state", f"{HOST_DIR}/port.json"]]


def start(executor: Executor, section: TrexSection, pci: str, workdir: Path) -> Process:
    """TRex serving on G1, once its port is DPDK's; its log in workdir here."""
    for argv in prepare_argv(section.path, pci):
        done = executor.run(argv, check=False, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"generator {executor.name}: {shlex.join(argv)} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-300:]}")
    return start_server(executor, section, [trex_port(pci)], workdir, host_dir=HOST_DIR)
