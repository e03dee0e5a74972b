"""A lab host lost mid-trial, on the real SSH lab of namespace "hosts" (tests/system/test_hosts_lab.py):
the sender is cut from every network while its flow runs, or frozen (SIGSTOP of every process in
its namespace, its sshd included: a paused VM, as far as the network can tell; its kernel still
answers TCP). The trial fails within a bounded time
naming the host, the run stops ([run] on_host_failure's default), every other host is restored as
found, and once the sender is back `longhaul run --resume` finishes the run."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from hosts_lab import HOSTS, PROFILE, ROUTES, RealLab, host_state

from longhaul.hardware.executors.process import wait_until

pytestmark = pytest.mark.lab


def _links(lab: RealLab, host: str, state: str) -> None:
    """Every link of the host down, or up again with its routes (a link that goes down takes the
    routes through it along; the host's own configuration restores them, as a boot would)."""
    for ifname in ["mgmt0", *(i for i, _ in HOSTS[host][1])]:
        subprocess.run(["ip", "-n", lab.ns[host], "link", "set", ifname, state], check=True)
    if state == "up":
        for _, dest, via in (r for r in ROUTES if r[0] == host):
            subprocess.run(["ip", "-n", lab.ns[host], "route", "replace", dest, "via", via], check=True)


def _freeze(lab: RealLab, host: str, state: str) -> None:
    """Every process of the host stopped (SIGSTOP) or continued (SIGCONT)."""
    pids = subprocess.run(["ip", "netns", "pids", lab.ns[host]], capture_output=True, text=True).stdout.split()
    assert pids, f"no process in {host}'s namespace"
    subprocess.run(["kill", "-STOP" if state == "down" else "-CONT", *pids], check=True)


FAULTS = {"cut": _links, "frozen": _freeze}     # fault(lab, host, "down" | "up")


# a lab of namespaces answers in milliseconds: checks every 2 s, each given 3 s, lost after two
# misses (within 2 x (2 + 3) s) instead of the default's 26 s, so the flows need not outlast that
HOST_CHECK = 'profiles = ["hl"]\nhost_check = { period_s = 2, timeout_s = 3, misses = 2 }'


def _others(state: dict, lost: str) -> dict:
    return {k: v for k, v in state.items() if k.split(":")[0] != lost}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_sender_lost_mid_trial_is_named_the_rest_restored_and_resume_finishes(real_lab, tmp_path, fault):  # noqa: F811
    config = real_lab.config(tmp_path, PROFILE.replace("duration_s = 5", "duration_s = 30"))
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6")
                      .replace('profiles = ["hl"]', HOST_CHECK))
    before = host_state(real_lab.ns)
    proc = subprocess.Popen(real_lab.argv(config), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_until(lambda: bool(list((tmp_path / "runs").glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))),
                   120, interval=0.2, what="the trial's flow")
        time.sleep(3.0)                                  # the flow is well under way
        cut = time.monotonic()
        FAULTS[fault](real_lab, "S1", "down")            # powered off or paused, as far as anyone can tell
        out, err = proc.communicate(timeout=180)
        took = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
        FAULTS[fault](real_lab, "S1", "up")
    print(err[-3000:], file=sys.stderr)
    assert proc.returncode == 1, err[-3000:]
    assert took < 20, took            # lost within 2 x (2 + 3) s, the rest torn down: not the flow's 27 s left
    assert "S1 (S1) lost in trial 1" in err and "--resume" in err, err[-2000:]
    (run_dir,) = (p.parent for p in (tmp_path / "runs").glob("*/manifest.json"))   # a failed run prints none
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    (trial,) = summary["cells"][0]["trials"]
    assert trial["status"] == "failed" and trial["lost_hosts"] == ["S1"], trial
    assert "S1: no answer over SSH" in trial["error"], trial["error"]
    (record,) = json.loads((run_dir / "manifest.json").read_text())["host_tuning"]
    assert record["restored"] is False and "lost" in record["hosts"]["S1"], record
    assert [p for p in record["not_restored"] if not p.startswith("S1 (S1): lost")] == [], record["not_restored"]
    assert _others(host_state(real_lab.ns), "S1") == _others(before, "S1")      # R1, R2, D1 as found

    wait_until(lambda: subprocess.run(["ip", "netns", "exec", real_lab.controller, "fping", "-q", "-c1", "-t500",
                                       HOSTS["S1"][0]], capture_output=True).returncode == 0, 30, what="S1 back")
    resumed = subprocess.run([*real_lab.argv(config)[:-2], "--resume", str(run_dir)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and [t["status"] for t in summary["cells"][0]["trials"]] == ["ok"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["host_tuning"][-1]["restored"] is True


def test_on_host_failure_continue_finishes_the_other_cells_and_clean_restores_the_lost_host(real_lab, tmp_path):  # noqa: F811
    """[run] on_host_failure = "continue": the lost sender's cell is marked, the run goes on to the
    next cell once the sender is back, and the lost host, whose teardown could not reach it, is put
    back by `longhaul clean` from the run's undo journal (hardware/backends/ssh/undo.py)."""
    profile = PROFILE.replace("duration_s = 5", "duration_s = 12").replace("rtt_ms = 20", "rtt_ms = [20, 30]")
    config = real_lab.config(tmp_path, profile)
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6")
                      .replace('profiles = ["hl"]', HOST_CHECK + '\non_host_failure = "continue"'))
    before = host_state(real_lab.ns)
    proc = subprocess.Popen(real_lab.argv(config), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)

    def first_cell() -> list[dict]:
        found = list((tmp_path / "runs").glob("*/summary.json"))
        cells = json.loads(found[0].read_text())["cells"] if found else []
        return cells[0]["trials"] if cells and cells[0].get("status") == "failed" else []
    try:
        wait_until(lambda: bool(list((tmp_path / "runs").glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))),
                   120, interval=0.2, what="the first cell's flow")
        _links(real_lab, "S1", "down")
        try:
            wait_until(lambda: bool(first_cell()), 60, interval=0.2, what="the first cell marked failed")
        finally:
            _links(real_lab, "S1", "up")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(err[-3000:], file=sys.stderr)
    assert proc.returncode == 1, err[-3000:]                       # a failed cell: the run is not complete
    assert "S1 (S1) lost in trial 1" in err and "the run goes on" in err, err[-2000:]
    (run_dir,) = (p.parent for p in (tmp_path / "runs").glob("*/manifest.json"))
    summary = json.loads((run_dir / "summary.json").read_text())
    lost, other = summary["cells"]
    assert lost["status"] == "failed" and lost["trials"][0]["lost_hosts"] == ["S1"], lost
    assert other["status"] == "complete" and [t["status"] for t in other["trials"]] == ["ok"], other
    records = json.loads((run_dir / "manifest.json").read_text())["host_tuning"]
    assert [r["restored"] for r in records] == [False, True], records

    # the sender came back as the first lab left it; `longhaul clean` puts it back as found
    cleaned = subprocess.run(["ip", "netns", "exec", real_lab.controller, sys.executable, "-m",
                              "longhaul.appliance.cli", "clean"], capture_output=True, text=True, timeout=180)
    print(cleaned.stdout, cleaned.stderr[-2000:])
    assert cleaned.returncode == 0 and "S1 (S1): restore sysctls" in cleaned.stdout, cleaned.stdout + cleaned.stderr
    assert "could not" not in cleaned.stdout, cleaned.stdout
    real_lab.assert_as_found(before)

    resumed = subprocess.run([*real_lab.argv(config)[:-2], "--resume", str(run_dir)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [c["status"] for c in summary["cells"]] == ["complete", "complete"]
    real_lab.assert_as_found(before)
