"""Captures, from the appliance image's Debian kernel, what this machine's kernel cannot show (it
has no modules, netem or fq_codel): /proc/modules with congestion-control modules loaded, netem
under htb and fq_codel in `tc -j qdisc show`, and the fingerprint agent's whole output on a Debian
host. Run as root from the repo root, holding the lab lock:

    flock /tmp/lh/lab.lock .venv/bin/python tests/data/fingerprint/vm_capture.py

One VM (TCG), the image read-only (snapshot), booted with init=/bin/sh; longhaul's drivers and
core on a second, read-only disk; a user-mode NIC with no route anywhere (restrict=on).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
IMAGE = REPO / "build" / "image"
OUT = Path(__file__).resolve().parent

GUEST = r"""
export PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
mount -t tmpfs tmpfs /run 2>/dev/null
ip link set lo up; ip link set eth0 up
modprobe tcp_bbr; modprobe tcp_htcp; modprobe sch_htb; modprobe sch_netem; modprobe sch_fq_codel
ip link add a0 type veth peer name b0; ip link set a0 up; ip link set b0 up
tc qdisc add dev a0 root handle 1: htb default 1
tc class add dev a0 parent 1: classid 1:1 htb rate 50mbit
tc qdisc add dev a0 parent 1:1 handle 10: netem delay 20ms 1ms 25% limit 1000
tc qdisc add dev b0 root fq_codel
echo ==modules; cat /proc/modules
echo ==tc; tc -j qdisc show; echo
echo ==ethtool-i; ethtool -i eth0
echo ==ethtool-k; ethtool -k eth0
echo ==cpuinfo; cat /proc/cpuinfo
echo ==agent; PYTHONPATH=/mnt python3 -m longhaul.drivers.agents.fingerprint
echo ==end
"""
FILES = {"modules": "proc_modules_debian.txt", "tc": "tc_qdisc_netem.json", "ethtool-i": "ethtool_i_virtio_debian.txt",
         "ethtool-k": "ethtool_k_virtio_debian.txt", "cpuinfo": "cpuinfo_qemu_tcg.txt", "agent": "agent_debian_vm.json"}


def staging(tmp: Path) -> Path:
    """The second disk: longhaul's package with only what the agent imports, links resolved."""
    root = tmp / "disk"
    pkg = root / "longhaul"
    pkg.mkdir(parents=True)
    shutil.copy(REPO / "package" / "__init__.py", pkg / "__init__.py")
    for sub in ("core", "drivers"):
        shutil.copytree(REPO / "package" / sub, pkg / sub, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "guest.sh").write_text(GUEST)
    image = tmp / "disk.img"
    subprocess.run(["mkfs.ext4", "-q", "-d", str(root), str(image), "64M"], check=True)
    return image


def boot(disk: Path, log: Path) -> str:
    argv = ["qemu-system-x86_64", "-machine", "pc", "-m", "1024", "-smp", "2", "-accel", "tcg",
            "-display", "none", "-monitor", "none", "-no-reboot", "-serial", "stdio",
            "-kernel", str(IMAGE / "vmlinuz"), "-initrd", str(IMAGE / "initrd.img"),
            "-append", "root=LABEL=longhaul-root ro console=ttyS0,115200n8 net.ifnames=0 init=/bin/sh",
            "-drive", f"file={IMAGE / 'longhaul.raw'},if=virtio,format=raw,snapshot=on",
            "-drive", f"file={disk},if=virtio,format=raw,readonly=on",
            "-netdev", "user,id=n0,restrict=on", "-device", "virtio-net-pci,netdev=n0,romfile="]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    os.set_blocking(proc.stdout.fileno(), False)
    text, sent, deadline = b"", False, time.monotonic() + 900
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            chunk = proc.stdout.read() or b""
            text += chunk
            if not sent and b"job control turned off" in text:
                time.sleep(2)
                proc.stdin.write(b"mount -o ro /dev/vdb /mnt && sh /mnt/guest.sh; echo o > /proc/sysrq-trigger\n")
                proc.stdin.flush()
                sent = True
            if sent and b"\n==end" in text.replace(b"\r", b""):
                break
            time.sleep(0.2 if chunk else 0.5)
    finally:
        log.write_bytes(text)
        if proc.poll() is None:
            time.sleep(3)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return text.decode(errors="replace").replace("\r", "")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        text = boot(staging(Path(tmp)), Path(tmp) / "console.log")
        parts = re.split(r"^==(\S+)\n", text, flags=re.M)
        found = dict(zip(parts[1::2], parts[2::2]))
        missing = [k for k in FILES if k not in found]
        if missing:
            print(text[-4000:], file=sys.stderr)
            print(f"missing from the console: {missing}", file=sys.stderr)
            return 1
        for key, name in FILES.items():
            body = found[key]
            if key == "agent":    # the one JSON line (the shell echoes the command before it)
                body = next(line for line in body.splitlines() if line.startswith("{")) + "\n"
            (OUT / name).write_text(body)
            print(f"wrote {OUT / name} ({len(body)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
