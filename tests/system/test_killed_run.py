"""A run killed with SIGKILL runs no teardown: `longhaul clean` must then end every process it
started (in its namespaces and in the root namespace: the machine's one tcp_info probe reads every
sender namespace from there) and remove its namespaces, /etc/netns files and iptables rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_support import journal_of, our_namespaces, our_netns_etc, requires_lab, write_lab_config

from longhaul.hardware.executors.process import start_ticks
from longhaul.hardware.tcp_mem import TCP_MEM

pytestmark = [pytest.mark.lab, requires_lab]

PROFILE = """
[profile]
description = "killed at several points"
repeats = 2
[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 50
rtt_ms = 40
queue = "1bdp"
[probe]
tcpinfo_hz = 100
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 6
[[flows]]
name = "bg"
role = "background"
pair = 2
protocol = "udp"
udp_rate_mbps = 10
duration_s = 6
"""


def _processes_naming(text: str) -> list[str]:
    """Processes whose command line names `text` (read only: nothing is ended here)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in args:
                found.append(f"{proc.name}: {args[:160]}")
    return found


def _iptables() -> str:
    return subprocess.run(["iptables-save"], capture_output=True, text=True).stdout


def _trial_running(runs: Path, trial: int, into_s: float):
    """`into_s` after the trial's tcp_info probe first wrote (its flows are on by then)."""
    seen: list[float] = []

    def ready() -> bool:
        if not seen and list(runs.glob(f"*/cells/*/trial-{trial}/**/tcpinfo-*.jsonl")):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= into_s
    return ready


def _lab_built(runs: Path):
    return lambda: bool(our_namespaces()) and bool(list(runs.glob("*/manifest.json")))


@pytest.mark.parametrize("point", ["lab built", "trial 1 at 1.5 s", "trial 2 at 4 s"])
def test_sigkill_then_clean_leaves_nothing_of_the_run(tmp_path, point):
    config = write_lab_config(tmp_path, PROFILE)
    runs = tmp_path / "runs"
    when = {"lab built": _lab_built(runs), "trial 1 at 1.5 s": _trial_running(runs, 1, 1.5),
            "trial 2 at 4 s": _trial_running(runs, 2, 4.0)}[point]
    rules, found = _iptables(), TCP_MEM.read_text()
    # a small TCP allowance of our own (64 MB at pressure), so the session must raise it for its 1 GB
    # buffers on any machine, whatever its RAM (the kernel's default scales with it); ours again after
    tcp_mem = "12288 16384 24576"
    TCP_MEM.write_text(tcp_mem)
    try:
        _kill_and_clean(tmp_path, config, runs, when, point, rules, tcp_mem)
    finally:
        TCP_MEM.write_text(found)


def _kill_and_clean(tmp_path, config, runs, when, point, rules, tcp_mem) -> None:
    run = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not when():
            assert run.poll() is None, "the run ended before the point it was to be killed at"
            assert time.monotonic() < deadline, f"the run never reached: {point}"
            time.sleep(0.1)
        if point != "lab built":
            assert _processes_naming("/run/netns/lh-"), "the machine's tcp_info probe was not running at the kill"
        # the session raised this machine's TCP memory for its 1 GB buffers (hardware/tcp_mem.py)
        assert TCP_MEM.read_text().split() != tcp_mem.split()
        journal = journal_of(run.pid)
        os.kill(run.pid, signal.SIGKILL)          # the run's own process only: its children live on
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    cleaned = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "clean"], capture_output=True,
                             text=True, timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    print(cleaned.stdout)
    assert [pid for pid, start in journal if start_ticks(pid) == start] == []      # by the run's journal
    assert _processes_naming(str(runs)) == [] and _processes_naming("/run/netns/lh-") == []
    assert our_namespaces() == [] and our_netns_etc() == []
    assert _iptables() == rules
    assert TCP_MEM.read_text().split() == tcp_mem.split() and "net.ipv4.tcp_mem raised" in cleaned.stdout
    assert not list(Path("/run/longhaul").glob("*.pids")) or all(
        json.loads(p.with_suffix(".json").read_text())["pid"] != run.pid for p in Path("/run/longhaul").glob("*.pids")
        if p.with_suffix(".json").exists())
