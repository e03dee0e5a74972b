"""What the TRex generator tests share: the parts of a release tree longhaul looks for, the live
tests' tree and their skip, and a trex background beside an iperf3 foreground."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from longhaul.drivers.trex_stl import API_SUBDIR

TREX_PATH = os.environ.get("LONGHAUL_TREX_PATH")
# a live test needs a real tree; where there is none it says so
needs_tree = pytest.mark.skipif(not TREX_PATH, reason="requires a TRex release tree (TRex cannot be installed on "
                                "this machine); set LONGHAUL_TREX_PATH to one")


def fake_tree(root: Path) -> Path:
    """The parts of a release tree longhaul checks for (a live test needs a real one)."""
    (root / API_SUBDIR).mkdir(parents=True)
    (root / "t-rex-64").write_text("#!/bin/sh\n")
    (root / "t-rex-64").chmod(0o755)
    return root


def live_profile(where: str, *, access_mbps: float, bottleneck_mbps: float, queue: str, udp_mbps: float,
                 duration_s: float) -> str:
    """One pair: an iperf3 foreground beside a trex background from the lab's generator."""
    return f'''
[profile]
description = "TRex from the {where}'s generator beside an iperf3 foreground"
repeats = 1

[topology]
pairs = 1
access_rate_mbps = {access_mbps:g}
bottleneck_rate_mbps = {bottleneck_mbps:g}
rtt_ms = 20
queue = "{queue}"

[[flows]]
name = "fg"
role = "foreground"
tool = "iperf3"
pair = 1
duration_s = {duration_s:g}

[[flows]]
name = "bg"
role = "background"
tool = "trex"
pair = 1
udp_rate_mbps = {udp_mbps:g}
duration_s = {duration_s:g}
'''
