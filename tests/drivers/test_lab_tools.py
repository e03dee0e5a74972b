"""Each traffic tool through the whole runner on the embedded lab: per-second throughput in the
store, the declared CCA on the tool's sockets, nothing left behind. One short cell per tool."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lab_support import our_namespaces, requires_lab, write_lab_config

from longhaul.drivers import nfs_client

pytestmark = [pytest.mark.lab, requires_lab]

LAB = """
[profile]
description = "{name}"
repeats = 1
[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 50
rtt_ms = 20
queue = "1bdp"
"""


def _run(tmp: Path, profile: str) -> tuple[dict, Path]:
    # these tests are about the tools; the lab's own fidelity (and its verification) is
    # test_lab_run's, and each verification probe here would only add a minute of saturation
    config = write_lab_config(tmp, profile, verify="enabled = false")
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                         cwd=tmp, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert our_namespaces() == []
    cell = summary["cells"][0]
    return cell, run_dir / "cells" / cell["id"] / "trial-1"


def _per_second(trial_dir: Path, flow: str) -> list[float]:
    with open(trial_dir / "throughput.csv") as fh:
        return [float(r["mbps"]) for r in csv.DictReader(fh) if r["flow"] == flow and r["stream"] == "all"]


@pytest.mark.skipif(not shutil.which("globus-url-copy"), reason="GridFTP is not installed (make setup installs it)")
def test_gridftp_parallel_streams_with_cubic_beside_iperf3(tmp_path):
    cell, trial_dir = _run(tmp_path, LAB.format(name="gridftp") + """
[[flows]]
name = "gf"
role = "foreground"
tool = "gridftp"
pair = 1
cca = "cubic"
streams = 4
duration_s = 8
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    flow = trial["flows"][0]
    # the namespace default here is bbr and may not be cubic: the shim set it per socket
    assert flow["observed_cca"] == ["cubic"], flow
    assert flow["retransmits"] is not None
    seconds = _per_second(trial_dir, "gf")
    print("gridftp per second:", seconds, "mean", flow["mean_mbps"])
    assert len(seconds) >= 7, seconds                      # per second from tcp_info, not 5 s markers
    steady = sorted(seconds[1:-1])
    assert 0.6 * 50 <= steady[len(steady) // 2] <= 50 * 1.02, seconds
    assert 0.5 * 50 <= flow["mean_mbps"] <= 50 * 1.02, flow


def test_paced_udp_sinusoid_follows_its_declaration_at_the_receiver(tmp_path):
    from longhaul.drivers.paced_udp import declared_mbps, helper_path
    from longhaul.drivers.tool import Shape
    if not helper_path().exists():
        pytest.skip("longhaul-pacedudp not built (make setup builds it)")
    cell, trial_dir = _run(tmp_path, LAB.format(name="sine") + """
[[flows]]
name = "sine"
role = "background"
tool = "paced-udp"
pattern = "sinusoid"
min_mbps = 5
max_mbps = 40
period_s = 8
duration_s = 10
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    shape = Shape("sinusoid", 5, 40, 8)
    seconds = _per_second(trial_dir, "sine")
    errors = [abs(got - declared_mbps(k, k + 1, shape=shape)) / declared_mbps(k, k + 1, shape=shape)
              for k, got in enumerate(seconds)]
    print("sinusoid per second:", seconds, "relative errors:", [round(e, 4) for e in errors])
    assert len(seconds) == 10, seconds
    # within 5 % of the declared instantaneous rate at 1 s resolution; one second may be caught
    # in a timer stall of this shared VM
    assert sorted(errors)[len(errors) // 2] <= 0.05 and sum(e > 0.05 for e in errors) <= 1, errors
    assert trial["flows"][0]["lost_percent"] is not None and trial["flows"][0]["lost_percent"] < 1.0
    # no stall here reached the sender's max_lag (1 s of backlog): nothing of the schedule given up
    assert trial["flows"][0]["skipped_bytes"] == 0


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="dpdk-testpmd is not installed (make setup installs it)")
def test_dpdk_line_rate_background_fills_the_bottleneck(tmp_path):
    cell, trial_dir = _run(tmp_path, LAB.format(name="dpdk") + """
[[flows]]
name = "line"
role = "background"
tool = "dpdk"
pair = 1
duration_s = 5
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    seconds = _per_second(trial_dir, "line")
    print("dpdk per second at the receiver:", seconds)
    assert len(seconds) >= 4, seconds
    steady = sorted(seconds[1:])
    # line rate into a 50 Mb/s bottleneck: the receiver sees the bottleneck (IP bytes of the flow)
    assert 0.85 * 50 <= steady[len(steady) // 2] <= 1.02 * 50, seconds
    assert trial["flows"][0]["lost_percent"] > 50          # the tbf drops what line rate sends beyond it


def _nfs_skip() -> str | None:
    if not shutil.which("ganesha.nfsd"):
        return "nfs-ganesha is not installed (make setup installs it)"
    return None if nfs_client.helper_path().exists() else "longhaul-nfswrite is not built (make setup builds it)"


@pytest.mark.skipif(_nfs_skip() is not None, reason=_nfs_skip() or "")
def test_nfs_clients_copy_in_iterations_with_per_second_throughput(tmp_path):
    cell, trial_dir = _run(tmp_path, LAB.format(name="nfs") + """
[[flows]]
name = "nfs"
role = "foreground"
tool = "nfs"
pair = 1
cca = "cubic"
clients = 4
file_bytes = 10000000
duration_s = 8
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    flow = trial["flows"][0]
    assert flow["observed_cca"] == ["cubic"], flow
    seconds = _per_second(trial_dir, "nfs")
    print("nfs per second:", seconds, "mean", flow["mean_mbps"])
    assert len(seconds) >= 6, seconds
    steady = sorted(seconds[1:-1])
    # 4 clients with their WRITEs in flight: the 50 Mb/s bottleneck limits
    assert 0.6 * 50 <= steady[len(steady) // 2] <= 1.02 * 50, seconds


@pytest.mark.skipif(_nfs_skip() is not None, reason=_nfs_skip() or "")
def test_one_nfs_copy_at_128_ms_is_window_free_beside_an_nfs_cp_sized_window(tmp_path):
    # seed 000: one kernel-NFS copy moves 410 Mb/s at 128 ms. nfs-cp's one 1 MB WRITE per round
    # trip caps a copy at 8 Mbit / 0.128 s = 65.5 Mb/s; the writer's window lets TCP set the rate.
    # Side by side in one trial through one 400 Mb/s bottleneck: the windowed copy on pair 1,
    # window = 1 MB (nfs-cp's loop) on pair 2.
    cap = 8 * 2**20 / 0.128 / 1e6
    cell, trial_dir = _run(tmp_path, LAB.format(name="nfs128").replace("rtt_ms = 20", "rtt_ms = 128")
                           .replace("bottleneck_rate_mbps = 50", "bottleneck_rate_mbps = 400") + """
[[flows]]
name = "windowed"
role = "foreground"
tool = "nfs"
pair = 1
cca = "cubic"
file_bytes = 2000000000
duration_s = 14

[[flows]]
name = "onemb"
role = "background"
tool = "nfs"
pair = 2
cca = "cubic"
file_bytes = 2000000000
duration_s = 14
options = { window = 1048576 }
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    windowed, onemb = _per_second(trial_dir, "windowed"), _per_second(trial_dir, "onemb")
    print("windowed per second:", windowed, "\n1 MB window per second:", onemb)
    late_w, late_1 = sorted(windowed[6:-1]), sorted(onemb[6:-1])
    assert len(late_w) >= 5 and len(late_1) >= 5, (windowed, onemb)
    # the 1 MB window holds its copy at or under nfs-cp's cap; the windowed one, sharing the
    # bottleneck with it, takes what is left (~330 Mb/s of the 400 Mb/s payload) once past slow start
    assert late_1[len(late_1) // 2] <= 1.05 * cap, onemb
    assert late_w[len(late_w) // 2] >= 3 * cap, windowed


def test_udt_memory_to_memory_beside_a_cubic_flow(tmp_path):
    from longhaul.drivers.udt import helper_path
    if not helper_path().exists():
        pytest.skip("longhaul-udtperf not built (make setup builds it)")
    # UDT starts by blasting (1 us packet period) and needs room at the bottleneck, as in seed 000's
    # 6 MB router queues; a 1-BDP queue at 20 ms (125 kB) makes it collapse into retransmissions
    cell, trial_dir = _run(tmp_path, LAB.format(name="udt").replace('queue = "1bdp"', 'queue = "1MB"') + """
[[flows]]
name = "udt"
role = "foreground"
tool = "udt"
pair = 1
duration_s = 8

[[flows]]
name = "tcp"
role = "background"
pair = 2
cca = "cubic"
start_s = 4
duration_s = 4
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    udt, tcp = trial["flows"]
    seconds = _per_second(trial_dir, "udt")
    print("udt per second:", seconds, "tcp per second:", _per_second(trial_dir, "tcp"))
    assert len(seconds) >= 7, seconds
    # UDT's rate control paces by packet-pair capacity estimates, which the userspace delay line's
    # batched releases distort on this VM: its per-second rate swings (10-67 Mb/s seen), so what is
    # asserted is that it moves bulk data at a fair part of the link, not a steady rate
    assert udt["mean_mbps"] >= 0.3 * 50, (udt, seconds)
    assert udt["protocol"] == "udp" and udt["observed_cca"] is None
    assert udt["bytes"] > 0 and tcp["bytes"] > 0 and trial["jain"] is not None


def test_paced_udp_square_wave_edges_at_the_receiver(tmp_path):
    from longhaul.drivers.paced_udp import helper_path
    if not helper_path().exists():
        pytest.skip("longhaul-pacedudp not built (make setup builds it)")
    cell, trial_dir = _run(tmp_path, LAB.format(name="square") + """
[[flows]]
name = "sq"
role = "background"
tool = "paced-udp"
udp_rate_mbps = 20
pattern = "square"
on_s = 3
off_s = 3
duration_s = 15
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    with open(trial_dir / "throughput.csv") as fh:
        per_second = {round(float(r["t_s"])): float(r["mbps"]) for r in csv.DictReader(fh)
                      if r["flow"] == "sq" and r["stream"] == "all"}
    print("square per second:", per_second)
    on = [per_second.get(t) for t in (1, 2, 3, 7, 8, 9, 13, 14, 15)]
    # the source keeps an absolute schedule: a stall of this VM is made up in the next seconds (CI
    # saw 16.9, 21.1, 22.0), so each on-window carries its 60 Mb while single seconds may not
    for window in ((1, 2, 3), (7, 8, 9), (13, 14, 15)):
        assert abs(sum(per_second.get(t) or 0 for t in window) - 60) <= 0.03 * 60, (window, per_second)
    # a stall moves bytes between two seconds of a window: CI saw two stalls in one run (15.98 and
    # 23.94, 18.17 and ...), so at least 4 of the 9 seconds sit within 1 Mb/s of the 20 Mb/s rate
    assert sum(v is not None and abs(v - 20) <= 1.0 for v in on) >= 4, per_second
    assert not [t for t, v in per_second.items() if (t - 1) % 6 >= 3 and v > 0.5], per_second


@pytest.mark.skipif(not shutil.which("globus-url-copy"), reason="GridFTP is not installed (make setup installs it)")
def test_gridftp_disk_file_is_written_before_the_clock_and_removed_after(tmp_path):
    cell, trial_dir = _run(tmp_path, LAB.format(name="gridftp-disk") + """
[[flows]]
name = "gf"
role = "foreground"
tool = "gridftp"
storage = "disk"
file_bytes = 400000000
pair = 1
cca = "cubic"
streams = 2
duration_s = 5
""")
    trial = cell["trials"][0]
    assert trial["status"] == "ok", trial["error"]
    events = (trial_dir / "events.csv").read_text().splitlines()[1].split(",")
    # launched on time although 400 MB were written first (the clock starts after preparation)
    assert abs(float(events[3]) - float(events[2])) <= 0.5, events
    assert 0.5 * 50 <= trial["flows"][0]["mean_mbps"] <= 1.02 * 50, trial["flows"][0]
    leftovers = [p for p in (trial_dir / "raw" / "work").rglob("*.dat")]
    assert leftovers == [], leftovers
