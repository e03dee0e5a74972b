"""`longhaul netboot` on a wired network of namespaces: real dnsmasq, busybox's DHCP and TFTP clients,
the HTTP server; who gets an answer and what is handed out.

    server namespace:  srva (10.231.1.1/24, served)   srvb (10.231.2.1/24, not served)
                          |                              |
    client namespaces:  cla (ns a)                      clb (ns b)

The VMs that boot from it are the smoke fleet's (tests/system/test_qemu_lab.py: BIOS and iPXE) and
tests/system/test_netboot_proxy.py's (beside a facility's DHCP server, BIOS and UEFI PXE clients).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import netboot_lan
import pytest
from lab_support import requires_lab
from netboot_lan import D1_MAC, INVENTORY, PORT, S1_MAC, SERVER, STRANGER, cli, sh

from longhaul.hardware.executors.process import wait_until
from longhaul.hardware.image_files import INITRD, SQUASHFS, VMLINUZ
from longhaul.hardware.netboot import service
from longhaul.hardware.netboot.plan import IPXE_DIR, TFTP_BIOS

pytestmark = [pytest.mark.lab, requires_lab,
              pytest.mark.skipif(not (shutil.which("dnsmasq") and shutil.which("busybox")),
                                 reason="dnsmasq and busybox (make setup installs dnsmasq-base and busybox)")]

DHCP_SCRIPT = """#!/bin/sh
echo "$1 ip=$ip mask=$mask boot_file=$boot_file" >> "{out}"
if [ "$1" = bound ]; then ip addr replace "$ip/$mask" dev "$interface"; fi
"""


@pytest.fixture
def lan(tmp_path):
    tag = f"lhnb{os.getpid() % 100000}"
    srv, a, b = f"{tag}s", f"{tag}a", f"{tag}b"
    for ns in (srv, a, b):
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", "srva", "netns", srv, "type", "veth", "peer", "name", "cla", "netns", a)
        sh("ip", "link", "add", "srvb", "netns", srv, "type", "veth", "peer", "name", "clb", "netns", b)
        sh("ip", "-n", srv, "addr", "add", f"{SERVER}/24", "dev", "srva")
        sh("ip", "-n", srv, "addr", "add", "10.231.2.1/24", "dev", "srvb")
        for ns, dev in ((srv, "srva"), (srv, "srvb"), (a, "cla"), (b, "clb"), (srv, "lo"), (a, "lo")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        image = tmp_path / "image"            # stand-ins: this test is about who is answered, not the boot
        image.mkdir()
        for name, size in ((VMLINUZ, 4096), (INITRD, 8192), (SQUASHFS, 3 << 20)):
            (image / name).write_bytes(os.urandom(size))
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "controller_ed25519"))
        (tmp_path / "inv.toml").write_text(INVENTORY.format(s1=S1_MAC, d1=D1_MAC))
        yield {"srv": srv, "a": a, "b": b, "dir": tmp_path, "image": image}
    finally:
        for ns in (srv, a, b):
            sh("ip", "netns", "del", ns, check=False)


def serve(lan, interface: str = "srva", *extra: str) -> subprocess.Popen:
    return netboot_lan.serve(lan["srv"], lan["dir"] / "inv.toml", interface, lan["image"], *extra)


def dhcp(ns: str, dev: str, mac: str, out: Path, *extra: str) -> tuple[int, str]:
    sh("ip", "-n", ns, "link", "set", dev, "address", mac)
    script = out.with_suffix(".sh")
    script.write_text(DHCP_SCRIPT.format(out=out))
    script.chmod(0o755)
    out.unlink(missing_ok=True)
    done = sh("ip", "netns", "exec", ns, "busybox", "udhcpc", "-f", "-q", "-n", "-t", "3", "-T", "1", "-i", dev,
              "-s", str(script), *extra, check=False)
    return done.returncode, out.read_text() if out.exists() else ""


def http(ns: str, path: str) -> tuple[int, bytes]:
    code = ("import sys, urllib.request, urllib.error\n"
            "try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=5); sys.stdout.buffer.write(b'200\\n' + r.read())\n"
            "except urllib.error.HTTPError as e:\n    sys.stdout.buffer.write(str(e.code).encode() + b'\\n')\n")
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code, f"http://{SERVER}:{PORT}{path}"],
                          capture_output=True, check=True, timeout=30)
    status, _, body = done.stdout.partition(b"\n")
    return int(status), body


def test_only_the_inventory_s_macs_on_the_served_interface_are_answered(lan):
    proc = serve(lan)
    try:
        out = lan["dir"] / "lease.txt"
        rc, lease = dhcp(lan["a"], "cla", S1_MAC, out)                   # a BIOS PXE ROM: iPXE by TFTP
        assert rc == 0 and "ip=10.231.1.11 " in lease and f"boot_file={TFTP_BIOS}" in lease, lease
        rc, lease = dhcp(lan["a"], "cla", S1_MAC, out, "-x", "0x5d:0007")    # a UEFI one
        assert rc == 0 and "boot_file=ipxe.efi" in lease, lease
        rc, lease = dhcp(lan["a"], "cla", S1_MAC, out, "-x", "0xaf:0101")    # iPXE itself: the script
        assert rc == 0 and f"boot_file=http://{SERVER}:{PORT}/boot.ipxe" in lease, lease
        assert dhcp(lan["a"], "cla", STRANGER, out)[0] != 0                 # not in the inventory
        assert dhcp(lan["b"], "clb", D1_MAC, out)[0] != 0                   # another interface of the server

        sh("ip", "-n", lan["a"], "link", "set", "cla", "address", S1_MAC)
        sh("ip", "-n", lan["a"], "addr", "replace", "10.231.1.11/24", "dev", "cla")
        got = sh("ip", "netns", "exec", lan["a"], "busybox", "tftp", "-g", "-r", TFTP_BIOS, "-l",
                 str(lan["dir"] / "ipxe.bin"), SERVER)
        assert got.returncode == 0
        assert (lan["dir"] / "ipxe.bin").read_bytes() == (Path(IPXE_DIR) / TFTP_BIOS).read_bytes()

        status, script = http(lan["a"], "/boot.ipxe")
        assert status == 200 and b"${netX/mac:hexhyp}" in script
        status, script = http(lan["a"], f"/host/{S1_MAC.replace(':', '-')}.ipxe")
        assert status == 200 and b"boot=live" in script and f"fetch=http://{SERVER}:{PORT}/live/{SQUASHFS}".encode() in script
        assert b"longhaul.seed=" in script and f"BOOTIF=01-{S1_MAC.replace(':', '-')}".encode() in script
        assert http(lan["a"], f"/host/{STRANGER.replace(':', '-')}.ipxe")[0] == 404
        status, seed = http(lan["a"], "/seed/S1/firstboot.toml")
        assert status == 200
        seed_data = tomllib.loads(seed.decode())
        assert seed_data["name"] == "S1" and seed_data["role"] == "sender"
        assert {"mac": S1_MAC, "address": "10.231.1.11/24"} in seed_data["interfaces"]
        assert {"mac": "52:54:00:aa:01:11", "name": "eth1", "address": "10.221.1.2/24"} in seed_data["interfaces"]
        assert seed_data["routes"] == [{"to": "10.222.1.0/24", "via": "10.221.1.1"}]
        assert http(lan["a"], "/seed/S1/S1_ed25519")[0] == 200
        assert http(lan["a"], "/seed/D1/firstboot.toml")[0] == 403        # another host's seed
        assert http(lan["a"], "/../../etc/passwd")[0] == 404
        status, data = http(lan["a"], f"/live/{SQUASHFS}")
        assert status == 200 and data == (lan["image"] / SQUASHFS).read_bytes()

        shown = json.loads(sh(*cli("netboot", "status", "--json")).stdout)
        mine = next(s for s in shown if s["interface"] == "srva")
        s1 = next(h for h in mine["served"] if h["host"] == "S1")
        assert s1["leased"] and s1["files"][f"/live/{SQUASHFS}"] == 3 << 20
        assert not next(h for h in mine["served"] if h["host"] == "D1")["leased"]
        known = (lan["dir"] / "known_hosts").read_text()
        assert "10.231.1.11 ssh-ed25519 " in known and "10.231.1.21 ssh-ed25519 " in known
    finally:
        stopped, out, err = netboot_lan.stop(proc, "srva")
    assert stopped.returncode == 0 and f"stopped pid {proc.pid}" in stopped.stdout, (stopped.stdout, stopped.stderr)
    assert proc.returncode == 0, err
    assert "serving 2 hosts on srva" in out
    assert not service.state_path("srva").exists()


def test_a_killed_server_s_dnsmasq_and_http_are_ended_by_clean(lan):
    proc = serve(lan)
    pids = [json.loads(line)["pid"] for line in Path("/run/longhaul/netboot-srva.pids").read_text().splitlines()]
    assert len(pids) == 2                                           # the HTTP server and dnsmasq
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)      # SIGKILL ran no teardown
    cleaned = sh(*cli("clean"), check=False)
    assert cleaned.returncode == 0, cleaned.stderr
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout=10, what="dnsmasq and http gone")
    assert not Path("/run/longhaul/netboot-srva.pids").exists() and not service.state_path("srva").exists()


def test_beside_a_facility_s_dhcp_server_it_answers_as_a_proxy_and_gives_no_lease(lan):
    """--proxy: dnsmasq takes its proxy-DHCP arguments and starts; a DHCP client (not a PXE one)
    then gets no lease from it, which is the facility server's to give. PXE ROMs' exchanges with
    the proxy beside a facility's DHCP server: tests/system/test_netboot_proxy.py."""
    proc = serve(lan, "srva", "--proxy")
    try:
        rc, lease = dhcp(lan["a"], "cla", S1_MAC, lan["dir"] / "lease.txt")
        assert rc != 0 and "bound" not in lease, lease
        assert "proxy" in (service.STATE_DIR / "srva" / "dnsmasq.log").read_text()
    finally:
        stopped, out, err = netboot_lan.stop(proc, "srva")
    assert stopped.returncode == 0, stopped.stderr
    assert proc.returncode == 0 and "proxy DHCP" in out, (out, err)

