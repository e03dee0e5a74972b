"""Shared pieces of the lab tests: skip rules, a small profile writer, and the leak check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from longhaul.hardware import run_marker


def lab_skip_reason() -> str | None:
    if os.environ.get("LONGHAUL_LAB_TESTS") == "0":     # a developer's quick run of the middle
        return "LONGHAUL_LAB_TESTS=0"
    if os.geteuid() != 0:
        return "the netns lab needs root"
    for tool in ("ip", "tc", "iperf3", "fping", "iptables"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make setup installs it)"
    return None


requires_lab = pytest.mark.skipif(lab_skip_reason() is not None, reason=lab_skip_reason() or "")


def our_namespaces() -> list[str]:
    base = Path("/run/netns")
    names = [p.name for p in base.iterdir()] if base.is_dir() else []
    return sorted(n for n in names if n.startswith("lh-"))


def our_bpf_ccas() -> set[str]:
    """longhaul's BPF congestion controls registered in this machine's kernel now."""
    from longhaul.hardware import bpf_ccas
    return set(bpf_ccas.kernel_ccas()) & set(bpf_ccas.BPF_CCAS)


def our_netns_etc() -> list[str]:
    base = Path("/etc/netns")
    return sorted(p.name for p in base.iterdir() if p.name.startswith("lh-")) if base.is_dir() else []


def run_tag(pid: int) -> str:
    """The tag of the live run whose marker names `pid` (`ip netns exec` execs: the run keeps the
    pid the test started)."""
    (tag,) = [m.tag for m in run_marker.live_markers() if m.pid == pid]
    return tag


def journal_of(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of each process that the live run `pid` journaled (hardware/run_marker.py):
    what `longhaul clean` must end after a SIGKILL, found by pid and start time, not by name."""
    journal = run_marker.STATE_DIR / f"{run_tag(pid)}.pids"
    lines = journal.read_text().splitlines() if journal.exists() else []      # none started yet
    return [(e["pid"], e["start"]) for e in map(json.loads, lines) if e.get("start") is not None]


# This VM shares its host: when the hypervisor is oversubscribed it takes 30-50 % of the CPU time
# for a minute or more, and the shaper and delay line fall behind (a verification then rightly
# refuses the cell, naming the steal). Tests ride such a spell out with more and longer retries
# than the product's default; what they assert about the lab stays the product's tolerance.
PATIENT_VERIFY = "attempts = 6\nretry_pause_s = 8"
# A lab of VMs under TCG (config-vm.toml says why): the emulated hops' time adds to the idle RTT (a
# TCG lab takes none of it off the routers' delay: it is no floor, hardware/backends/ssh/lab.py), and
# the router's own clock and shaper jitter by a few per cent over a short probe.
def tcg_verify(rtt_tolerance_ms: float = 15) -> str:
    return PATIENT_VERIFY + f"\nrtt_tolerance_ms = {rtt_tolerance_ms:g}\nrate_tolerance_pct = 10\nrate_probe_s = 6"


TCG_VERIFY = tcg_verify()


def write_lab_config(tmp: Path, profile_text: str, name: str = "t", verify: str = PATIENT_VERIFY) -> Path:
    (tmp / "profiles").mkdir(parents=True, exist_ok=True)
    (tmp / "profiles" / f"{name}.toml").write_text(profile_text)
    config = tmp / "config.toml"
    config.write_text(f"""
[store]
dir = "runs"
[run]
profiles = ["{name}"]
[report]
formats = ["html"]
[verify]
{verify}
""")
    return config


@contextmanager
def scratch_namespace():
    """One empty namespace with lo up, named so `longhaul clean` knows whose it is; always deleted."""
    ns = f"lh-probe-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
