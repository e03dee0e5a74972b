"""`longhaul clean`: removes what dead longhaul runs left, keeps what live runs own."""

from __future__ import annotations

import subprocess

import pytest
from lab_support import requires_lab

from longhaul.hardware import run_marker
from longhaul.hardware.backends.registry import leftovers
from longhaul.hardware.executors.process import wait_until
from longhaul.hardware.namespaces import NETNS_ETC, list_namespaces, namespace_pids

pytestmark = [pytest.mark.lab, requires_lab]


def test_clean_removes_dead_runs_only(tmp_path):
    dead, alive = "lh-fffff01-S1", "lh-fffff11-R1"
    live_tag = "fffff1"
    for name in (dead, alive):
        subprocess.run(["ip", "netns", "add", name], check=True)
        (NETNS_ETC / name).mkdir(parents=True, exist_ok=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", dead, "sleep", "300"], start_new_session=True)
    wait_until(lambda: sleeper.pid in namespace_pids(dead), timeout=10, what="sleeper inside the namespace")
    run_marker.register(live_tag, tmp_path)          # this test process is the live run
    try:
        assert dead in leftovers(remove=False) and alive not in leftovers(remove=False)
        removed = leftovers(remove=True)
        assert dead in removed and alive not in removed
        assert dead not in list_namespaces() and not (NETNS_ETC / dead).exists()
        assert alive in list_namespaces()
        assert sleeper.wait(timeout=10) is not None      # the process inside was ended by pid
    finally:
        run_marker.unregister(live_tag)
        if sleeper.poll() is None:
            sleeper.kill()
        for name in (dead, alive):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            subprocess.run(["rm", "-rf", str(NETNS_ETC / name)])


def test_clean_removes_a_dead_runs_vm_fleet():
    """A qemu lab lives in lh-q<pid> (its qemus inside): stale once that pid is gone."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = f"lh-q{dead.pid}", f"lh-q{__import__('os').getpid()}"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        found = leftovers(remove=False)                 # the qemu backend's own
        assert stale in found and live not in found
        assert stale in leftovers(remove=True) and stale not in list_namespaces()
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
