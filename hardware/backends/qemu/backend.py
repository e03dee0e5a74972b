"""The appliance image booted as VMs on this machine (S1..Sn, R1, R2, D1..Dn, joined by bridges
in a namespace of the run's own), then driven over SSH exactly as the ssh backend drives hardware,
with real netem on the router VMs (docs/image.md)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field
from rich.table import Table

from longhaul.core.errors import PreflightError, RunError, SettingError
from longhaul.core.model import Strict
from longhaul.hardware import run_marker
from longhaul.hardware.backends.base import LabNeeds, Readiness, RunContext
from longhaul.hardware.backends.qemu import fleet as qemu_fleet
from longhaul.hardware.backends.qemu import plan as qemu_plan
from longhaul.hardware.backends.qemu.firmware import FIRMWARE
from longhaul.hardware.backends.ssh.backend import open_session
from longhaul.hardware.executors.process import LocalExecutor, ProcessTable
from longhaul.hardware.generator import TrexSection, configured_tree
from longhaul.hardware.image_files import MANIFEST, RAW, SQUASHFS, read_manifest
from longhaul.hardware.namespaces import remove_namespace, stale_namespaces
from longhaul.hardware.topology import NS_PREFIX

log = logging.getLogger(__name__)
IMAGE_FILES = (RAW, MANIFEST)
FLEET_NAMESPACE = re.compile(rf"^{re.escape(NS_PREFIX)}q(?P<pid>\d+)$")     # a fleet's, named by its run's pid


class QemuSection(Strict):
    image: str = "build/image"            # the image directory, relative to config.toml
    accel: Literal["auto", "tcg", "kvm"] = "auto"
    memory_mb: int = Field(512, ge=256, le=16384)
    # unset: 420 s, or under TCG more as the VMs per core grow (fleet.boot_timeout)
    boot_timeout_s: float | None = Field(None, gt=0, le=3600)
    # how the VMs boot the image: legacy BIOS, UEFI, or UEFI with Secure Boot (OVMF)
    firmware: Literal[tuple(FIRMWARE)] = "bios"         # type: ignore[valid-type]
    # disk: each VM boots a copy-on-write overlay of the image; network: the VMs have no disk and
    # PXE-boot from `longhaul netboot`'s server on the fleet's management network (hardware/netboot),
    # the root in RAM (memory_mb is raised to hold it)
    boot: Literal["disk", "network"] = "disk"


class QemuSettings(Strict):
    qemu: QemuSection = QemuSection()
    # a TRex release tree on this machine: the fleet gains a generator VM G1 that runs it
    # (hardware/backends/qemu/generator.py)
    trex: TrexSection | None = None


@dataclass(frozen=True)
class QemuConfigured:
    image_dir: Path
    section: QemuSection
    trex: TrexSection | None = None


class QemuBackend:
    name = "qemu"
    settings = QemuSettings
    generator_how = "[lab.trex] path = a TRex release tree on this machine (a generator VM runs it)"

    def configure(self, settings: QemuSettings, config_dir: Path) -> QemuConfigured:
        """The image directory, checked now: no VM is booted from a missing image."""
        found = (config_dir / settings.qemu.image).resolve()
        missing = [f for f in IMAGE_FILES if not (found / f).is_file()]
        if missing:
            raise SettingError(("qemu", "image"), settings.qemu.image,
                               f"an image directory with {' and '.join(missing)} ({found}: build it with `make image`)")
        try:
            manifest = read_manifest(found)
        except (OSError, ValueError) as exc:
            raise SettingError(("qemu", "image"), settings.qemu.image,
                               f"an image directory with a readable {MANIFEST} ({found}: {exc}; make image)") from None
        firmware = settings.qemu.firmware
        boots = manifest.get("firmware", ["bios"])
        if firmware not in boots:       # an image built before it booted by UEFI
            raise SettingError(("qemu", "firmware"), firmware,
                               f"a firmware the image at {found} boots by: {', '.join(boots)} (rebuild it: make image)")
        absent = FIRMWARE[firmware].missing()
        if absent:
            raise SettingError(("qemu", "firmware"), firmware, f"a firmware this machine has: {absent}")
        if settings.qemu.boot == "network":
            why = netboot_unavailable(found, firmware)
            if why:
                raise SettingError(("qemu", "boot"), "network", f"'disk', or 'network' where {why}")
        return QemuConfigured(found, settings.qemu, configured_tree(settings.trex, config_dir))

    def has_generator(self, configured: QemuConfigured) -> bool:
        return configured.trex is not None      # TRex on G1's virtio port, bound to DPDK

    def check(self, configured: QemuConfigured, needs: LabNeeds, console) -> Readiness:
        """The VMs exist only during a run: check what boots them."""
        manifest = read_manifest(configured.image_dir)
        table = Table(title="qemu lab")
        table.add_column("check")
        table.add_column("result")
        qemu = shutil.which("qemu-system-x86_64")
        table.add_row("qemu-system-x86_64", qemu or "[red]missing[/red]")
        try:
            accel, why = qemu_fleet.choose_accel(configured.section.accel)
            table.add_row("acceleration", f"{accel} ({why})")
        except RuntimeError as exc:
            accel = None
            table.add_row("acceleration", f"[red]{exc}[/red]")
        table.add_row("image", f"{configured.image_dir} (built {manifest.get('built')}, "
                               f"revision {manifest.get('revision')})")
        table.add_row("VM kernel", str(manifest.get("kernel")))
        table.add_row("firmware", configured.section.firmware)
        console.print(table)
        return Readiness(bool(qemu and accel))

    def leftovers(self, remove: bool) -> list[str]:
        """Fleet namespaces (`lh-q<pid>`, its bridges and TAPs) of runs no longer running; their
        VMs' qemu processes are the run's journal's, ended before this."""
        stale = stale_namespaces(FLEET_NAMESPACE, run_marker.alive)
        if remove:
            for name in stale:
                remove_namespace(name)
        return stale

    @contextmanager
    def session(self, configured: QemuConfigured, needs: LabNeeds, ctx: RunContext):
        with run_marker.marked(ctx.tag, ctx.run_dir, ctx.procs), _fleet(configured, needs, ctx) as fleet:
            # from here on the VMs are real hosts with an inventory, driven like the ssh backend
            # under TCG the emulated hops' RTT varies with this machine's load: no floor to take off
            session = open_session(fleet.inventory_path, needs, ctx.procs, self.name, compensate_path=fleet.accel != "tcg")
            session.features.extra["vm_lab"] = fleet.as_dict()
            try:
                yield session
            finally:
                session.bpf.close()
                fleet.keep_consoles(ctx.lab_dir / "vms")


def netboot_unavailable(image_dir: Path, firmware: str) -> str | None:
    """Why this machine cannot netboot the fleet, or None."""
    if firmware == "uefi-secureboot":
        return "the firmware is 'bios' or 'uefi' (Debian's iPXE is not signed for Secure Boot)"
    if not (image_dir / SQUASHFS).is_file():
        return f"the image has {SQUASHFS} (rebuild it: make image)"
    if not shutil.which("dnsmasq"):
        return "dnsmasq is installed (Debian's dnsmasq-base; make setup installs it)"
    return None


@contextmanager
def _fleet(configured: QemuConfigured, needs: LabNeeds, ctx: RunContext):
    q = configured.section
    if not shutil.which("qemu-system-x86_64"):
        raise PreflightError("preflight failed: the qemu backend needs qemu-system-x86_64 (make setup installs it)")
    pid = os.getpid()
    shown = LocalExecutor("controller", ProcessTable()).run(["ip", "-j", "-4", "addr"]).stdout
    trex = configured.trex if needs.generator else None
    plan = qemu_plan.fleet_plan(f"lq{pid}", qemu_plan.free_index(pid, shown), needs.pairs, ns=f"{NS_PREFIX}q{pid}",
                                 generator=trex is not None)
    workdir = ctx.run_dir.parent / f".qemu-{pid}"
    try:
        fleet = qemu_fleet.VmFleet(plan, configured.image_dir, workdir, ctx.procs, accel=q.accel,
                                   memory_mb=q.memory_mb, boot_timeout_s=q.boot_timeout_s, firmware=q.firmware,
                                   boot_from=q.boot, trex=trex)
    except RuntimeError as exc:          # accel = "kvm" where KVM cannot boot the image
        raise PreflightError(f"preflight failed: {exc}") from None
    ctx.say(f"booting {len(plan.vms)} VMs from {configured.image_dir}{' by PXE' if q.boot == 'network' else ''} "
            f"(kernel {fleet.kernel}, {fleet.accel}: {fleet.accel_why})")
    try:
        fleet.start()
    except BaseException as exc:
        kept = ctx.run_dir.parent / f"qemu-{pid}-consoles"     # why a VM did not come up
        fleet.keep_consoles(kept)
        fleet.close()
        if isinstance(exc, (TimeoutError, RuntimeError, OSError)):
            raise RunError(f"qemu lab: {exc} (VM consoles kept in {kept})") from exc
        raise
    try:
        ctx.say("VMs up: " + ", ".join(f"{n} {s:g}s" for n, s in fleet.boot_seconds.items()))
        pace = qemu_fleet.boot_pace(fleet.boot_seconds)
        if qemu_fleet.too_slow(fleet.accel, pace):
            ctx.say(f"this host took {pace:g} s of a core per VM boot, {pace / qemu_fleet.TCG_BOOT_S_PER_VM_CORE:.1f}x "
                    f"a TCG fleet's usual {qemu_fleet.TCG_BOOT_S_PER_VM_CORE:g}: it is slow or oversubscribed now, and "
                    "its emulated hops may be too slow for the lab's verification")
        yield fleet
    finally:
        failures = fleet.close()
        if failures:
            log.error("qemu lab: teardown problems: %s", "; ".join(failures))
