"""The qemu lab: the appliance image booted as router and end-node VMs, wired as a dumbbell.

`fleet_plan` is pure: the VMs (S1..Sn, R1, R2, D1..Dn), their NICs and bridges, the seed each one
boots with (appliance/image/firstboot.py reads it), and the inventory that describes them. A
`VmFleet` realises it in one network namespace of its own: a bridge per link, a TAP per NIC, one
qemu per VM (each in its own session, pid recorded), a copy-on-write overlay of the image per VM.
The management bridge reaches this machine through one veth pair; everything longhaul then does to
the VMs goes over SSH, exactly as on hardware (hardware/backends/ssh/lab.py), with strict host keys: the
fleet makes each VM's host key and hands it over in the seed.

Every sender has a second NIC on its access segment for DPDK (`dpdk = true` in the inventory) at
a fixed PCI address, left without an address by first boot, so a DPDK flow can bind it, send from
it and give it back.

Acceleration: KVM when /dev/kvm is a normal KVM; this machine's is kvm_pvm, which a stock Debian
kernel cannot boot under, so "auto" picks TCG there.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from longhaul.hardware.backends.qemu.firmware import FIRMWARE, Firmware
from longhaul.hardware.backends.ssh.host_checks import measure_offset
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.backends.ssh.readiness import offset_estimate
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import LocalExecutor, NetnsExecutor, ProcessTable
from longhaul.hardware.executors.ssh_masters import MASTERS

log = logging.getLogger(__name__)

DPDK_PCI = "0000:00:10.0"      # the senders' DPDK NIC: a slot clear of the machine's own devices
MGMT_PREFIX = "10.213"          # 10.213.<k>.0/24; <k> picked per fleet so two fleets can coexist
WAN_NET = "10.220.0.0/30"


@dataclass(frozen=True)
class Nic:
    bridge: str            # the fleet namespace's bridge this NIC's TAP joins
    tap: str
    mac: str
    name: str              # the interface name inside the VM (the seed renames to it)
    address: str | None = None
    bottleneck: bool = False
    pci: str | None = None      # a DPDK port: at this fixed PCI address, no address in the VM


@dataclass(frozen=True)
class Vm:
    name: str
    role: str
    mgmt: str                                   # management address (no prefix)
    nics: tuple[Nic, ...]
    routes: tuple[tuple[str, str], ...] = ()    # (to, via) on the test network


@dataclass(frozen=True)
class FleetPlan:
    ns: str
    index: int
    bridges: tuple[str, ...]
    vms: tuple[Vm, ...]
    controller_ip: str
    veth: tuple[str, str]                       # (this machine's end, the namespace's end)

    def vm(self, name: str) -> Vm:
        return next(v for v in self.vms if v.name == name)


def _mac(index: int, vm: int, nic: int) -> str:
    return f"52:54:{index:02x}:{vm:02x}:{nic:02x}:01"


def fleet_plan(tag: str, index: int, pairs: int, ns: str | None = None) -> FleetPlan:
    """S<i> -- R1 -- R2 -- D<i>: one /24 per access link, a /30 between the routers, and a
    management NIC (eth0) on every VM. tag names the TAPs (short: IFNAMSIZ) and, unless ns is
    given, the namespace."""
    if not 1 <= pairs <= 8:
        raise ValueError(f"pairs = {pairs}: the qemu lab builds 1 to 8 pairs")
    if not 1 <= index <= 254:
        raise ValueError(f"index = {index}: 1..254")
    mgmt = f"{MGMT_PREFIX}.{index}"
    wan = ipaddress.ip_network(WAN_NET)
    r1_wan, r2_wan = (f"{h}/{wan.prefixlen}" for h in list(wan.hosts())[:2])
    bridges = ["mgmt", "wan"]
    vms: list[Vm] = []
    counter = iter(range(1, 64))

    def mgmt_nic(n: int, vm_no: int) -> Nic:
        return Nic("mgmt", f"{tag}m{vm_no}", _mac(index, vm_no, 0), "eth0", f"{mgmt}.{n}/24")

    r1_nics: list[Nic] = []
    r2_nics: list[Nic] = []
    r1_no, r2_no = next(counter), next(counter)
    for i in range(1, pairs + 1):
        s_net, d_net = f"10.221.{i}", f"10.222.{i}"
        bridges += [f"s{i}", f"d{i}"]
        s_no, d_no = next(counter), next(counter)
        vms.append(Vm(f"S{i}", "sender", f"{mgmt}.{10 + i}",
                      (mgmt_nic(10 + i, s_no), Nic(f"s{i}", f"{tag}t{s_no}", _mac(index, s_no, 1), "eth1", f"{s_net}.2/24"),
                       Nic(f"s{i}", f"{tag}p{s_no}", _mac(index, s_no, 2), "dpdk0", f"{s_net}.3/24", pci=DPDK_PCI)),
                      routes=(("10.222.0.0/16", f"{s_net}.1"),)))
        vms.append(Vm(f"D{i}", "receiver", f"{mgmt}.{20 + i}",
                      (mgmt_nic(20 + i, d_no), Nic(f"d{i}", f"{tag}t{d_no}", _mac(index, d_no, 1), "eth1", f"{d_net}.2/24")),
                      routes=(("10.221.0.0/16", f"{d_net}.1"),)))
        r1_nics.append(Nic(f"s{i}", f"{tag}t{r1_no}{i}", _mac(index, r1_no, 1 + i), f"s{i}", f"{s_net}.1/24"))
        r2_nics.append(Nic(f"d{i}", f"{tag}t{r2_no}{i}", _mac(index, r2_no, 1 + i), f"d{i}", f"{d_net}.1/24"))
    r1 = Vm("R1", "router", f"{mgmt}.31",
            (mgmt_nic(31, r1_no), Nic("wan", f"{tag}w1", _mac(index, r1_no, 1), "wan", r1_wan, True), *r1_nics),
            routes=(("10.222.0.0/16", r2_wan.split("/")[0]),))
    r2 = Vm("R2", "router", f"{mgmt}.32",
            (mgmt_nic(32, r2_no), Nic("wan", f"{tag}w2", _mac(index, r2_no, 1), "wan", r2_wan, True), *r2_nics),
            routes=(("10.221.0.0/16", r1_wan.split("/")[0]),))
    ordered = [v for v in vms if v.role == "sender"] + [r1, r2] + [v for v in vms if v.role == "receiver"]
    return FleetPlan(ns=ns or f"{tag}-ns", index=index, bridges=tuple(bridges), vms=tuple(ordered),
                     controller_ip=f"{mgmt}.1", veth=(f"{tag}c", f"{tag}cp"))


def seed(vm: Vm, authorized_key: str, host_key_file: str) -> dict:
    """The firstboot.toml of one VM (appliance/image/firstboot.py's format)."""
    return {"name": vm.name, "role": vm.role, "authorized_keys": [authorized_key], "host_key": host_key_file,
            # a DPDK port is named but gets no address: its kernel interface must be idle to be bound
            "interfaces": [{"mac": n.mac, "name": n.name, "address": None if n.pci else n.address} for n in vm.nics],
            "routes": [{"to": to, "via": via} for to, via in vm.routes]}


def inventory_toml(plan: FleetPlan, key: Path, known_hosts: Path, kernel_note: str = "") -> str:
    """The inventory the ssh backend runs against: the same format a facility writes."""
    lines = ["[inventory]", f'name = "{plan.ns}"',
             f'description = "qemu lab: the appliance image as VMs{(" (" + kernel_note + ")") if kernel_note else ""}"',
             'ssh_user = "root"', f'ssh_key = "{key}"', f'known_hosts = "{known_hosts}"',
             "trust_on_first_use = false", 'longhaul_root = "/opt/longhaul"', ""]
    for vm in plan.vms:
        lines += ["[[hosts]]", f'name = "{vm.name}"', f'role = "{vm.role}"', 'os = "linux"',
                  f'management = "{vm.mgmt}"']
        for nic in vm.nics[1:]:
            lines += ["[[hosts.interfaces]]", f'name = "{nic.name}"', f'address = "{nic.address}"',
                      "rate_mbps = 1000"]
            if nic.bottleneck:
                lines.append('link = "bottleneck"')
            if nic.pci:
                lines += [f'pci = "{nic.pci}"', "dpdk = true"]
        lines.append("")
    lines += ["[bottleneck]", 'r1 = "R1"', 'r2 = "R2"', ""]
    for vm in plan.vms:
        if vm.role == "sender":
            lines += ["[[pairs]]", f'sender = "{vm.name}"', f'receiver = "D{vm.name[1:]}"', ""]
    return "\n".join(lines)


def qemu_argv(vm: Vm, overlay: Path, seed_img: Path, console: Path, accel: str, memory_mb: int,
              firmware: Firmware = FIRMWARE["bios"], nvram: Path | None = None) -> list[str]:
    """The disk boots first whatever the firmware's own order (bootindex): UEFI would also offer
    the NICs. No default devices: the guest spent seconds of a TCG boot probing an empty floppy
    and CD-ROM, a parallel port and a VGA card nobody looks at (its console is the serial line)."""
    argv = ["qemu-system-x86_64", "-name", vm.name, "-nodefaults", *firmware.argv(nvram), "-m", str(memory_mb), "-smp", "1",
            "-accel", "tcg,tb-size=64" if accel == "tcg" else "kvm", "-display", "none", "-monitor", "none",
            "-no-reboot", "-serial", f"file:{console}",
            "-drive", f"file={overlay},if=none,id=disk0,format=qcow2", "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
            "-drive", f"file={seed_img},if=virtio,format=raw,readonly=on"]
    # TCG's default CPU (qemu64) lacks SSE4.2, which Debian's DPDK is built for; "max" has it
    argv += ["-cpu", "host" if accel == "kvm" else "max"]
    for i, nic in enumerate(vm.nics):
        slot = f",addr=0x{nic.pci.split(':')[2].split('.')[0]}" if nic.pci else ""
        argv += ["-netdev", f"tap,id=n{i},ifname={nic.tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=n{i},mac={nic.mac},romfile={slot}"]   # no iPXE ROM: disk boot
    return argv


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


def free_index(pid: int, addresses_json: str) -> int:
    """A management /24 (10.213.<k>) that no address of this machine is on, starting from the pid
    so that concurrent runs spread out. addresses_json: `ip -j -4 addr` of this machine."""
    used = {int(a["local"].split(".")[2]) for link in json.loads(addresses_json or "[]")
            for a in link.get("addr_info", []) if a.get("local", "").startswith(MGMT_PREFIX + ".")}
    for step in range(254):
        k = (pid + step) % 254 + 1
        if k not in used:
            return k
    raise RuntimeError(f"every {MGMT_PREFIX}.<k>.0/24 is in use on this machine")


def namespace_plan(plan: FleetPlan) -> list[list[str]]:
    """ip argv lists (run on this machine) that make the namespace, bridges, TAPs and the veth."""
    ns = plan.ns
    argv = [["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "set", "lo", "up"]]
    for br in plan.bridges:
        argv += [["ip", "-n", ns, "link", "add", br, "type", "bridge"], ["ip", "-n", ns, "link", "set", br, "up"]]
    for vm in plan.vms:
        for nic in vm.nics:
            argv += [["ip", "-n", ns, "tuntap", "add", "dev", nic.tap, "mode", "tap"],
                     ["ip", "-n", ns, "link", "set", nic.tap, "master", nic.bridge],
                     ["ip", "-n", ns, "link", "set", nic.tap, "up"]]
    outer, inner = plan.veth
    argv += [["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns],
             ["ip", "-n", ns, "link", "set", inner, "master", "mgmt"], ["ip", "-n", ns, "link", "set", inner, "up"],
             ["ip", "addr", "add", f"{plan.controller_ip}/24", "dev", outer], ["ip", "link", "set", outer, "up"]]
    return argv


def _toml_value(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)             # a TOML basic string is a JSON string for these
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def seed_toml(data: dict) -> str:
    """A seed dict as TOML (flat keys, arrays of tables for interfaces and routes)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, list) or
             not v or not isinstance(v[0], dict)]
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for table in value:
                lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


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
                 accel: str = "auto", memory_mb: int = 512, boot_timeout_s: float = 420.0, firmware: str = "bios"):
        self.plan, self.image_dir, self.workdir, self.procs = plan, Path(image_dir), Path(workdir), procs
        self.accel, self.accel_why = choose_accel(accel)
        self.memory_mb, self.boot_timeout_s = memory_mb, boot_timeout_s
        self.firmware = FIRMWARE[firmware]
        self.cleanup = CleanupStack()
        self.local = LocalExecutor("controller", procs)
        self.ns_exec = NetnsExecutor(plan.ns, plan.ns, procs)
        self.inventory_path = self.workdir / "inventory.toml"
        self.image_manifest = json.loads((self.image_dir / "manifest.json").read_text())
        self.boot_seconds: dict[str, float] = {}
        self.firstboot: dict[str, dict] = {}
        self.clock_steps_ms: dict[str, float] = {}
        self._qemu: dict[str, object] = {}              # VM name -> its qemu Process

    def boot(self) -> None:
        """The namespace and every VM up to its first-boot report (firstboot: what each says)."""
        image = self.image_dir / "longhaul.raw"
        if not image.is_file():
            raise FileNotFoundError(f"{image}: no appliance image; build it with `make image`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        key = self._keys()
        self.cleanup.push(f"delete namespace {self.plan.ns}",
                          lambda: self.local.run(["ip", "netns", "delete", self.plan.ns], check=False))
        for argv in namespace_plan(self.plan):
            self.local.run(argv)
        t0 = time.monotonic()
        for vm in self.plan.vms:
            self._boot(vm, image, key)
        self._wait_ready(t0, [vm.name for vm in self.plan.vms])

    def start(self) -> None:
        """boot(), then the fleet's inventory and every VM's clock set to this machine's."""
        self.boot()
        self.inventory_path.write_text(inventory_toml(self.plan, self.workdir / "controller_ed25519",
                                                      self.workdir / "known_hosts", self.kernel))
        self._step_clocks()

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
        argv = qemu_argv(vm, overlay, seed_img, self.workdir / f"{vm.name}-console.log", self.accel, self.memory_mb,
                         self.firmware, self.workdir / f"{vm.name}-nvram.fd")
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
        return {"backend": "qemu", "accel": self.accel, "accel_why": self.accel_why, "kernel": self.kernel,
                "firmware": self.firmware.name,
                "image": {k: self.image_manifest.get(k) for k in ("base_key", "revision", "built", "suite")},
                "memory_mb": self.memory_mb, "boot_seconds": self.boot_seconds, "clock_steps_ms": self.clock_steps_ms,
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
