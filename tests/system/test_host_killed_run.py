"""The controller killed with SIGKILL mid-trial on the real SSH lab of namespace "hosts"
(tests/support/hosts_lab.py): no teardown runs, so `longhaul clean` must end every process the
run started on every host and put back every sysctl, qdisc, offload and delay-line rule it
changed. Processes are found two ways, not by name: the run's own process journal (each pid with
its start time) and a process-tree diff of each host (everything but its init and sshd)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hosts_lab import HOSTS, PROFILE, host_state
from lab_support import journal_of, run_tag
from ssh_lab import host_leftovers

from longhaul.hardware import run_marker
from longhaul.hardware.backends.ssh.undo import SUFFIX, read
from longhaul.hardware.executors.process import start_ticks, wait_until
from longhaul.hardware.tcp_mem import TCP_MEM

pytestmark = pytest.mark.lab


def _on_hosts(lab) -> dict[str, list[str]]:
    return {h: found for h in HOSTS if (found := host_leftovers(lab.ns[h], lab.sshds[h]))}


def test_sigkill_mid_trial_then_clean_ends_every_process_and_restores_every_host(real_lab, tmp_path):  # noqa: F811
    config = real_lab.config(tmp_path, PROFILE.replace("duration_s = 5", "duration_s = 40"))
    config.write_text(config.read_text().replace("attempts = 6", "enabled = false\nattempts = 6"))
    before, tcp_mem = host_state(real_lab.ns), TCP_MEM.read_text()
    assert _on_hosts(real_lab) == {}
    run = subprocess.Popen(real_lab.argv(config), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        def flowing() -> bool:        # the trial's flow under way: a second of tcp_info samples
            assert run.poll() is None, "the run ended before it could be killed"
            found = list((tmp_path / "runs").glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))
            return bool(found) and len(found[0].read_text().splitlines()) >= 10
        wait_until(flowing, 120, interval=0.2, what="the trial's flow")
        tag, journal = run_tag(run.pid), journal_of(run.pid)
        during = _on_hosts(real_lab)
        changed = host_state(real_lab.ns)
        os.kill(run.pid, signal.SIGKILL)               # the controller only: its ssh clients live on
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    # the kill caught the run with its programs on the hosts and the hosts changed
    assert {"S1", "D1"} <= set(during), during
    assert changed != before
    assert [u.host for u in read(run_marker.STATE_DIR / f"{tag}{SUFFIX}")[1]], "no undo journaled"
    assert any(start_ticks(pid) == start for pid, start in journal), "the journal's processes were gone already"

    cleaned = subprocess.run(["ip", "netns", "exec", real_lab.controller, sys.executable, "-m",
                              "longhaul.appliance.cli", "clean"], capture_output=True, text=True, timeout=180)
    print(cleaned.stdout, cleaned.stderr[-2000:])
    assert cleaned.returncode == 0, cleaned.stderr[-3000:]
    assert "ended without its teardown" in cleaned.stdout and "could not" not in cleaned.stdout
    assert "ssh connection" in cleaned.stdout         # its shared connections, which hold sessions on the hosts
    assert [pid for pid, start in journal if start_ticks(pid) == start] == []        # by the journal
    real_lab.assert_as_found(before)           # by each host's process tree; sysctls, qdiscs, rules, offloads
    assert TCP_MEM.read_text() == tcp_mem
    assert not (run_marker.STATE_DIR / f"{tag}{SUFFIX}").exists()
    again = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "clean", "--dry-run"],
                           capture_output=True, text=True, timeout=60)
    assert tag not in again.stdout, again.stdout
    assert list(Path(tmp_path / "runs").glob("*/cells/*/trial-1/raw/tcpinfo-S1.jsonl"))  # its partial results kept
