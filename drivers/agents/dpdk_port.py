"""Hand a PCI NIC port to DPDK for one burst and give it back: runs on the sender, as root.

    python -m longhaul.drivers.agents.dpdk_port bind 0000:00:10.0 --hugepages-mb 128 --state F
    python -m longhaul.drivers.agents.dpdk_port restore --state F

bind records what it found in F (JSON) before it changes anything, then:
  * binds the port to vfio-pci where the kernel has an IOMMU (/sys/kernel/iommu_groups is not
    empty), else to uio_pci_generic (a VM without a virtual IOMMU), through the device's
    driver_override, so no other device of the same vendor/model is touched; a port already on a
    DPDK driver (bound by the facility) is used as it is and left so;
  * refuses a port whose kernel interface carries an address: that is a test or management
    interface, and taking it away would cut the lab or the session;
  * reserves 2 MB huge pages until the free ones cover --hugepages-mb, and mounts hugetlbfs at
    /dev/hugepages if nothing has it mounted.
restore puts back exactly what F says: the kernel driver (or none) with the interface's name and
link state (the kernel names a re-probed device afresh: eth2, not the dpdk0 first boot gave it), the
huge page count, the mount; it fails when pages are still held (a DPDK process's hugetlbfs files).
Each prints one JSON line saying what it did; a failure exits 1 with the reason on stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

SYS_PCI = Path("/sys/bus/pci")
SYS_CLASS_NET = Path("/sys/class/net")
IOMMU_GROUPS = Path("/sys/kernel/iommu_groups")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
HUGE_MOUNT = "/dev/hugepages"
NETDEV_WAIT_S = 5.0
DPDK_DRIVERS = ("vfio-pci", "uio_pci_generic", "igb_uio")


class PortError(RuntimeError):
    pass


def driver_of(pci: str) -> str | None:
    link = SYS_PCI / "devices" / pci / "driver"
    return os.path.basename(os.readlink(link)) if link.exists() else None


def dpdk_driver() -> str:
    """vfio-pci needs an IOMMU (or the unsafe no-IOMMU mode, which longhaul does not switch on)."""
    return "vfio-pci" if IOMMU_GROUPS.is_dir() and any(IOMMU_GROUPS.iterdir()) else "uio_pci_generic"


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's huge page lines -> {'HugePages_Total': n, 'HugePages_Free': n, 'Hugepagesize': kB}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("HugePages_Total", "HugePages_Free", "Hugepagesize"):
            out[key] = int(value.split()[0])
    return out


def pages_wanted(info: dict[str, int], megabytes: int) -> int | None:
    """The nr_hugepages that leaves `megabytes` free, or None when enough are free already."""
    need = math.ceil(megabytes * 1024 / info["Hugepagesize"])
    if info["HugePages_Free"] >= need:
        return None
    return info["HugePages_Total"] + need - info["HugePages_Free"]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise PortError(f"writing {text.strip()!r} to {path}: {exc.strerror}") from None


def _addresses(ifname: str) -> list[str]:
    shown = subprocess.run(["ip", "-j", "addr", "show", "dev", ifname], capture_output=True, text=True, check=False)
    return [a["local"] for link in json.loads(shown.stdout or "[]") for a in link.get("addr_info", [])
            if a.get("scope") != "link"]


def _netdevs(pci: str) -> list[dict]:
    """The kernel interfaces of a PCI device, also those one bus below it (virtio-net's netdev
    belongs to the virtio device under the PCI function)."""
    root = os.path.realpath(SYS_PCI / "devices" / pci)
    found = []
    for name in sorted(os.listdir(SYS_CLASS_NET)):
        device = SYS_CLASS_NET / name / "device"
        if device.exists() and (os.path.realpath(device) + "/").startswith(root + "/"):
            up = bool(int((SYS_CLASS_NET / name / "flags").read_text(), 16) & 1)
            found.append({"name": name, "up": up})
    return found


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PortError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


def _rename_back(pci: str, netdevs: list[dict]) -> None:
    deadline = time.monotonic() + NETDEV_WAIT_S
    while len(_netdevs(pci)) < len(netdevs) and time.monotonic() < deadline:   # the driver registers them
        time.sleep(0.05)
    for now, was in zip(_netdevs(pci), netdevs):
        if now["name"] != was["name"]:
            _ip("link", "set", "dev", now["name"], "name", was["name"])
        if was["up"]:
            _ip("link", "set", "dev", was["name"], "up")


def _rebind(pci: str, driver: str | None) -> None:
    """Move the device to `driver` (None: to whatever the kernel picks without an override)."""
    dev = SYS_PCI / "devices" / pci
    _write(dev / "driver_override", (driver or "") + "\n")
    if driver_of(pci):
        _write(dev / "driver" / "unbind", pci)
    _write(SYS_PCI / "drivers_probe", pci)


def bind(pci: str, megabytes: int, state_file: Path) -> dict:
    dev = SYS_PCI / "devices" / pci
    if not dev.exists():
        raise PortError(f"no PCI device {pci} on this host (lspci -D lists them)")
    before = driver_of(pci)
    state = {"pci": pci, "driver_before": before, "rebound": False, "mounted": False,
             "nr_hugepages_before": int(NR_HUGEPAGES.read_text())}
    if before not in DPDK_DRIVERS:
        state["netdevs"] = _netdevs(pci)
        for ifname in [n["name"] for n in state["netdevs"]]:
            used = _addresses(ifname)
            if used:
                raise PortError(f"{pci} is {ifname}, which has {', '.join(used)}: a DPDK port must be idle "
                                "(no address), or it is a test or management interface")
    state_file.parent.mkdir(parents=True, exist_ok=True)     # the burst's workdir, made here on a remote host
    state_file.write_text(json.dumps(state))        # from here on, restore knows what to put back
    if before not in DPDK_DRIVERS:
        driver = dpdk_driver()
        loaded = subprocess.run(["modprobe", driver], capture_output=True, text=True, check=False)
        if loaded.returncode != 0:
            raise PortError(f"modprobe {driver}: {loaded.stderr.strip()}")
        state["rebound"] = True
        state_file.write_text(json.dumps(state))
        _rebind(pci, driver)
        if driver_of(pci) != driver:
            raise PortError(f"{pci} did not bind to {driver} (now {driver_of(pci) or 'no driver'}; dmesg says why)")
    if not any(line.split()[2] == "hugetlbfs" for line in Path("/proc/mounts").read_text().splitlines()):
        os.makedirs(HUGE_MOUNT, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "hugetlbfs", "nodev", HUGE_MOUNT], capture_output=True, text=True)
        if mounted.returncode != 0:
            raise PortError(f"mount hugetlbfs on {HUGE_MOUNT}: {mounted.stderr.strip()}")
        state["mounted"] = True
        state_file.write_text(json.dumps(state))
    wanted = pages_wanted(meminfo(Path("/proc/meminfo").read_text()), megabytes)
    if wanted is not None:
        _write(NR_HUGEPAGES, str(wanted))
        info = meminfo(Path("/proc/meminfo").read_text())
        if pages_wanted(info, megabytes) is not None:
            raise PortError(f"{megabytes} MB of huge pages wanted; the kernel gave {info['HugePages_Free']} free "
                            f"{info['Hugepagesize']} kB pages (too little or too fragmented memory)")
    return {**state, "driver": driver_of(pci), "nr_hugepages": int(NR_HUGEPAGES.read_text())}


def restore(state_file: Path) -> dict:
    if not state_file.exists():
        return {"restored": "nothing recorded"}
    state = json.loads(state_file.read_text())
    pci, problems = state["pci"], []
    if state["rebound"]:
        try:
            _rebind(pci, None)
        except PortError as exc:
            problems.append(str(exc))
        if driver_of(pci) != state["driver_before"]:
            problems.append(f"{pci} is on {driver_of(pci) or 'no driver'}, was {state['driver_before'] or 'none'}")
        else:
            try:
                _rename_back(pci, state.get("netdevs", []))
            except PortError as exc:
                problems.append(str(exc))
    try:
        _write(NR_HUGEPAGES, str(state["nr_hugepages_before"]))
        held = meminfo(Path("/proc/meminfo").read_text())["HugePages_Total"]
        if held != state["nr_hugepages_before"]:
            problems.append(f"{held} huge pages still held, {state['nr_hugepages_before']} before "
                            "(a DPDK process's files in hugetlbfs?)")
    except PortError as exc:
        problems.append(str(exc))
    if state["mounted"]:
        done = subprocess.run(["umount", HUGE_MOUNT], capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(f"umount {HUGE_MOUNT}: {done.stderr.strip()}")
    if problems:
        raise PortError("; ".join(problems))
    state_file.unlink()
    return {"restored": pci, "driver": driver_of(pci), "nr_hugepages": int(NR_HUGEPAGES.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpdk_port", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    b = sub.add_parser("bind")
    b.add_argument("pci")
    b.add_argument("--hugepages-mb", type=int, required=True)
    b.add_argument("--state", type=Path, required=True)
    r = sub.add_parser("restore")
    r.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        done = bind(args.pci, args.hugepages_mb, args.state) if args.action == "bind" else restore(args.state)
    except PortError as exc:
        print(f"dpdk_port {args.action}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(done), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
