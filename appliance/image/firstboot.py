#!/usr/bin/python3
"""longhaul-firstboot: give a booted appliance its identity, from a small seed.

Runs at every boot before sshd (longhaul-firstboot.service); only the Python standard library.
The seed is read, later sources overriding earlier ones:

1. /etc/longhaul/firstboot.toml (edit it in the image before flashing, or it is the copy kept
   from an earlier boot);
2. firstboot.toml on a file system labelled LHSEED (a USB stick's partition, a VM's seed disk),
   with any files it names (host keys) beside it; copied to /etc/longhaul/ to persist;
3. a seed served over HTTP, named on the kernel command line by longhaul.seed=URL/ (a netbooted
   host: `longhaul netboot` serves URL/firstboot.toml and the host key it names); copied to
   /etc/longhaul/seed like a disk's;
4. the kernel command line: longhaul.name=R1 longhaul.role=router
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
    [schedule]                        # controllers only: a regression suite, unattended
    suite = "regression-nightly"      # profiles/<suite>.toml of the seeded config
    on_calendar = "Mon..Fri 02:00"    # a systemd calendar spec; optional
    on_kernel_change = true           # run it at boot when the kernel is new to it; optional

A controller's [schedule] is installed by the same command a facility runs by hand,
`/usr/local/bin/longhaul schedule SUITE --config /etc/longhaul/config.toml [--on-calendar SPEC]
[--on-kernel-change]`, so the appliance gets the very units `longhaul schedule` makes
(appliance/schedule/units.py: a timer, a boot-time unit, both verified). At later boots it is
skipped when this image revision installed the same schedule and its units are still there.
Dropping [schedule] from the seed leaves them in place (`longhaul schedule SUITE --remove` undoes
them). A scheduled controller does not also run its config at every boot
(longhaul-controller.service): the two would share the lab.

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
import urllib.request
from pathlib import Path

ROLES = ("sender", "receiver", "router", "generator", "controller")
SEED_LABEL = "LHSEED"
ETC = Path("/etc/longhaul")
LONGHAUL = "/usr/local/bin/longhaul"
UNIT_DIR = Path("/etc/systemd/system")
SCHEDULE_KEYS = {"suite": str, "on_calendar": str, "on_kernel_change": bool}
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
    allowed = {"name", "role", "authorized_keys", "host_key", "interfaces", "routes", "sysctl", "schedule"}
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
    if "schedule" in seed:
        validate_schedule(seed["schedule"], seed.get("role", "sender"))


def validate_schedule(schedule: dict, role: str) -> None:
    """The shape only; the suite, calendar and units are checked by `longhaul schedule` itself."""
    if role != "controller":
        raise SeedError(f"schedule: only a controller runs suites (role = {role!r})")
    if not isinstance(schedule, dict) or not isinstance(schedule.get("suite"), str):
        raise SeedError("schedule: needs suite = \"<profile name>\"")
    for key, value in schedule.items():
        if key not in SCHEDULE_KEYS or not isinstance(value, SCHEDULE_KEYS[key]):
            raise SeedError(f"schedule.{key} = {value!r}: allowed {', '.join(f'{k} ({t.__name__})' for k, t in SCHEDULE_KEYS.items())}")
    if "on_calendar" not in schedule and not schedule.get("on_kernel_change"):
        raise SeedError("schedule: needs on_calendar, on_kernel_change = true, or both")


def schedule_argv(schedule: dict) -> list[str]:
    """The `longhaul schedule` command that installs a seed's [schedule]."""
    argv = [LONGHAUL, "schedule", schedule["suite"], "--config", str(ETC / "config.toml")]
    if "on_calendar" in schedule:
        argv += ["--on-calendar", schedule["on_calendar"]]
    if schedule.get("on_kernel_change"):
        argv.append("--on-kernel-change")
    return argv


def schedule_units(schedule: dict) -> list[Path]:
    """The unit files `longhaul schedule` writes for it (appliance/schedule/units.py's names)."""
    base = UNIT_DIR / f"longhaul-suite-{schedule['suite']}"
    return ([Path(f"{base}.timer")] if "on_calendar" in schedule else []) + (
        [Path(f"{base}-boot.service")] if schedule.get("on_kernel_change") else [])


def install_schedule(schedule: dict) -> bool:
    """Runs `longhaul schedule` unless this image revision already installed this very schedule
    and its units are there: longhaul's start-up takes about 30 s under emulation, and sshd waits
    for first boot. False when kept as it was."""
    stamp = json.dumps({"argv": schedule_argv(schedule), "image": _text(ETC / "image-revision")})
    if _text(ETC / "schedule.installed") == stamp and all(p.exists() for p in schedule_units(schedule)):
        return False
    # bounded: a stuck install must not hold the boot
    done = subprocess.run(schedule_argv(schedule), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SeedError(f"schedule: longhaul schedule exited {done.returncode}: "
                        + " ".join((done.stderr or done.stdout).split())[-300:])
    (ETC / "schedule.installed").write_text(stamp)
    return True


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


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


HOSTS_MARK = "# longhaul-firstboot"


def hosts_file(current: str, seed: dict) -> str:
    """/etc/hosts with the host's own test addresses under its name (a tool that looks up the
    address it serves on, GridFTP's server, needs it to resolve: readiness's "name of ADDR"); the
    lines of an earlier boot are replaced, everything else is kept."""
    kept = [line for line in current.splitlines() if not line.endswith(HOSTS_MARK)]
    name = seed.get("name")
    ours = [f"{iface['address'].split('/')[0]}\t{name}\t{HOSTS_MARK}"
            for iface in seed.get("interfaces", []) if name and iface.get("address")]
    return "\n".join(kept + ours) + "\n"


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


def seed_url(cmdline: str) -> str | None:
    for word in cmdline.split():
        if word.startswith("longhaul.seed="):
            return word.split("=", 1)[1]
    return None


def fetch_seed(url: str, attempts: int = 30) -> tuple[dict, Path]:
    """firstboot.toml at URL and the host key it names, into /etc/longhaul/seed. The management
    interface came up in the initramfs (the root was fetched through it); a server that is
    restarting gets a few seconds."""
    base = url if url.endswith("/") else url + "/"

    def get(name: str) -> bytes:
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(base + name, timeout=10) as r:
                    return r.read()
            except OSError:
                if attempt == attempts - 1:
                    raise
                time.sleep(1)
        raise OSError(f"{base}{name}: no answer")

    text = get("firstboot.toml").decode()
    seed = tomllib.loads(text)
    keep = ETC / "seed"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True, mode=0o700)
    (keep / "firstboot.toml").write_text(text)
    if seed.get("host_key"):
        name = Path(seed["host_key"]).name
        (keep / name).write_bytes(get(name))
        os.chmod(keep / name, 0o600)
    return seed, keep


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


def install_controller(seed_dir: Path | None, run_at_boot: bool = True) -> None:
    """The controller unit runs /etc/longhaul/config.toml: the seed may carry it, its profiles/
    and its hardware/ inventory and keys. A scheduled controller does not: its suite's units
    decide when the lab runs, and a run of the config at every boot would share the lab with them."""
    marker = ETC / "controller"
    if run_at_boot:
        marker.touch()
    else:
        marker.unlink(missing_ok=True)
    if seed_dir is None:
        return
    if (seed_dir / "config.toml").exists():
        shutil.copy2(seed_dir / "config.toml", ETC / "config.toml")
    for sub in ("profiles", "hardware"):
        if (seed_dir / sub).is_dir():
            shutil.copytree(seed_dir / sub, ETC / sub, dirs_exist_ok=True)


EFI_DIR = Path("/sys/firmware/efi")
# the UEFI global variable SecureBoot: 4 bytes of attributes, then 1 when Secure Boot is on
SECURE_BOOT_VAR = EFI_DIR / "efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def firmware(efi_dir: Path = EFI_DIR, secure_boot_var: Path = SECURE_BOOT_VAR) -> dict:
    """How this boot came about, read from the booted kernel (never assumed from the image):
    UEFI where the kernel has EFI runtime services, else legacy BIOS; Secure Boot as the firmware's
    SecureBoot variable says (None where it cannot be read)."""
    if not efi_dir.is_dir():
        return {"firmware": "bios", "secure_boot": False}
    try:
        value = secure_boot_var.read_bytes()
    except OSError:
        return {"firmware": "uefi", "secure_boot": None}
    return {"firmware": "uefi", "secure_boot": len(value) >= 5 and value[4] == 1}


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
        cmdline = Path("/proc/cmdline").read_text()
        served: dict = {}
        url = seed_url(cmdline)
        if url:
            served, seed_dir = fetch_seed(url)
        seed = merge(baked, disk, served, from_cmdline(cmdline))
        validate(seed)
        links = wait_for_links(seed)
        for argv in network_plan(seed, links):
            subprocess.run(argv, check=True, capture_output=True)
        fingerprint = install_identity(seed, seed_dir)
        hosts = Path("/etc/hosts")
        hosts.write_text(hosts_file(_text(hosts) or "127.0.0.1\tlocalhost\n", seed))
        role = seed.get("role", "sender")
        ETC.mkdir(exist_ok=True)
        (ETC / "role").write_text(role + "\n")
        if role == "controller":
            install_controller(seed_dir, run_at_boot="schedule" not in seed)
        if "schedule" in seed:
            install_schedule(seed["schedule"])
        state = {"name": seed.get("name", ""), "role": role, "kernel": os.uname().release,
                 "addresses": [i.get("address") for i in seed.get("interfaces", []) if i.get("address")],
                 "host_key": fingerprint, "schedule": seed.get("schedule", {}).get("suite"), **firmware()}
        Path("/run/longhaul").mkdir(parents=True, exist_ok=True)
        Path("/run/longhaul/firstboot.json").write_text(json.dumps(state) + "\n")
        report("longhaul-firstboot: ready " + json.dumps(state))
        return 0
    except (SeedError, OSError, subprocess.SubprocessError, tomllib.TOMLDecodeError) as exc:
        report(f"longhaul-firstboot: FAILED {exc}")
        print(f"longhaul-firstboot: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
