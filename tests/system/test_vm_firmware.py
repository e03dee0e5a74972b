"""The appliance image boots by UEFI with Secure Boot and by plain UEFI (the qemu lab's
`firmware`), to its first-boot ready marker, which says how it booted as the booted kernel sees it
(not as the VM was asked to boot); under Secure Boot, longhaul-boot-kernel switches the default
kernel and the VM reboots into it, still under Secure Boot (both of the image's kernels are
Debian's signed ones). One VM each, beside the suite's fleets, which cover the other paths: the
smoke fleet netboots (BIOS and iPXE) and the OPS fleet's disks boot by legacy BIOS
(tests/system/test_qemu_lab.py checks what their VMs report)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from lab_support import our_namespaces

from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import fleet as qf
from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.backends.qemu.firmware import FIRMWARE
from longhaul.hardware.executors.process import ProcessTable

IMAGE = REPO / "build" / "image"
pytestmark = [pytest.mark.lab, pytest.mark.vm]


def _skip(firmware: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a namespace and TAPs for the VM)")
    if not (IMAGE / "longhaul.raw").is_file():
        why = f"no appliance image in {IMAGE} (make image builds it; make test does it first)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    if FIRMWARE[firmware].missing():
        pytest.skip(FIRMWARE[firmware].missing())


def _one_vm(tmp_path: Path, firmware: str, tag: str) -> qf.VmFleet:
    """A fleet of one VM (R1) booted with `firmware`."""
    shown = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout
    plan = qp.fleet_plan(tag, qp.free_index(os.getpid(), shown), 1, ns=f"lh-{tag}")
    plan = replace(plan, vms=(plan.vm("R1"),))
    return qf.VmFleet(plan, IMAGE, tmp_path / "fleet", ProcessTable(), firmware=firmware, boot_timeout_s=600)


def _ssh(fleet: qf.VmFleet, command: str) -> subprocess.CompletedProcess:
    vm = fleet.plan.vm("R1")
    return subprocess.run(["ssh", "-i", str(fleet.workdir / "controller_ed25519"), "-o", "BatchMode=yes",
                           "-o", f"UserKnownHostsFile={fleet.workdir / 'known_hosts'}", "-o", "ConnectTimeout=20",
                           f"root@{vm.mgmt}", command], capture_output=True, text=True, timeout=120)


def test_under_secure_boot_the_image_boots_and_switches_its_kernel(tmp_path):
    _skip("uefi-secureboot")
    fleet = _one_vm(tmp_path, "uefi-secureboot", "lhfws")
    try:
        fleet.boot()
        first = fleet.firstboot["R1"]
        assert (first["firmware"], first["secure_boot"]) == ("uefi", True), first
        assert "secure boot enabled" in _ssh(fleet, "dmesg | grep -i 'secure boot'").stdout.lower()  # the kernel's word
        kernels = fleet.image_manifest["kernels"]
        assert first["kernel"] == kernels[-1]                       # the newest is the default
        older = kernels[0]
        switched = _ssh(fleet, f"longhaul-boot-kernel {older} && longhaul-boot-kernel --list")
        assert switched.returncode == 0, switched.stderr
        assert f"{older} default" in switched.stdout and f"{kernels[-1]} running" in switched.stdout
        _ssh(fleet, "systemctl reboot")                            # qemu stops: it runs with -no-reboot
        fleet.relaunch("R1")
        again = fleet.firstboot["R1"]
        print(fleet.boot_seconds, first, again)
        assert (again["kernel"], again["firmware"], again["secure_boot"]) == (older, "uefi", True), again
    finally:
        assert fleet.close() == []
    assert fleet.plan.ns not in our_namespaces()


def test_by_plain_uefi_the_image_boots_with_secure_boot_off(tmp_path):
    """UEFI without Secure Boot, as on a lab server whose owner turned it off: the same shim and
    GRUB path from the EFI system partition, to the ready marker, which reads the firmware as UEFI
    and Secure Boot as off from the booted kernel."""
    _skip("uefi")
    fleet = _one_vm(tmp_path, "uefi", "lhfwu")
    try:
        fleet.boot()
        first = fleet.firstboot["R1"]
        print(fleet.boot_seconds, first)
        assert (first["firmware"], first["secure_boot"]) == ("uefi", False), first
        assert first["kernel"] == fleet.image_manifest["kernels"][-1]
    finally:
        assert fleet.close() == []
    assert fleet.plan.ns not in our_namespaces()
