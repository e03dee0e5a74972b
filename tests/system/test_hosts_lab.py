"""The ssh lab backend (hardware/backends/ssh/lab.py) in use: a real `longhaul run` against a "real
lab" of namespaces wired as a facility would (its plans without a lab: tests/hardware/test_hosts_plan.py).

The real lab: S1, R1, R2, D1 are namespaces with addresses and routes already set on 10.204.x.0/24
test networks (veths, no shaping), each running its own sshd in its own pid namespace
(tests/support/ssh_lab.py); a controller namespace lhhl-<pid>-c reaches them over a management bridge on
10.205.0.0/24. longhaul runs inside the controller namespace, so everything it does to the hosts
goes through SSH, as it would to real machines.
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
from hosts_lab import PROFILE, host_state
from lab_support import our_bpf_ccas

from longhaul.hardware import bpf_ccas
from longhaul.hardware.backends.ssh.bpf_holds import BpfHolds
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import NetnsExecutor, ProcessTable, wait_until

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "hardware" / "example-inventory.toml"


@pytest.mark.lab
def test_longhaul_run_over_ssh_leaves_the_hosts_as_found(real_lab, tmp_path):
    config = real_lab.config(tmp_path)
    before = host_state(real_lab.ns)
    res = subprocess.run(real_lab.argv(config), cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         check=False)
    print(res.stdout[-3000:], res.stderr[-5000:], file=sys.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    (cell,) = summary["cells"]
    lab = cell["lab"]
    assert lab["ok"], lab
    assert abs(lab["rtt_ms"]["measured"] - 20) <= lab["tolerance"]["rtt_ms"]
    assert abs(lab["rate_mbps"]["measured"] - 20) <= lab["tolerance"]["rate_mbps"]
    (trial,) = cell["trials"]
    assert trial["status"] == "ok", trial
    (flow,) = trial["flows"]
    assert flow["cca"] == "cubic" and 14 <= flow["mean_mbps"] <= 21, flow
    rows = (run_dir / "cells" / cell["id"] / "trial-1" / "throughput.csv").read_text().splitlines()
    per_second = [float(r.split(",")[3]) for r in rows[1:] if ",fg,all," in r]
    assert len(per_second) >= 4 and sorted(per_second)[len(per_second) // 2] > 14, per_second
    assert trial["rtt"]["median_ms"] >= 19

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "ssh" and manifest["features"]["inventory"] == str(real_lab.inventory)
    (record,) = manifest["host_tuning"]
    assert record["restored"] is True and record["backend"] == "ssh", record
    assert record["hosts"]["S1"]["sysctl"]["applied"]["net.ipv4.tcp_no_metrics_save"] == "1"
    assert record["hosts"]["R2"]["sysctl"]["before"] == {"net.ipv4.ip_forward": "0"}
    assert record["hosts"]["R2"]["sysctl"]["after"] == {"net.ipv4.ip_forward": "0"}
    assert record["hosts"]["R1"]["qdisc"]["before"] == {"kind": "noqueue", "handle": "0:"}
    assert record["delay"] == {"R1": "delayline", "R2": "delayline"}     # no netem in this kernel
    for host, ifname in (("S1", "eth0"), ("R1", "s1"), ("R1", "wan"), ("R2", "wan"), ("R2", "d1"), ("D1", "eth0")):
        seen = record["hosts"][host]["offloads"][ifname]
        assert seen == {"before": {"gro": False, "tso": True}, "applied": {"gro": True, "tso": False},
                        "after": {"gro": False, "tso": True}}, (host, ifname, seen)
    real_lab.assert_as_found(before)


@pytest.mark.lab
def test_sigint_during_a_trial_leaves_the_hosts_as_found(real_lab, tmp_path):
    config = real_lab.config(tmp_path, PROFILE.replace("duration_s = 5", "duration_s = 30"))
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6"))
    before = host_state(real_lab.ns)
    proc = subprocess.Popen(real_lab.argv(config), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is not None or any((tmp_path / "runs").glob("*/cells/*/trial-1/raw/fg-b0.out")),
                   120, interval=0.2, what="the trial to start")
        time.sleep(3.0)                                   # shaped, delay lines and iperf3 running
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print(err[-3000:], file=sys.stderr)
    assert proc.returncode == 1, err[-3000:]
    (summary_path,) = (tmp_path / "runs").glob("*/summary.json")
    assert json.loads(summary_path.read_text())["status"] == "interrupted"
    manifest = json.loads((summary_path.parent / "manifest.json").read_text())
    assert manifest["host_tuning"][0]["restored"] is True
    real_lab.assert_as_found(before)


EVERY_TOOL = """
[profile]
description = "every traffic tool but TRex, one short cell each, over SSH"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 20
rtt_ms = 20
queue = "1MB"          # UDT starts by blasting and needs room at the bottleneck (test_lab_tools)
[[flows]]
name = "gf"
role = "foreground"
tool = "gridftp"
cca = "cubic"
streams = 2
duration_s = 6
[[flows]]
name = "pu"
role = "background"
tool = "paced-udp"
udp_rate_mbps = 10
duration_s = 6
[[flows]]
name = "dp"
role = "background"
tool = "dpdk"
duration_s = 5
[[flows]]
name = "nfs"
role = "foreground"
tool = "nfs"
cca = "cubic"
clients = 2
file_bytes = 5000000
duration_s = 6
[[flows]]
name = "udt"
role = "foreground"
tool = "udt"
duration_s = 6
""" + "".join(f'[[scenarios]]\nname = "{n}"\nflows = ["{n}"]\n' for n in ("gf", "pu", "dp", "nfs", "udt"))


@pytest.mark.lab
def test_every_tool_runs_over_ssh_within_what_the_bottleneck_carries(real_lab, tmp_path):
    """Each driver's servers, clients, files and stops through the SSH executor (iperf3 is the run
    test's above): per-second throughput from the store, never above the 20 Mb/s shaper."""
    config = real_lab.config(tmp_path, EVERY_TOOL)
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6"))
    before = host_state(real_lab.ns)
    res = subprocess.run(real_lab.argv(config), cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         check=False)
    print(res.stderr[-5000:], file=sys.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    cells = {c["trials"][0]["flows"][0]["name"]: c for c in json.loads((run_dir / "summary.json").read_text())["cells"]}
    assert sorted(cells) == ["dp", "gf", "nfs", "pu", "udt"]
    floor = {"gf": 0.5, "pu": 0.45, "dp": 0.8, "nfs": 0.4, "udt": 0.25}    # of 20 Mb/s: what each must move
    for name, cell in cells.items():
        (trial,) = cell["trials"]
        assert trial["status"] == "ok", (name, trial.get("error"))
        rows = (run_dir / "cells" / cell["id"] / "trial-1" / "throughput.csv").read_text().splitlines()[1:]
        per_second = [float(r.split(",")[3]) for r in rows if f",{name},all," in r]
        print(name, per_second)
        assert len(per_second) >= 4, (name, per_second)
        # the wire's ceiling; not yet for UDT, whose seconds are what its receiver released in
        # order, in a burst once a loss is repaired (36 Mb/s in a last half second seen here)
        assert name == "udt" or max(per_second) <= 20 * 1.05, (name, per_second)
        assert trial["flows"][0]["mean_mbps"] >= floor[name] * 20, (name, trial["flows"][0])
    assert cells["gf"]["trials"][0]["flows"][0]["observed_cca"] == ["cubic"]
    real_lab.assert_as_found(before)


BPF_TWO = """
[profile]
description = "a fractional-Reno flow named by the profile, then H-TCP where the hosts lack it"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 20
rtt_ms = 20
queue = "1bdp"
[tuning]
cca = ["lh_frac10", "htcp"]
cca_fallback = "bpf"
[[flows]]
name = "fg"
role = "foreground"
duration_s = 5
"""


@pytest.mark.lab
@pytest.mark.skipif(bpf_ccas.unavailable_reason() is not None or not all(
    bpf_ccas.BPF_CCAS[n].object.is_file() for n in ("lh_frac10", "lh_htcp")),
    reason=f"no BPF congestion control here: {bpf_ccas.missing_reason('lh_htcp')}")
def test_bpf_ccas_named_or_standing_in_are_held_on_the_ssh_hosts_for_the_run_and_gone_after(real_lab, tmp_path):
    """The hosts here are namespaces of this machine's one kernel, which has no H-TCP and cannot
    load it: the preflight finds S1 lacking it and both ends able to run lh_htcp, so the cell that
    allows it runs lh_htcp (cca_fallback), beside one naming lh_frac10. S1's holder registers both,
    D1's finds them there and registers nothing; the flows' sockets run them; the run's end
    unregisters them."""
    ours = ("lh_frac10", "lh_htcp")
    assert not set(ours) & set(our_bpf_ccas())
    config = real_lab.config(tmp_path, BPF_TWO)
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6"))
    before = host_state(real_lab.ns)
    res = subprocess.run(real_lab.argv(config), cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    print(res.stdout[-3000:], res.stderr[-5000:], file=sys.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    frac, htcp = json.loads((run_dir / "summary.json").read_text())["cells"]
    assert "cca_stand_ins" not in frac["labels"] and htcp["labels"]["cca_stand_ins"] == {"htcp": "lh_htcp"}
    for cell, cca in ((frac, "lh_frac10"), (htcp, "lh_htcp")):
        (flow,) = cell["trials"][0]["flows"]
        assert flow["cca"] == cca and flow["observed_cca"] == [cca], flow
        assert 5 <= flow["mean_mbps"] <= 21, flow
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["features"]["stand_ins"] == {"htcp": "lh_htcp"}
    assert manifest["features"]["hosts"]["S1"]["lacks"] == ["htcp"]
    (record,) = manifest["host_tuning"]                     # one lab: the second cell retuned it
    held = record["bpf_ccas"]
    assert held["S1"]["registered"] == list(ours) and held["D1"] == {"registered": [], "present": list(ours),
                                                                      "sha256": {}}, held
    assert all(held["S1"]["sha256"][n] == bpf_ccas.BPF_CCAS[n].sha256() for n in ours)
    assert not set(ours) & set(our_bpf_ccas())
    real_lab.assert_as_found(before)


@pytest.mark.lab
@pytest.mark.skipif(bpf_ccas.unavailable_reason() is not None or not bpf_ccas.BPF_CCAS["lh_frac100"].object.is_file(),
                    reason=f"no BPF congestion control here: {bpf_ccas.missing_reason('lh_frac100')}")
def test_a_holder_whose_ssh_session_dies_unregisters_what_it_held(real_lab, tmp_path):
    """A controller killed mid-run cannot unregister anything: its SSH clients die with it, the
    hosts' watchers end the holder, and the holder unregisters."""
    assert "lh_frac100" not in our_bpf_ccas()
    via = NetnsExecutor("controller", real_lab.controller, ProcessTable())
    executor = load_inventory(real_lab.inventory).executor("S1", ProcessTable(), via=via)
    holds = BpfHolds(("lh_frac100",))
    try:
        holds.ensure({"S1": executor}, tmp_path)
        assert holds.held["S1"]["registered"] == ["lh_frac100"] and "lh_frac100" in our_bpf_ccas()
        (proc,) = holds._procs.values()
        os.kill(proc.pid, signal.SIGKILL)                # the local ssh client, as a SIGKILL of its run kills it
        wait_until(lambda: "lh_frac100" not in our_bpf_ccas(), 20, interval=0.1, what="the holder to unregister")
    finally:
        holds.close()
        if "lh_frac100" in our_bpf_ccas():
            bpf_ccas.unregister("lh_frac100")
