"""Lab hosts that fail mid-trial, on VMs (and the controller killed mid-trial, then `longhaul
clean`): a sender powered off (its qemu killed: a power cut), then, in
the resumed run, a router's management link cut. Each time the trial fails within a bounded time
naming the host, the run stops ([run] on_host_failure's default) with every other host restored as
found, and `longhaul run --resume` goes on, on a fleet of its own (a qemu lab's hosts are back when
it boots them again), until the run is complete.

Four fleets boot (about 4 minutes each under TCG here), so CI, whose budget the suite's own VM
fleets already fill, runs this only with LONGHAUL_VM_FAULT_TESTS=1; the same failure on the SSH
hosts lab runs every time (tests/system/test_host_failure.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ci_summary import opt_in
from lab_support import TCG_VERIFY, our_namespaces, write_lab_config

from longhaul.core.paths import REPO
from longhaul.hardware.executors.process import start_ticks, wait_until
from longhaul.hardware.run_marker import STATE_DIR, live_markers
from longhaul.hardware.tcp_mem import TCP_MEM

IMAGE = REPO / "build" / "image"
pytestmark = [pytest.mark.lab, pytest.mark.vm,
              opt_in("LONGHAUL_VM_FAULT_TESTS", "boots four VM fleets, ~20 min under TCG"),
              pytest.mark.skipif(not (IMAGE / "filesystem.squashfs").is_file(), reason="no image (make image)")]

PROFILE = """
[profile]
description = "one long iperf3 flow on the VMs, for a host to fail under"
repeats = 1

[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 10
rtt_ms = 20
queue = "50KB"

[tuning]
cca = "cubic"

[[flows]]
name = "fg"
role = "foreground"
duration_s = 40
"""


def _argv(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config), *extra]


def _journaled(label: str) -> int:
    """The pid of a live process a run journaled (hardware/run_marker.py), by its label."""
    for journal in STATE_DIR.glob("*.pids"):
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if entry["label"] == label and Path(f"/proc/{entry['pid']}").exists():
                return entry["pid"]
    raise LookupError(label)


def _fail_mid_trial(proc: subprocess.Popen, runs: Path, trial_marker: str, fail) -> tuple[str, float, float]:
    """Wait for the trial's flow, fail a host; (stderr, seconds from the failure to the run's
    verdict in run.log, seconds to the run's exit, its fleet torn down)."""
    try:
        wait_until(lambda: bool(list(runs.glob(trial_marker))) or proc.poll() is not None, 900, interval=0.5,
                   what="the trial's flow")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(3.0)                                   # the flow is well under way
        cut, cut_wall = time.monotonic(), time.time()
        fail()
        _, err = proc.communicate(timeout=300)
        exited = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
    (log,) = runs.glob("*/run.log")
    verdict = next(line for line in log.read_text().splitlines()[::-1] if "run failed:" in line)
    stamp = time.mktime(time.strptime(verdict[:19], "%Y-%m-%d %H:%M:%S")) + int(verdict[20:23]) / 1e3
    return err, stamp - cut_wall, exited


def _lost_and_restored(run_dir: Path, host: str, err: str) -> None:
    assert f"{host} ({host}) lost in trial 1" in err and "--resume" in err, err[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    trial = summary["cells"][0]["trials"][-1]
    assert trial["status"] == "failed" and trial["lost_hosts"] == [host], trial
    record = json.loads((run_dir / "manifest.json").read_text())["host_tuning"][-1]
    assert record["restored"] is False and "lost" in record["hosts"][host], record
    # every other VM was restored as found (its sysctls, offloads and the routers' qdiscs)
    assert [p for p in record["not_restored"] if not p.startswith(f"{host} ({host}): lost")] == [], record


def test_a_sender_powered_off_and_a_router_cut_off_are_named_and_resume_finishes(tmp_path):
    config = write_lab_config(tmp_path, PROFILE, "vm-fault", verify=TCG_VERIFY)
    config.write_text(config.read_text() + f'\n[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{IMAGE}"\nboot = "network"\n')
    runs, marker = tmp_path / "runs", "*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"

    first = subprocess.Popen(_argv(config), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    err, named, exited = _fail_mid_trial(first, runs, marker,
                                         lambda: os.kill(_journaled("qemu S1"), signal.SIGKILL))   # power cut
    print(f"S1 powered off: the run named it after {named:.1f} s and exited after {exited:.1f} s", file=sys.stderr)
    print(err[-3000:], file=sys.stderr)
    # named within 2 x (5 + 8) s of the host watch (or at the flow's broken session and one settle,
    # 2 x 8 s), the lab's other hosts restored; the fleet's four VMs then stop
    assert first.returncode == 1 and named < 45 and exited < 150, (named, exited, err[-3000:])
    (run_dir,) = (p.parent for p in runs.glob("*/manifest.json"))
    _lost_and_restored(run_dir, "S1", err)
    assert not [n for n in our_namespaces() if n.startswith("lh-q")]        # the fleet is gone

    for old in run_dir.glob("cells/*/trial-1"):        # the next attempt's marker is its own
        (old / "raw" / "tcpinfo-S1.jsonl").rename(old / "raw" / "tcpinfo-S1.first.jsonl")
    second = subprocess.Popen(_argv(config, "--resume", str(run_dir)), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    # R1's management TAP in the fleet's namespace: fleet_plan names it lq<pid>m1
    err, named, exited = _fail_mid_trial(second, runs, marker, lambda: subprocess.run(
        ["ip", "-n", f"lh-q{second.pid}", "link", "set", f"lq{second.pid}m1", "down"], check=True))
    print(f"R1 cut off: the run named it after {named:.1f} s and exited after {exited:.1f} s", file=sys.stderr)
    print(err[-3000:], file=sys.stderr)
    assert second.returncode == 1 and named < 45 and exited < 150, (named, exited, err[-3000:])
    _lost_and_restored(run_dir, "R1", err)

    third = subprocess.run(_argv(config, "--resume", str(run_dir)), cwd=tmp_path, capture_output=True, text=True,
                           timeout=1200)
    assert third.returncode == 0, third.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["cells"][0]["trials"][-1]["status"] == "ok", summary["cells"]
    assert json.loads((run_dir / "manifest.json").read_text())["host_tuning"][-1]["restored"] is True
    assert not (run_dir / "runs").exists()              # a resumed run makes no store inside its run
    assert not [n for n in our_namespaces() if n.startswith("lh-q")]


def test_the_controller_killed_mid_trial_then_clean_leaves_no_vm_namespace_or_process(tmp_path):
    """SIGKILL of the run itself (no teardown runs) while the VMs carry a flow: `longhaul clean`
    ends every process of its journal (the qemus, their ssh clients and shared connections) and
    removes the fleet's namespace; this machine's TCP memory is as found."""
    config = write_lab_config(tmp_path, PROFILE, "vm-kill", verify=TCG_VERIFY)
    config.write_text(config.read_text() + f'\n[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{IMAGE}"\nboot = "network"\n')
    runs, tcp_mem = tmp_path / "runs", TCP_MEM.read_text()
    run = subprocess.Popen(_argv(config), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        wait_until(lambda: bool(list(runs.glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))) or run.poll() is not None,
                   900, interval=0.5, what="the trial's flow")
        assert run.poll() is None, "the run ended before it could be killed"
        (tag,) = [m.tag for m in live_markers() if m.pid == run.pid]
        journal = [json.loads(line) for line in (STATE_DIR / f"{tag}.pids").read_text().splitlines()]
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    started = [(e["pid"], e["start"], e["label"]) for e in journal if e.get("start") is not None]
    assert {"qemu S1", "qemu D1", "qemu R1", "qemu R2"} <= {label for _, _, label in started}, started
    assert [n for n in our_namespaces() if n == f"lh-q{run.pid}"]            # the fleet outlived its run

    cleaned = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "clean"], capture_output=True,
                             text=True, timeout=300)
    print(cleaned.stdout, cleaned.stderr[-2000:], file=sys.stderr)
    assert cleaned.returncode == 0, cleaned.stderr[-3000:]
    assert [(pid, label) for pid, start, label in started if start_ticks(pid) == start] == []
    assert not [n for n in our_namespaces() if n.startswith("lh-q")]
    assert not list(Path("/tmp").glob(f"lh-ssh-{run.pid}-*"))
    assert TCP_MEM.read_text() == tcp_mem
    assert list(runs.glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))        # its partial results kept
