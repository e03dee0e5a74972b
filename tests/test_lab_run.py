"""End-to-end on the real embedded lab: real namespaces, real iperf3, real delay line.

Tolerances are for this 2-core VM, whose timers wake late under load (see bench/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_support import our_namespaces, our_netns_etc, requires_lab, write_lab_config

pytestmark = [pytest.mark.lab, requires_lab]

TWO_FLOWS = """
[profile]
description = "two flows"
repeats = 2

[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 50
rtt_ms = 40
queue = "1bdp"

[tuning]
offloads = { gro = true }       # off on a veth until asked (hardware/offloads.py)

[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 8

[[flows]]
name = "bg"
role = "background"
pair = 2
cca = "cubic"
start_s = 1
duration_s = 6
"""


def longhaul(*args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_run_end_to_end_stores_measures_and_reports(tmp_path):
    config = write_lab_config(tmp_path, TWO_FLOWS)
    res = longhaul("run", "--config", str(config), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    assert run_dir.is_dir() and run_dir.parent == tmp_path / "runs"

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["format"] == "longhaul-summary" and summary["status"] == "complete"
    (cell,) = summary["cells"]
    lab = cell["lab"]
    assert lab["ok"]
    assert abs(lab["rtt_ms"]["measured"] - 40) <= 2.0
    assert abs(lab["rate_mbps"]["measured"] - 50) <= 2.5
    assert lab["host_cpu_steal_pct"] is None or 0 <= lab["host_cpu_steal_pct"] <= 100
    assert len(cell["trials"]) == 2
    for trial in cell["trials"]:
        assert trial["status"] == "ok"
        flows = {f["name"]: f for f in trial["flows"]}
        assert set(flows) == {"fg", "bg"}
        assert flows["bg"]["cca"] == "cubic" and flows["fg"]["role"] == "foreground"
        total = (flows["fg"]["bytes"] + flows["bg"]["bytes"]) * 8 / 8.0 / 1e6
        assert 30 <= total <= 50, total             # two flows share a 50 Mb/s bottleneck for 8 s
        assert "host_cpu_steal_pct" in trial
        assert 0.5 <= trial["jain"] <= 1.0
        assert trial["rtt"]["median_ms"] >= 39
    assert cell["stats"]["flows"]["fg"]["n"] == 2
    hosts = json.loads((run_dir / "manifest.json").read_text())["fingerprint"]["hosts"]
    gro = {(h, nic): fp["offloads"]["generic-receive-offload"] for h in ("S1", "R1", "R2", "D1")
           for nic, fp in hosts[h]["nics"].items()}
    assert set(gro.values()) == {"on"}, gro          # every lab interface, as the profile asked

    trial_dir = run_dir / "cells" / cell["id"] / "trial-1"
    rows = (trial_dir / "throughput.csv").read_text().splitlines()
    assert rows[0] == "t_s,flow,stream,mbps" and len(rows) > 10
    assert (trial_dir / "tcpinfo.csv").read_text().count("\n") > 30     # ~10 Hz for 2 flows
    assert (trial_dir / "rtt.csv").read_text().count("\n") >= 7          # one round a second
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["host"]["kernel"]
    assert manifest["tools"]["iperf3"] and manifest["features"]["delay"] in ("netem", "delayline")
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert our_namespaces() == [] and our_netns_etc() == []


SQUARE = """
[profile]
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 50
rtt_ms = 20
queue = "1bdp"
[[flows]]
name = "sq"
role = "background"
protocol = "udp"
udp_rate_mbps = 20
pattern = "square"
on_s = 3
off_s = 3
duration_s = 15
"""


def test_square_pattern_edges_at_the_receiver(tmp_path):
    config = write_lab_config(tmp_path, SQUARE)
    res = longhaul("run", "--config", str(config), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    trial_dir = next((run_dir / "cells").iterdir()) / "trial-1"
    events = [line.split(",") for line in (trial_dir / "events.csv").read_text().splitlines()[1:]]
    assert [float(e[2]) for e in events] == [0.0, 6.0, 12.0]
    for _, _, planned, launched, _, _ in events:
        lead = float(planned) - float(launched)
        assert 0 <= lead <= 0.2, lead                 # launched ahead by iperf3's set-up only
    per_second = {}
    for line in (trial_dir / "throughput.csv").read_text().splitlines()[1:]:
        t_s, flow, stream, value = line.split(",")
        if stream == "all":
            per_second[round(float(t_s))] = float(value)
    on = sorted(v for t, v in per_second.items() if (t - 1) % 6 < 3)
    assert len(on) >= 8, per_second                                  # 3 bursts x 3 s, at most one lost
    # the declared rate within 5 % at 1 s resolution for the typical second; one second caught in
    # a timer stall of this shared VM (tens of ms) may be a few percent further off
    assert abs(on[len(on) // 2] - 20) <= 1.0, per_second
    assert sum(abs(v - 20) > 1.0 for v in on) <= 1 and all(abs(v - 20) <= 3.0 for v in on), per_second
    assert not [t for t, v in per_second.items() if (t - 1) % 6 >= 3 and v > 0.5]


INTERRUPTIBLE = TWO_FLOWS.replace("repeats = 2", "repeats = 3")
TOOLS = ("iperf3", "fping", "longhaul-delayl", "ss")


def tool_pids() -> set[int]:
    """pids of the tools a run starts (read only: nothing is ended by name)."""
    out = subprocess.run(["ps", "-eo", "pid=,comm="], capture_output=True, text=True).stdout
    return {int(pid) for pid, comm in (line.split(None, 1) for line in out.splitlines()) if comm.strip() in TOOLS}


def test_sigint_during_a_cell_leaves_nothing_and_keeps_results(tmp_path):
    config = write_lab_config(tmp_path, INTERRUPTIBLE)
    before = tool_pids()
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        summary_path = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:     # wait until one trial is stored and another running
            found = list((tmp_path / "runs").glob("*/summary.json")) if (tmp_path / "runs").exists() else []
            if found:
                summary_path = found[0]
                try:
                    cells = json.loads(summary_path.read_text())["cells"]
                except ValueError:
                    cells = []
                if cells and len(cells[0]["trials"]) == 1:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no trial was stored in time")
        time.sleep(2.0)                        # well inside the second trial
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err[-2000:]
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "interrupted"
    (cell,) = summary["cells"]
    assert cell["status"] == "interrupted"
    assert [t["trial"] for t in cell["trials"]] == [1] and cell["trials"][0]["status"] == "ok"
    assert (summary_path.parent / "report.html").exists()
    assert our_namespaces() == [] and our_netns_etc() == []
    assert tool_pids() - before == set()

    # resuming runs only what is missing: trial 1 is kept as it was, trials 2 and 3 run
    first_trial = (summary_path.parent / "cells" / cell["id"] / "trial-1" / "trial.json").read_text()
    res = longhaul("run", "--resume", str(summary_path.parent), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert Path(res.stdout.strip().splitlines()[-1]) == summary_path.parent
    summary = json.loads(summary_path.read_text())
    (cell,) = summary["cells"]
    assert summary["status"] == "complete" and cell["status"] == "complete"
    assert sorted(t["trial"] for t in cell["trials"]) == [1, 2, 3]
    assert all(t["status"] == "ok" for t in cell["trials"])
    assert (summary_path.parent / "cells" / cell["id"] / "trial-1" / "trial.json").read_text() == first_trial
    manifest = json.loads((summary_path.parent / "manifest.json").read_text())
    assert len(manifest["resumed"]) == 1 and manifest["status"] == "complete"
    assert our_namespaces() == []
