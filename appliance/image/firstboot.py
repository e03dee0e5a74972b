#!/usr/bin/python3
"""longhaul-firstboot: give a booted appliance its identity, from a small seed.

Runs at every boot before sshd (longhaul-firstboot.service); only the Python standard library.
The seed is read, later sources overriding earlier ones:

1. /etc/longhaul/firstboot.toml (edit it in the image before flashing, or it is the copy kept
   from an earlier boot);
2. firstboot.toml on a file system labelled LHSEED (a USB stick's partition, a VM's seed disk),
   with any files it names (host keys) beside it; copied to /etc/longhaul/ to persist;
3. the kernel command line: longhaul.name=R1 longhaul.role=router
   longhaul.mgmt=10.0.9.31/24 longhaul.mgmt_if=eth0 longhaul.gateway=10.0.9.1 (PXE).

Seed format (TOML):

    name = "R1"
    role = "router"                   # sender receiver router generator controller
    authorized_keys = ["ssh-ed25519 AAAA... controller"]
    host_key = "R1_ed25519"           # a file on the seed; otherwise ssh-keygen -A once
    [[interfaces]]
    mac = "52:54:00:00:01:02"         # or match = "eth1"
    name = "wan"                      # renamed to what the inventory calls it
    address = "10.0.0.1/30"
    [[routes]]
    to = "10.2.1.0/24"
    via = "10.0.0.2"
    [sysctl]
    "net.core.rmem_max" = 67108864    # routers get net.ipv4.ip_forward = 1 by themselves

It reports one line on the serial console (the getty is masked there) and in
/run/longhaul/firstboot.json: the name, role, addresses and host key fingerprint.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROLES = ("sender", "receiver", "router", "generator", "controller")
SEED_LABEL = "LHSEED"
ETC = Path("/etc/longhaul")
CMDLINE_KEYS = {"name": "name", "role": "role", "mgmt": "mgmt", "mgmt_if": "mgmt_if", "gateway": "gateway"}


class SeedError(ValueError):
    pass


def from_cmdline(cmdline: str) -> dict:
    """The longhaul.* parameters of a kernel command line, as seed keys."""
    seed: dict = {}
    for word in cmdline.split():
        key, sep, value = word.partition("=")
        if sep and key.startswith("longhaul.") and key[len("longhaul."):] in CMDLINE_KEYS:
            seed[CMDLINE_KEYS[key[len("longhaul."):]]] = value
    if "mgmt" in seed:
        iface = {"match": seed.pop("mgmt_if", "eth0"), "address": seed.pop("mgmt")}
        seed["interfaces"] = [iface]
    if "gateway" in seed:
        seed["routes"] = [{"to": "default", "via": seed.pop("gateway")}]
    return seed


def merge(*seeds: dict) -> dict:
    out: dict = {}
    for seed in seeds:
        for key, value in seed.items():
            if key == "sysctl":
                out.setdefault("sysctl", {}).update(value)
            else:
                out[key] = value
    return out


def validate(seed: dict) -> None:
    allowed = {"name", "role", "authorized_keys", "host_key", "interfaces", "routes", "sysctl"}
    unknown = sorted(set(seed) - allowed)
    if unknown:
        raise SeedError(f"unknown seed keys {unknown}; allowed: {sorted(allowed)}")
    if seed.get("role", "sender") not in ROLES:
        raise SeedError(f"role = {seed['role']!r}: allowed {', '.join(ROLES)}")
    for i, iface in enumerate(seed.get("interfaces", [])):
        if not ("mac" in iface or "match" in iface):
            raise SeedError(f"interfaces[{i}]: needs mac or match (the kernel's name)")
        extra = set(iface) - {"mac", "match", "name", "address", "mtu"}
        if extra:
            raise SeedError(f"interfaces[{i}]: unknown keys {sorted(extra)}")
    for i, route in enumerate(seed.get("routes", [])):
        if set(route) != {"to", "via"}:
            raise SeedError(f"routes[{i}]: needs exactly to and via")


def resolve(iface: dict, links: dict[str, str]) -> str:
    """The kernel name of a seed interface; links maps kernel name to MAC."""
    if "match" in iface:
        return iface["match"]
    wanted = iface["mac"].lower()
    for name, mac in links.items():
        if mac.lower() == wanted:
            return name
    raise SeedError(f"no interface has MAC {iface['mac']} (present: {links})")


def network_plan(seed: dict, links: dict[str, str]) -> list[list[str]]:
    """ip and sysctl argv lists that give the host its addresses, names, routes and sysctls."""
    argv: list[list[str]] = []
    sysctls = dict(seed.get("sysctl", {}))
    if seed.get("role") == "router":
        sysctls.setdefault("net.ipv4.ip_forward", 1)
    for key, value in sorted(sysctls.items()):
        argv.append(["sysctl", "-q", "-w", f"{key}={value}"])
    for iface in seed.get("interfaces", []):
        dev = resolve(iface, links)
        name = iface.get("name", dev)
        if name != dev:
            argv += [["ip", "link", "set", "dev", dev, "down"], ["ip", "link", "set", "dev", dev, "name", name]]
        if "mtu" in iface:
            argv.append(["ip", "link", "set", "dev", name, "mtu", str(iface["mtu"])])
        if "address" in iface:
            argv.append(["ip", "addr", "replace", iface["address"], "dev", name])
        argv.append(["ip", "link", "set", "dev", name, "up"])
    argv.append(["ip", "link", "set", "dev", "lo", "up"])
    for route in seed.get("routes", []):
        argv.append(["ip", "route", "replace", route["to"], "via", route["via"]])
    return argv


def present_links(sys_net: Path = Path("/sys/class/net")) -> dict[str, str]:
    out = {}
    for dev in sorted(sys_net.iterdir()):
        addr = dev / "address"
        if dev.name != "lo" and addr.exists():
            out[dev.name] = addr.read_text().strip()
    return out


def wait_for_links(seed: dict, timeout: float = 30.0) -> dict[str, str]:
    """Polls until every seeded interface has appeared (udev may still be probing NICs)."""
    deadline = time.monotonic() + timeout
    while True:
        links = present_links()
        try:
            for iface in seed.get("interfaces", []):
                dev = resolve(iface, links)
                if dev not in links and iface.get("name") not in links:
                    raise SeedError(f"interface {dev} is not there (present: {sorted(links)})")
            return links
        except SeedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_seed_disk() -> tuple[dict, Path | None]:
    """firstboot.toml of the LHSEED file system, mounted read-only for the copy."""
    dev = subprocess.run(["blkid", "-L", SEED_LABEL], capture_output=True, text=True).stdout.strip()
    if not dev:
        return {}, None
    mnt = Path("/run/longhaul/seed")
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-o", "ro", dev, str(mnt)], check=True)
    try:
        keep = ETC / "seed"
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(mnt, keep, ignore=shutil.ignore_patterns("lost+found"))
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    path = keep / "firstboot.toml"
    return (tomllib.loads(path.read_text()) if path.exists() else {}), keep


def install_identity(seed: dict, seed_dir: Path | None) -> str:
    if seed.get("name"):
        Path("/etc/hostname").write_text(seed["name"] + "\n")
        subprocess.run(["hostname", seed["name"]], check=True)
    keys = seed.get("authorized_keys", [])
    if keys:
        ssh = Path("/root/.ssh")
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_text("".join(k.strip() + "\n" for k in keys))
        os.chmod(ssh / "authorized_keys", 0o600)
    if seed.get("host_key") and seed_dir is not None:
        src = seed_dir / seed["host_key"]
        dst = Path("/etc/ssh/ssh_host_ed25519_key")
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o600)
        pub = subprocess.run(["ssh-keygen", "-y", "-f", str(dst)], check=True, capture_output=True, text=True)
        Path(str(dst) + ".pub").write_text(pub.stdout)
    key = Path("/etc/ssh/ssh_host_ed25519_key")
    if not key.exists():            # ed25519 only (sshd_config.d/longhaul.conf): RSA takes long on slow CPUs
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, capture_output=True)
    done = subprocess.run(["ssh-keygen", "-l", "-f", "/etc/ssh/ssh_host_ed25519_key.pub"],
                          capture_output=True, text=True)
    return done.stdout.strip()


def install_controller(seed_dir: Path | None) -> None:
    """The controller unit runs /etc/longhaul/config.toml: the seed may carry it, its profiles/
    and its hardware/ inventory and keys."""
    (ETC / "controller").touch()
    if seed_dir is None:
        return
    if (seed_dir / "config.toml").exists():
        shutil.copy2(seed_dir / "config.toml", ETC / "config.toml")
    for sub in ("profiles", "hardware"):
        if (seed_dir / sub).is_dir():
            shutil.copytree(seed_dir / sub, ETC / sub, dirs_exist_ok=True)


def report(line: str) -> None:
    for console in ("/dev/ttyS0", "/dev/kmsg"):
        try:
            with open(console, "w") as f:
                f.write(line + "\n")
        except OSError:
            pass


def main() -> int:
    try:
        baked = tomllib.loads((ETC / "firstboot.toml").read_text()) if (ETC / "firstboot.toml").exists() else {}
        disk, seed_dir = read_seed_disk()
        if seed_dir is None and (ETC / "seed").is_dir():
            seed_dir = ETC / "seed"          # the copy from the first boot
            disk = tomllib.loads((seed_dir / "firstboot.toml").read_text()) if (seed_dir / "firstboot.toml").exists() else {}
        seed = merge(baked, disk, from_cmdline(Path("/proc/cmdline").read_text()))
        validate(seed)
        links = wait_for_links(seed)
        for argv in network_plan(seed, links):
            subprocess.run(argv, check=True, capture_output=True)
        fingerprint = install_identity(seed, seed_dir)
        role = seed.get("role", "sender")
        ETC.mkdir(exist_ok=True)
        (ETC / "role").write_text(role + "\n")
        if role == "controller":
            install_controller(seed_dir)
        state = {"name": seed.get("name", ""), "role": role, "kernel": os.uname().release,
                 "addresses": [i.get("address") for i in seed.get("interfaces", []) if i.get("address")],
                 "host_key": fingerprint}
        Path("/run/longhaul").mkdir(parents=True, exist_ok=True)
        Path("/run/longhaul/firstboot.json").write_text(json.dumps(state) + "\n")
        report("longhaul-firstboot: ready " + json.dumps(state))
        return 0
    except (SeedError, OSError, subprocess.CalledProcessError, tomllib.TOMLDecodeError) as exc:
        report(f"longhaul-firstboot: FAILED {exc}")
        print(f"longhaul-firstboot: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
