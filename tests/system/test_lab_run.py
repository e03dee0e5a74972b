"""End-to-end on the real embedded lab: real namespaces, real iperf3, real delay line.

Tolerances are for this 2-core VM, whose timers wake late under load (see bench/RESULTS.md).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from lab_support import our_namespaces, our_netns_etc, requires_lab, write_lab_config
from rich.console import Console

from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.hardware.backends.netns import features
from longhaul.hardware.backends.netns import lab as netns_lab

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
    # the probe servers' reports, summed second by second: what TCP delivers through the shaper
    assert 0.85 * 50 * 1448 / 1514 <= lab["rate_mbps"]["goodput"] <= 1.03 * 50 * 1448 / 1514, lab["rate_mbps"]
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


EVERY_SOURCE = """
[profile]
description = "per-second figures from what arrived"
repeats = 1

[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 200
rtt_ms = 20
queue = "1MB"

[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 10

[[flows]]
name = "bg"
role = "background"
pair = 2
cca = "cubic"
start_s = 2
duration_s = 8

[[scenarios]]
name = "tcp"

[[scenarios]]
name = "udt"
set = { "flows.fg.tool" = "udt" }

[[scenarios]]
name = "udp"
set = { "flows.fg.protocol" = "udp", "flows.fg.udp_rate_mbps" = 150, "flows.bg.tool" = "paced-udp", "flows.bg.udp_rate_mbps" = 100 }
"""


def test_no_stored_second_exceeds_what_the_bottleneck_can_pass(tmp_path):
    """iperf3 (TCP and UDP), UDT and paced UDP, shared: every stored second is what arrived (their
    own receivers, read late on this busy machine, stored up to 1.4x the ceiling) and the flows'
    seconds together stay within 3 % of the bottleneck's payload ceiling."""
    from longhaul.drivers.udt import helper_path as udt_helper
    if not udt_helper().exists():
        pytest.skip("longhaul-udtperf not built (make setup builds it)")
    config = write_lab_config(tmp_path, EVERY_SOURCE, verify="enabled = false")   # the tools, not the lab
    res = longhaul("run", "--config", str(config), cwd=tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    cells = {c["scenario"]: c for c in json.loads((run_dir / "summary.json").read_text())["cells"]}
    assert sorted(cells) == ["tcp", "udp", "udt"]
    for name, cell in cells.items():
        # the receivers count payload: TCP's is mtu - 52 of a packet, UDP's mtu - 28 (collectors/metrics.py)
        ceiling = 200 * (1472 if name == "udp" else 1448) / 1514
        (trial,) = cell["trials"]
        assert trial["status"] == "ok", (name, trial["error"])
        per_second: dict[int, float] = {}
        for line in (run_dir / "cells" / cell["id"] / "trial-1" / "throughput.csv").read_text().splitlines()[1:]:
            t_s, _, stream, value = line.split(",")
            if stream == "all" and abs(float(t_s) - round(float(t_s))) < 0.02:
                per_second[round(float(t_s))] = per_second.get(round(float(t_s)), 0.0) + float(value)
        print(name, {t: round(v, 1) for t, v in sorted(per_second.items())})
        assert len(per_second) >= 9, (name, per_second)
        assert max(per_second.values()) <= ceiling * 1.03, (name, per_second)
        assert trial["collector"]["seconds_above_ceiling"] == 0
        assert trial["collector"]["rtt_rounds_below_floor"] == 0 == trial["collector"]["tcpinfo_samples_below_floor"]
        busy = sorted(per_second.values())[len(per_second) // 2]
        assert busy >= 0.6 * ceiling, (name, per_second)          # the bottleneck was in use
    assert cells["udp"]["trials"][0]["collector"]["arrival_samples"] > 100       # the receivers' counters
    checked = longhaul("invariants", str(run_dir), cwd=tmp_path)
    assert checked.returncode == 0 and checked.stdout.strip() == "invariants: 0 of 3 trials break them", checked.stdout
    assert our_namespaces() == []


WRONGABLE = """
[profile]
description = "a lab that may be built wrong"
repeats = 1
[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 100
rtt_ms = 40
queue = "1bdp"
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 3
"""


def _refused(tmp_path: Path, profile: str = WRONGABLE) -> str:
    """Run a profile (WRONGABLE) in this process (so a test can change how the lab is built) with
    one verification attempt; the cell must be refused before any trial: its error."""
    config = load_config(write_lab_config(tmp_path, profile, verify="attempts = 1"))
    store = Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    (cell,) = store.cells
    assert cell.status == "refused" and cell.trials == [], (cell.status, cell.error)
    assert our_namespaces() == [] and our_netns_etc() == []
    return cell.error


def test_verification_refuses_a_lab_whose_shaper_is_at_the_wrong_rate(tmp_path, monkeypatch):
    right = netns_lab.bottleneck_shapes

    def slow(topo, settings):       # the routers shape to 80 of the configured 100 Mb/s
        return [(replace(shape, rate_mbps=shape.rate_mbps * 0.8), host) for shape, host in right(topo, settings)]

    monkeypatch.setattr(netns_lab, "bottleneck_shapes", slow)
    error = _refused(tmp_path)
    measured = re.search(r"bottleneck rate ([\d.]+) Mb/s vs configured 100 Mb/s", error)
    assert measured and 76 <= float(measured.group(1)) <= 84, error      # what the shaper really passed


@pytest.mark.skipif(features.detect().netem, reason="this kernel has netem: the lab has no delay line to stop")
def test_verification_refuses_a_lab_whose_delay_line_stopped(tmp_path, monkeypatch):
    build = netns_lab.NetnsLab.build

    def stopped(self):              # built right, then its delay lines stop
        build(self)
        assert self.delaylines
        for proc in self.delaylines:
            proc.stop()

    monkeypatch.setattr(netns_lab.NetnsLab, "build", stopped)
    error = _refused(tmp_path)
    assert "idle RTT" in error or "no ping reply" in error, error


def test_verification_refuses_a_pair_that_bypasses_the_routers(tmp_path, monkeypatch):
    """Pair 1 crosses the routers; pair 2 is also wired straight to its receiver (a veth S2 <-> D2
    with host routes each way), a path the delay never touches. Verification checks every pair's
    path and refuses the cell for pair 2: its echoes are far below the configured 40 ms."""
    build = netns_lab.NetnsLab.build

    def bypassed(self):
        build(self)
        s2, d2 = (h for h in self.topo.hosts if h.name in ("S2", "D2"))
        self.local.run(["ip", "link", "add", "lhbypass0", "netns", s2.netns, "type", "veth",
                        "peer", "name", "lhbypass1", "netns", d2.netns])
        for host, ifname, other in (("S2", "lhbypass0", "D2"), ("D2", "lhbypass1", "S2")):
            executor = self.executor(host)
            executor.run(["ip", "link", "set", ifname, "up"])
            executor.run(["ip", "route", "replace", f"{self.address(other)}/32", "dev", ifname])

    monkeypatch.setattr(netns_lab.NetnsLab, "build", bypassed)
    error = _refused(tmp_path, WRONGABLE.replace("pairs = 1", "pairs = 2"))
    assert "S2 -> D2: an echo took" in error and "below the configured propagation delay 40 ms" in error, error
    assert "S1 -> D1" not in error, error            # the pair through the routers is right
