"""The qemu lab: the appliance image booted as router and end-node VMs, wired as a dumbbell.

A `VmFleet` realises a plan (hardware/backends/qemu/plan.py) in one network namespace of its own: a bridge per link, a TAP per NIC, one
qemu per VM (each in its own session, pid recorded), a copy-on-write overlay of the image per VM.
The management bridge reaches this machine through one veth pair; everything longhaul then does to
the VMs goes over SSH, exactly as on hardware (hardware/backends/ssh/lab.py), with strict host keys: the
fleet makes each VM's host key and hands it over in the seed.

Acceleration: KVM when /dev/kvm is a normal KVM; this machine's is kvm_pvm, which a stock Debian
kernel cannot boot under, so "auto" picks TCG there.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path

from longhaul.hardware.backends.qemu import generator as qemu_generator
from longhaul.hardware.backends.qemu.firmware import FIRMWARE, Firmware
from longhaul.hardware.backends.qemu.plan import DPDK_PCI, FleetPlan, Vm, inventory_toml, namespace_plan, seed
from longhaul.hardware.backends.ssh.host_checks import measure_offset
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.backends.ssh.readiness import offset_estimate
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import LocalExecutor, NetnsExecutor, ProcessTable
from longhaul.hardware.executors.ssh_masters import MASTERS
from longhaul.hardware.generator import TrexSection
from longhaul.hardware.image_files import RAW, SQUASHFS, read_manifest
from longhaul.hardware.netboot.seed import seed_toml
from longhaul.hardware.netboot.server import NetbootServer, summary
from longhaul.hardware.netboot.service import open_server
from longhaul.hardware.topology import GENERATOR

log = logging.getLogger(__name__)
NETBOOT_PORT = 8067


def qemu_argv(vm: Vm, disks: tuple[Path, Path] | None, console: Path, accel: str, memory_mb: int,
              firmware: Firmware = FIRMWARE["bios"], nvram: Path | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """disks: (the image's overlay, the seed disk), or None for a VM that netboots from its
    management NIC (its iPXE ROM, Debian's ipxe-qemu). What boots is first whatever the firmware's
    own order (bootindex): UEFI would also offer the other NICs. No default devices: the guest
    spent seconds of a TCG boot probing an empty floppy and CD-ROM, a parallel port and a VGA
    card nobody looks at (its console is the serial line)."""
    argv = ["qemu-system-x86_64", "-name", vm.name, "-nodefaults", *firmware.argv(nvram), "-m", str(memory_mb), "-smp", "1",
            "-accel", "tcg,tb-size=64" if accel == "tcg" else "kvm", "-display", "none", "-monitor", "none",
            "-no-reboot", "-serial", f"file:{console}"]
    if disks is not None:
        overlay, seed_img = disks
        argv += ["-drive", f"file={overlay},if=none,id=disk0,format=qcow2", "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
                 "-drive", f"file={seed_img},if=virtio,format=raw,readonly=on"]
    # TCG's default CPU (qemu64) lacks SSE4.2, which Debian's DPDK is built for; "max" has it
    argv += ["-cpu", "host" if accel == "kvm" else "max"]
    for i, nic in enumerate(vm.nics):
        slot = f",addr=0x{nic.pci.split(':')[2].split('.')[0]}" if nic.pci else ""
        rom = ",bootindex=0" if disks is None and i == 0 else ",romfile="    # only a netbooting NIC has iPXE
        argv += ["-netdev", f"tap,id=n{i},ifname={nic.tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=n{i},mac={nic.mac}{rom}{slot}"]
    return argv + list(extra)


def netboot_memory_mb(image_dir: Path) -> int:
    """A netbooted VM holds the root squashfs in RAM, and runs beside it what a disk-booted one
    runs in memory_mb's default."""
    size = (Path(image_dir) / SQUASHFS).stat().st_size
    return int(size / 2**20) + 768


def choose_accel(wanted: str = "auto") -> tuple[str, str]:
    """(accel, why). KVM only when /dev/kvm is there and is not the paravirtual kvm_pvm."""
    if wanted == "tcg":
        return "tcg", "asked for"
    kvm_ok = os.access("/dev/kvm", os.R_OK | os.W_OK)
    pvm = Path("/sys/module/kvm_pvm").exists()
    if wanted == "kvm":
        if not kvm_ok or pvm:
            raise RuntimeError("accel = 'kvm': /dev/kvm " + ("is kvm_pvm (a stock kernel cannot boot under it)"
                                                            if pvm else "is not usable"))
        return "kvm", "asked for"
    if kvm_ok and not pvm:
        return "kvm", "/dev/kvm works"
    return "tcg", "/dev/kvm is kvm_pvm, which a stock Debian kernel cannot boot under" if pvm else "no /dev/kvm"


# Under TCG a VM's boot to its first-boot report costs ~140 s of one core's emulation (measured:
# 6 VMs by UEFI on 2 cores ready in 374-420 s, 4 netbooted in 254-268 s); the fleet's VMs share
# this machine's cores, so the allowance grows with VMs per core, twice the measured cost.
TCG_BOOT_S_PER_VM_CORE = 140.0
MIN_BOOT_TIMEOUT_S = 420.0          # any fleet's, and a KVM one's


def boot_timeout(accel: str, vms: int, cores: int | None = None) -> float:
    """How long a fleet of `vms` VMs may take to come up, when the config does not say."""
    if accel != "tcg":
        return MIN_BOOT_TIMEOUT_S
    cores = cores or os.cpu_count() or 1
    return max(MIN_BOOT_TIMEOUT_S, 2 * TCG_BOOT_S_PER_VM_CORE * vms / cores)


# A TCG fleet whose boots cost more than this many seconds of a core per VM runs on a host that is
# slow or oversubscribed now: 1.6x (217-222 s) was measured on a day when the hypervisor took 2-29 %
# of this machine's CPU (1.4x, 201 s, in a second fleet), and every lab of that fleet was refused by
# verification (idle RTT 36-88 ms on a 20 ms path, `tc` on a router VM taking 0.3-1 s)
SLOW_TCG_BOOT_S_PER_VM_CORE = 1.3 * TCG_BOOT_S_PER_VM_CORE


def too_slow(accel: str, pace: float | None) -> bool:
    """Whether a fleet's boot pace says this host is too slow now for a TCG lab's verification."""
    return accel == "tcg" and pace is not None and pace > SLOW_TCG_BOOT_S_PER_VM_CORE


def boot_pace(boot_seconds: dict[str, float], cores: int | None = None) -> float | None:
    """Seconds of one core a VM's boot took in this fleet: its VMs boot at once and share this
    machine's cores, so the last one up times cores over VMs."""
    if not boot_seconds:
        return None
    cores = cores or os.cpu_count() or 1
    return round(max(boot_seconds.values()) * min(cores, len(boot_seconds)) / len(boot_seconds), 1)


def tcp_open(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            return bool(conn.recv(4))          # sshd speaks first: a banner means it is really up
    except OSError:
        return False


class VmFleet:
    """Boots a FleetPlan's VMs from an image directory (appliance/image/build.py's output) and
    keeps them up until close(). Everything it creates is undone by close(), newest first."""

    def __init__(self, plan: FleetPlan, image_dir: Path, workdir: Path, procs: ProcessTable, *,
                 accel: str = "auto", memory_mb: int = 512, boot_timeout_s: float | None = None, firmware: str = "bios",
                 boot_from: str = "disk", trex: TrexSection | None = None):
        self.plan, self.image_dir, self.workdir, self.procs = plan, Path(image_dir), Path(workdir), procs
        self.accel, self.accel_why = choose_accel(accel)
        self.memory_mb = memory_mb
        self.boot_timeout_s = boot_timeout_s or boot_timeout(self.accel, len(plan.vms))
        if boot_from == "network":        # the root squashfs is held in RAM (live-boot's fetch=)
            self.memory_mb = max(memory_mb, netboot_memory_mb(self.image_dir))
        self.firmware = FIRMWARE[firmware]
        self.boot_from = boot_from
        self.trex = trex
        self.netboot: NetbootServer | None = None
        self.cleanup = CleanupStack()
        self.local = LocalExecutor("controller", procs)
        self.ns_exec = NetnsExecutor(plan.ns, plan.ns, procs)
        self.inventory_path = self.workdir / "inventory.toml"
        self.image_manifest = read_manifest(self.image_dir)
        self.boot_seconds: dict[str, float] = {}
        self.firstboot: dict[str, dict] = {}
        self.clock_steps_ms: dict[str, float] = {}
        self._qemu: dict[str, object] = {}              # VM name -> its qemu Process

    def boot(self) -> None:
        """The namespace and every VM up to its first-boot report (firstboot: what each says)."""
        image = self.image_dir / RAW
        if not image.is_file():
            raise FileNotFoundError(f"{image}: no appliance image; build it with `make image`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        key = self._keys()
        self.inventory_path.write_text(inventory_toml(self.plan, self.workdir / "controller_ed25519",
                                                      self.workdir / "known_hosts", self.kernel,
                                                      self.trex.path if self.trex else None))
        self.cleanup.push(f"delete namespace {self.plan.ns}",
                          lambda: self.local.run(["ip", "netns", "delete", self.plan.ns], check=False))
        for argv in namespace_plan(self.plan):
            self.local.run(argv)
        if self.boot_from == "network":
            self._serve_netboot()
        t0 = time.monotonic()
        for vm in self.plan.vms:
            if self.boot_from == "network":
                self._launch(vm.name, qemu_argv(vm, None, self.workdir / f"{vm.name}-console.log", self.accel,
                                                self._memory(vm), self.firmware, self.workdir / f"{vm.name}-nvram.fd",
                                                self._extra(vm)))
            else:
                self._boot(vm, image, key)
        self._wait_ready(t0, [vm.name for vm in self.plan.vms])

    def _serve_netboot(self) -> None:
        """`longhaul netboot`'s server on the controller's end of the management network (an
        interface of this fleet's own), with the host keys the fleet made."""
        keys = self.workdir / "netboot-keys"
        keys.mkdir(mode=0o700, exist_ok=True)
        for vm in self.plan.vms:
            for suffix in ("", ".pub"):
                src = self.workdir / "seeds" / vm.name / f"{vm.name}_ed25519{suffix}"
                if src.exists():
                    shutil.copy2(src, keys / src.name)
        outer = self.plan.veth[0]
        self.netboot = open_server(self.inventory_path, outer, self.image_dir, self.workdir / "netboot", keys,
                                   self.local, port=NETBOOT_PORT)
        self.cleanup.push("stop the netboot server", self.netboot.close)
        self.netboot.start()

    def start(self) -> None:
        """boot(), then every VM's clock set to this machine's, then the generator's TRex."""
        self.boot()
        self._step_clocks()
        if self.trex is not None:
            executor = load_inventory(self.inventory_path).executor(GENERATOR, self.procs)
            proc = qemu_generator.start(executor, self.trex, DPDK_PCI, self.workdir)
            self.cleanup.push(f"stop TRex on {GENERATOR}", proc.stop)

    def _memory(self, vm: Vm) -> int:
        """A VM's memory (MB): the generator's holds TRex's huge pages too."""
        if vm.role == "generator" and self.trex is not None:
            return self.memory_mb + qemu_generator.HUGEPAGES_MB
        return self.memory_mb

    def _extra(self, vm: Vm) -> tuple[str, ...]:
        """The generator's share of the TRex release tree."""
        if vm.role == "generator" and self.trex is not None:
            return tuple(qemu_generator.share_argv(self.trex.path))
        return ()

    def _step_clocks(self) -> None:
        """A VM's clock starts from the emulated RTC (1 s steps) and lags while it boots slowly;
        there is no NTP server on the fleet's network, so each VM's clock is stepped once to this
        machine's, by the offset measured over SSH (min-RTT exchange), and the step recorded."""
        inventory = load_inventory(self.inventory_path)
        for vm in self.plan.vms:
            executor = inventory.executor(vm.name, ProcessTable())
            samples, err = measure_offset(executor)
            offset = offset_estimate(samples)
            if offset is None:
                raise RuntimeError(f"{vm.name}: could not read its clock over SSH: {err.strip()[-200:]}")
            executor.run(["python3", "-c", "import sys, time; time.clock_settime(time.CLOCK_REALTIME, "
                          "time.clock_gettime(time.CLOCK_REALTIME) - float(sys.argv[1]))", repr(offset)])
            self.clock_steps_ms[vm.name] = round(-offset * 1e3, 1)

    @property
    def kernel(self) -> str:
        return str(self.image_manifest.get("kernel", "unknown"))

    def _keys(self) -> str:
        user = self.workdir / "controller_ed25519"
        self.local.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"longhaul@{self.plan.ns}", "-f", str(user)])
        known = []
        for vm in self.plan.vms:
            hk = self.workdir / "seeds" / vm.name / f"{vm.name}_ed25519"
            hk.parent.mkdir(parents=True, exist_ok=True)
            self.local.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", vm.name, "-f", str(hk)])
            known.append(f"{vm.mgmt} {' '.join(Path(str(hk) + '.pub').read_text().split()[:2])}\n")
        (self.workdir / "known_hosts").write_text("".join(known))
        return (Path(str(user) + ".pub")).read_text().strip()

    def _boot(self, vm: Vm, image: Path, authorized_key: str) -> None:
        d = self.workdir / "seeds" / vm.name
        (d / "firstboot.toml").write_text(seed_toml(seed(vm, authorized_key, f"{vm.name}_ed25519")))
        os.unlink(d / f"{vm.name}_ed25519.pub")
        seed_img = self.workdir / f"{vm.name}-seed.img"
        self.local.run(["mke2fs", "-q", "-F", "-t", "ext2", "-L", "LHSEED", "-d", str(d), str(seed_img), "4M"])
        overlay = self.workdir / f"{vm.name}.qcow2"
        self.local.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.resolve()), "-F", "raw", str(overlay)])
        self.cleanup.push(f"remove {overlay.name}", lambda: overlay.unlink(missing_ok=True))
        argv = qemu_argv(vm, (overlay, seed_img), self.workdir / f"{vm.name}-console.log", self.accel,
                         self._memory(vm), self.firmware, self.workdir / f"{vm.name}-nvram.fd", self._extra(vm))
        self._launch(vm.name, argv)

    def _launch(self, name: str, argv: list[str]) -> None:
        proc = self.ns_exec.start(argv, label=f"qemu {name}", stderr=self.workdir / f"{name}-qemu.err")
        self.cleanup.push(f"stop qemu {name} (pid {proc.pid})", lambda: proc.stop(term_timeout=10))
        self._qemu[name] = proc

    def relaunch(self, name: str) -> None:
        """A VM that rebooted (its qemu runs with -no-reboot, so it stopped) started again on its
        own disk and variable store, up to its next first-boot report."""
        old = self._qemu[name]
        old.wait(timeout=120)
        self.firstboot.pop(name, None)
        (self.workdir / f"{name}-console.log").unlink(missing_ok=True)
        self._launch(name, old.argv)
        self._wait_ready(time.monotonic(), [name])

    def _wait_ready(self, t0: float, names: list[str]) -> None:
        """Each VM is up when sshd answers on its management address and its first-boot report
        is on its serial console."""
        waiting = {name: self.plan.vm(name) for name in names}
        deadline = t0 + self.boot_timeout_s
        while waiting:
            for name, vm in list(waiting.items()):
                proc = self._qemu[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"qemu {name} exited ({proc.poll()}): {proc.read_stderr()[-400:]}")
                report = self._firstboot_report(name)
                if report is not None and "FAILED" in report:
                    raise RuntimeError(f"{name}: {report}")
                if report is not None and tcp_open(vm.mgmt, 22):
                    self.boot_seconds[name] = round(time.monotonic() - t0, 1)
                    self.firstboot[name] = json.loads(report.split("ready ", 1)[1])
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                tails = {n: self._console_tail(n) for n in waiting}
                raise TimeoutError(f"VMs not up after {self.boot_timeout_s:.0f}s ({self.accel}): {tails}")
            if waiting:
                time.sleep(0.5)

    def _firstboot_report(self, name: str) -> str | None:
        console = self.workdir / f"{name}-console.log"
        text = console.read_text(errors="replace") if console.exists() else ""
        for line in reversed(text.splitlines()):
            if "longhaul-firstboot: " in line:
                return line.split("longhaul-firstboot: ", 1)[1].strip()
        return None

    def _console_tail(self, name: str) -> str:
        console = self.workdir / f"{name}-console.log"
        return console.read_text(errors="replace")[-300:] if console.exists() else "(no console output)"

    def as_dict(self) -> dict:
        """For the run's manifest: where the results came from."""
        netboot = None
        if self.netboot is not None:
            netboot = [s.as_dict() for s in summary(self.netboot.hosts, self.netboot.requests(), self.netboot.leases())]
        return {"backend": "qemu", "accel": self.accel, "accel_why": self.accel_why, "kernel": self.kernel,
                "firmware": self.firmware.name, "boot": self.boot_from, "netboot": netboot,
                "image": {k: self.image_manifest.get(k) for k in ("base_key", "revision", "built", "suite")},
                "memory_mb": self.memory_mb, "boot_seconds": self.boot_seconds,
                "boot_pace_s": boot_pace(self.boot_seconds), "clock_steps_ms": self.clock_steps_ms,
                "vms": self.firstboot}

    def keep_consoles(self, dest: Path) -> None:
        """The VMs' serial consoles (kernel, first boot) beside the run's results."""
        logs = sorted(self.workdir.glob("*-console.log"))
        if logs:
            dest.mkdir(parents=True, exist_ok=True)
        for log_file in logs:
            shutil.copy2(log_file, dest / log_file.name)

    def close(self) -> list[str]:
        MASTERS.close_all()             # the shared SSH connections go before the VMs they reach
        failures = self.cleanup.close()
        shutil.rmtree(self.workdir, ignore_errors=True)     # overlays, seeds and keys of this fleet only
        return failures
