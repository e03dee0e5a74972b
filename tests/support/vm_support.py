"""Running a longhaul command that boots a TCG fleet, on a host that may be too slow for it now.

The fleet's boot is this machine's speed test: its manifest records the boot pace (seconds of a core
per VM boot, hardware/backends/qemu/fleet.py: boot_pace). Above SLOW_TCG_BOOT_S_PER_VM_CORE the host
is slow or oversubscribed (a hypervisor taking its CPU), and every lab of such a fleet was refused by
verification. Then the command is interrupted as an operator would (SIGINT), the test asserts that
nothing of it is left, and skips with the measured pace as its reason: the traffic the test would
judge cannot be emulated here now. On a host at its usual speed the command runs to its end."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from longhaul.collectors.store.format import MANIFEST, StoreError
from longhaul.collectors.store.reader import load_store
from longhaul.hardware.backends.qemu.fleet import SLOW_TCG_BOOT_S_PER_VM_CORE, TCG_BOOT_S_PER_VM_CORE, too_slow


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _vm_lab(runs_dir: Path) -> dict | None:
    """The run's `vm_lab` features, through the store's reader, once its manifest is there."""
    for manifest in runs_dir.glob(f"*/{MANIFEST}"):
        try:
            return (load_store(manifest.parent).manifest.features or {}).get("vm_lab")
        except StoreError:                 # not readable yet: read it on the next poll
            return None
    return None


def run_on_fleet(argv: list[str], runs_dir: Path, cwd: Path, timeout: float, env: dict | None = None,
                 ) -> subprocess.CompletedProcess:
    """argv's CompletedProcess; pytest.skip once the run's fleet booted too slowly (after the
    interrupted run left nothing behind), pytest.fail if it left something."""
    before = set(namespaces())
    out, err = cwd / f".{runs_dir.name}-stdout", cwd / f".{runs_dir.name}-stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, text=True, cwd=cwd, env=env)
        deadline, pace, slow = time.monotonic() + timeout, None, None
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    proc.send_signal(signal.SIGINT)          # torn down by the run, not left running
                    proc.wait(timeout=600)
                    raise subprocess.TimeoutExpired(argv, timeout)
                vm_lab = _vm_lab(runs_dir) if slow is None else None
                if vm_lab and vm_lab.get("boot_pace_s"):
                    pace = vm_lab["boot_pace_s"]
                    slow = too_slow(vm_lab.get("accel", ""), pace)
                    if slow:
                        proc.send_signal(signal.SIGINT)      # the run's own interrupt path tears down
                        proc.wait(timeout=600)
                        break
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    done = subprocess.CompletedProcess(argv, proc.returncode, out.read_text(), err.read_text())
    if slow:
        left = set(namespaces()) - before
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if left or str(runs_dir) in ps or list(runs_dir.glob(".qemu-*")):
            pytest.fail(f"the interrupted run left {sorted(left)} or its processes or overlays; its end: "
                        f"{done.stderr[-2000:]}")
        pytest.skip(f"this host booted the fleet at {pace:g} s of a core per VM, {pace / TCG_BOOT_S_PER_VM_CORE:.1f}x "
                    f"a TCG fleet's usual {TCG_BOOT_S_PER_VM_CORE:g} (over {SLOW_TCG_BOOT_S_PER_VM_CORE:g}): too slow "
                    "now to emulate the lab the test judges; the run was interrupted and left nothing")
    return done
