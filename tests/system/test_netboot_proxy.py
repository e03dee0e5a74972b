"""`longhaul netboot serve --proxy` beside a facility's own DHCP server, with real PXE clients.

    namespace <t>l, bridge "lan" --+-- veth -- namespace <t>f: "fac" 10.231.1.2, the facility's DHCP
                                   +-- veth -- namespace <t>s: "pxsrv" 10.231.1.1, longhaul netboot --proxy
                                   +-- TAP -- VM S1: legacy BIOS, qemu's iPXE ROM on its NIC
                                   +-- TAP -- VM D1: UEFI (OVMF's own PXE, then ipxe.efi by TFTP)
                                   +-- TAP -- a VM not in the inventory: legacy BIOS and iPXE

The facility's server is dnsmasq set up as a facility's own would be: a range, each lab host's
management address reserved for its MAC, no boot options. It leases; ours answers only with where
to boot, and only to the inventory's MACs: the facility's other machines on that network, which
may PXE-boot from the facility's own servers, must not be taken. Each VM runs until it has
fetched, over HTTP and from the address the facility leased it, the kernel and initrd its host
script names. Past that point the boot is the one the smoke fleet
proves (tests/system/test_qemu_lab.py): live-boot's own DHCP gets the same reservation. Stopping
there keeps this test to a minute or two of TCG.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import netboot_lan
import pytest
from lab_support import requires_lab
from netboot_lan import D1_MAC, INVENTORY, S1_MAC, SERVER, STRANGER, sh

from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.backends.qemu.firmware import FIRMWARE
from longhaul.hardware.backends.qemu.fleet import choose_accel, qemu_argv
from longhaul.hardware.image_files import INITRD, SQUASHFS, VMLINUZ
from longhaul.hardware.netboot import service
from longhaul.hardware.netboot.plan import TFTP_UEFI
from longhaul.hardware.netboot.server import DHCP_LOG, HTTP_LOG, HostServed, read_requests

IMAGE = REPO / "build" / "image"
FACILITY = "10.231.1.2"
RESERVED = {S1_MAC: "10.231.1.11", D1_MAC: "10.231.1.21"}      # the inventory's management addresses
INTERFACE = "pxsrv"
FETCH_TIMEOUT_S = 420        # two TCG VMs to their initrd: ~1-2 min here; a slow day's boots take 3x

pytestmark = [pytest.mark.lab, requires_lab,
              pytest.mark.skipif(not (shutil.which("dnsmasq") and shutil.which("qemu-system-x86_64")),
                                 reason="dnsmasq and qemu (make setup installs dnsmasq-base and qemu-system-x86)"),
              pytest.mark.skipif(FIRMWARE["uefi"].missing() is not None, reason=FIRMWARE["uefi"].missing() or "")]


def _image() -> Path:
    if not all((IMAGE / name).is_file() for name in (VMLINUZ, INITRD, SQUASHFS)):
        why = f"no appliance image in {IMAGE} (make image builds it; make test does it first)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return IMAGE


def facility_dhcp(interface: str) -> list[str]:
    """A facility's DHCP server as dnsmasq: a range, a reservation per lab host, no boot options."""
    return ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--log-facility=-",
            "--log-dhcp", "--leasefile-ro", f"--interface={interface}", "--bind-interfaces",
            "--dhcp-range=10.231.1.100,10.231.1.150,255.255.255.0,1h",
            *[f"--dhcp-host={mac},{address}" for mac, address in RESERVED.items()]]


@pytest.fixture
def facility_lan(tmp_path):
    tag = f"lhpx{os.getpid() % 100000}"
    lan, fac, srv = f"{tag}l", f"{tag}f", f"{tag}s"
    for ns in (lan, fac, srv):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")      # the server asks its own HTTP port
    procs: list[subprocess.Popen] = []
    try:
        sh("ip", "-n", lan, "link", "add", "lan", "type", "bridge")
        for ns, dev, address in ((fac, "fac", FACILITY), (srv, INTERFACE, SERVER)):
            sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", f"p{dev}", "netns", lan)
            sh("ip", "-n", lan, "link", "set", f"p{dev}", "master", "lan", "up")
            sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        for tap in ("s1tap", "d1tap", "xtap"):
            sh("ip", "-n", lan, "tuntap", "add", "dev", tap, "mode", "tap")
            sh("ip", "-n", lan, "link", "set", tap, "master", "lan", "up")
        sh("ip", "-n", lan, "link", "set", "lan", "up")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "controller_ed25519"))
        (tmp_path / "inv.toml").write_text(INVENTORY.format(s1=S1_MAC, d1=D1_MAC))
        with open(tmp_path / "facility-dnsmasq.log", "w") as log:
            procs.append(subprocess.Popen(["ip", "netns", "exec", fac, *facility_dhcp("fac")], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        yield {"lan": lan, "srv": srv, "dir": tmp_path, "procs": procs}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        for ns in (lan, fac, srv):
            sh("ip", "netns", "del", ns, check=False)


def _vm(lab: dict, name: str, mac: str, tap: str, firmware: str, ipxe_rom: bool) -> subprocess.Popen:
    """The qemu lab's netbooting VM; without iPXE's ROM on its NIC, a UEFI VM boots by OVMF's own
    PXE, as a server's firmware does (the lab's VMs carry the ROM: it skips the TFTP stage)."""
    vm = qp.Vm(name, "sender", RESERVED.get(mac, ""), (qp.Nic("lan", tap, mac, "eth0"),))
    console = lab["dir"] / f"{name}-console.log"
    argv = qemu_argv(vm, None, console, choose_accel()[0], 1024, FIRMWARE[firmware], lab["dir"] / f"{name}-nvram.fd")
    if not ipxe_rom:
        argv = [a.replace(",bootindex=0", ",bootindex=0,romfile=") if a.startswith("virtio-net-pci") else a for a in argv]
    with open(lab["dir"] / f"{name}-qemu.err", "w") as err:
        proc = subprocess.Popen(["ip", "netns", "exec", lab["lan"], *argv], stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    lab["procs"].append(proc)             # the fixture ends it whatever happens
    return proc


def _facility_lease(lab: dict, mac: str) -> str | None:
    """The address the facility's server acknowledged to mac, if it has."""
    found = re.search(rf"DHCPACK\(fac\) (\S+) {mac}", (lab["dir"] / "facility-dnsmasq.log").read_text())
    return found.group(1) if found else None


def _served() -> dict[str, HostServed]:
    """What `longhaul netboot status` shows of our server, per host (read in this process: a CLI
    each second would take a core's share from the VMs)."""
    return {h.host: h for s in service.status() if s.interface == INTERFACE for h in s.served}


def _workdir() -> Path:
    return Path(json.loads(service.state_path(INTERFACE).read_text())["workdir"])


def test_beside_a_facility_s_dhcp_server_bios_and_uefi_pxe_clients_boot_from_the_proxy(facility_lan):
    lab = facility_lan
    image = _image()
    initrd = (image / INITRD).stat().st_size
    proc = netboot_lan.serve(lab["srv"], lab["dir"] / "inv.toml", INTERFACE, image, "--proxy")
    vms: list[subprocess.Popen] = []
    try:
        t0 = time.monotonic()
        for name, mac, tap, firmware, ipxe_rom in (("S1", S1_MAC, "s1tap", "bios", True), ("D1", D1_MAC, "d1tap", "uefi", False),
                                                   ("X", STRANGER, "xtap", "bios", True)):
            vms.append(_vm(lab, name, mac, tap, firmware, ipxe_rom))
        fetched: dict[str, float] = {}
        while time.monotonic() - t0 < FETCH_TIMEOUT_S and (len(fetched) < 2 or not _facility_lease(lab, STRANGER)):
            for host, served in _served().items():
                if served.files.get(f"/{INITRD}") == initrd and host not in fetched:
                    fetched[host] = time.monotonic() - t0
            time.sleep(1)           # VMs under TCG: a second's poll is their pace
        served = _served()
        ours_log = (_workdir() / DHCP_LOG).read_text(errors="replace")
        asked = [r for r in read_requests(_workdir() / HTTP_LOG) if r.get("client") == _facility_lease(lab, STRANGER)]
    finally:
        for vm in vms:
            vm.terminate()
            vm.wait(timeout=30)
        stopped, out, err = netboot_lan.stop(proc, INTERFACE)
    facility = (lab["dir"] / "facility-dnsmasq.log").read_text()
    why = f"fetched {fetched}\nserved {served}\n--- facility\n{facility[-3000:]}\n--- proxy\n{ours_log[-3000:]}"
    assert set(fetched) == {"S1", "D1"}, why
    for host, mac in (("S1", S1_MAC), ("D1", D1_MAC)):
        # the address is the facility's reservation; the boot is ours: the host script, kernel, initrd
        assert _facility_lease(lab, mac) == RESERVED[mac], why
        assert served[host].leased and served[host].address == RESERVED[mac], why
        files = served[host].files
        assert {"/boot.ipxe", f"/host/{mac.replace(':', '-')}.ipxe", f"/{VMLINUZ}"} <= set(files), why
        assert files[f"/{VMLINUZ}"] == (image / VMLINUZ).stat().st_size, why
    assert "DHCPACK(pxsrv)" not in ours_log, why           # a proxy leases nothing
    # a machine not in the inventory: leased by the facility, not answered by us, fetched nothing
    assert _facility_lease(lab, STRANGER) and not asked, (asked, why)
    assert f"PXE({INTERFACE}) {STRANGER} proxy-ignored" in ours_log, why
    # OVMF's own PXE is not iPXE: the proxy sent it ipxe.efi by TFTP, which then fetched the script
    assert f"{TFTP_UEFI} to {RESERVED[D1_MAC]}" in ours_log, why
    assert stopped.returncode == 0 and proc.returncode == 0 and "proxy DHCP" in out, (stopped.stderr, out, err)
    print(f"initrd fetched after {fetched['S1']:.0f} s (BIOS) and {fetched['D1']:.0f} s (UEFI)")
