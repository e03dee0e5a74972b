"""Lab.retune on the embedded lab: a cell that differs only in its end hosts' congestion control or
buffers takes the standing namespaces in place (the runner's side is tests/appliance/test_runner_fake.py,
the SSH hosts' tests/hardware/test_hosts_plan.py)."""

from __future__ import annotations

import os

import pytest
from lab_support import lab_skip_reason, our_namespaces

from longhaul.hardware.backends.base import LinkSettings
from longhaul.hardware.backends.netns.backend import preflight
from longhaul.hardware.backends.netns.lab import NetnsLab
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import ProcessTable
from longhaul.hardware.topology import dumbbell
from longhaul.hardware.tuning import BUFFER_BYTES

KEYS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


def _read(lab: NetnsLab, host: str) -> list[str]:
    out = lab.executor(host).run(["sysctl", "-n", *KEYS]).stdout.splitlines()
    return [" ".join(line.split()) for line in out]


def test_end_host_namespaces_take_another_cca_and_buffer_in_place(tmp_path):
    if lab_skip_reason():
        pytest.skip(lab_skip_reason())
    features = preflight()
    allowed = [c for c in ("reno", "cubic", "bbr") if c in features.allowed_congestion_controls]
    if len(allowed) < 2:
        pytest.skip(f"this machine allows namespaces fewer than two defaults ({' '.join(allowed) or 'none'})")
    first, second = allowed[:2]
    before = our_namespaces()
    with CleanupStack() as cleanup:
        lab = NetnsLab(dumbbell(f"rt{os.getpid() % 10000}", 1, 1000, 100), LinkSettings(0, 100_000, first, "large"),
                       features, ProcessTable(), cleanup, tmp_path)
        lab.build()
        large, normal = (f"4096 131072 {BUFFER_BYTES[b]}" for b in ("large", "normal"))
        assert _read(lab, "S1") == [first, large, f"4096 16384 {BUFFER_BYTES['large']}"]
        wanted = LinkSettings(0, 100_000, second, "normal")
        assert lab.retune(wanted) and lab.settings == wanted
        for host in ("S1", "D1"):
            assert _read(lab, host) == [second, normal, f"4096 16384 {BUFFER_BYTES['normal']}"], host
        # a default the namespaces may not take would leave the last one set: the lab is rebuilt
        refused = [c for c in features.congestion_controls if c not in features.allowed_congestion_controls]
        if refused:
            assert not lab.retune(LinkSettings(0, 100_000, refused[0], "normal"))
        assert not lab.retune(LinkSettings(0, 100_000, second, "default"))      # tcp_rmem left as it was
        assert not lab.retune(LinkSettings(10, 100_000, second, "normal"))      # another path
        assert _read(lab, "S1")[0] == second
    assert set(our_namespaces()) <= set(before)
