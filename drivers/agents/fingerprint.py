"""Runs on a lab host (or the controller): this host's environment as one JSON object on stdout,
for the run manifest's `fingerprint` section (docs/results-format.md), so that two runs can say
what changed between them (a kernel upgrade, a sysctl, an offload, a tool's version).

    python -m longhaul.drivers.agents.fingerprint

Standard library only, read-only, quick (well under a second on a real host): files under /proc
and /sys, and `tc`, `ethtool` and the tools' own version output. A part that cannot be read is
`{"error": "..."}` in its place; the agent itself always prints its object and exits 0.

The parsers are pure functions of the real outputs (tests/data/fingerprint/).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from longhaul import __version__
from longhaul.core.documents import DocumentFormat
from longhaul.core.paths import BUILD_BIN

FINGERPRINT = DocumentFormat("longhaul-fingerprint", 1, "a host fingerprint")
MODULE = "longhaul.drivers.agents.fingerprint"
SECTIONS = ("kernel", "sysctl", "qdisc", "cca", "nics", "cpu", "tools", "longhaul")

SYSCTL_ROOT = Path("/proc/sys/net")
# Per-interface trees: only the all/default entries, since interface names differ per lab and
# every host would otherwise list each of its interfaces' ~80 entries.
PER_INTERFACE = ("ipv4/conf", "ipv6/conf", "ipv4/neigh", "ipv6/neigh")
SHARED_ENTRIES = ("all", "default")
# Values that change per boot or by the second, whatever the configuration: noise in a diff.
VOLATILE = frozenset({"net.core.netdev_rss_key", "net.ipv4.tcp_fastopen_key", "net.netfilter.nf_conntrack_count"})
# qdisc options that are counters, not configuration
QDISC_COUNTERS = frozenset({"direct_packets_stat"})

# How each tool tells its version (the first line of the output, stdout or else stderr). The
# controller's manifest `tools` (collectors/store/provenance.py) reads the same map.
VERSION_ARGV: dict[str, list[str]] = {
    "iperf3": ["iperf3", "--version"], "fping": ["fping", "--version"], "ip": ["ip", "-V"], "tc": ["tc", "-V"],
    "iptables": ["iptables", "--version"], "ethtool": ["ethtool", "--version"],
    "globus-url-copy": ["globus-url-copy", "-version"],     # refuses --version, says it on stderr, exit 1
    "telegraf": ["telegraf", "--version"],
}
# Where a tool is found when not on PATH: the appliance image's Telegraf and this checkout's build
# (collectors/live/telegraf.py runs the same ones).
TOOL_PLACES: dict[str, tuple[str, ...]] = {"telegraf": ("/usr/local/bin/telegraf", str(BUILD_BIN / "telegraf"))}
COMMAND_TIMEOUT_S = 10.0
# a tool's --version under emulation (TCG) took over 5 s while a lab was being built
VERSION_TIMEOUT_S = 20.0


class Unreadable(Exception):
    """A part of the fingerprint this host could not give; its message is what the section says."""


# -- the parsers (pure) --------------------------------------------------------------------------

def normalise(text: str) -> str:
    return " ".join(text.split())


def parse_ethtool_info(text: str) -> dict:
    """`ethtool -i IF`: driver, its version, firmware and bus address (None where ethtool says nothing)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip() or None
    if "driver" not in fields:
        raise Unreadable(f"ethtool -i: no driver line in {normalise(text)[:120]!r}")
    return {"driver": fields.get("driver"), "driver_version": fields.get("version"),
            "firmware": fields.get("firmware-version"), "bus_info": fields.get("bus-info")}


def parse_ethtool_features(text: str) -> dict[str, str]:
    """`ethtool -k IF`: feature -> its state as printed ("on", "off [fixed]", "off [requested on]")."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Features for ")), None)
    if start is None:
        raise Unreadable(f"ethtool -k: no features in {normalise(text)[:120]!r}")
    features = {}
    for line in lines[start + 1:]:
        key, sep, value = line.strip().partition(": ")
        if sep and key:
            features[key] = normalise(value)
    return features


def _options(options: dict, prefix: str = "") -> list[str]:
    """A qdisc's JSON options as `key=value` words; nested objects (netem's delay) as `delay.jitter=`,
    lists (pfifo_fast's priomap) as comma-joined."""
    words = []
    for key, value in options.items():
        if key in QDISC_COUNTERS:
            continue
        if isinstance(value, dict):
            words += _options(value, f"{prefix}{key}.")
        elif isinstance(value, list):
            words.append(f"{prefix}{key}=" + ",".join(str(v) for v in value))
        else:
            words.append(f"{prefix}{key}={json.dumps(value) if isinstance(value, bool) else value}")
    return words


def describe_qdisc(qdisc: dict) -> str:
    return " ".join([qdisc.get("kind", "?"), *_options(qdisc.get("options") or {})])


def parse_qdiscs(tc_json: str) -> dict[str, str]:
    """`tc -j qdisc show`: interface -> its root qdisc with options, then the others under it
    (a router's netem under htb, an ingress), `; `-separated. Handles are left out: the kernel
    picks some at random."""
    per_dev: dict[str, list[tuple[bool, str]]] = {}
    for qdisc in json.loads(tc_json):
        per_dev.setdefault(qdisc["dev"], []).append((not qdisc.get("root", False), describe_qdisc(qdisc)))
    return {dev: "; ".join(text for _, text in sorted(items, key=lambda item: item[0]))
            for dev, items in sorted(per_dev.items())}


def parse_cpuinfo(text: str) -> dict:
    """/proc/cpuinfo: the model (x86 `model name`, else what other architectures call it) and count."""
    count, model = 0, None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        if key == "processor" and value.strip().isdigit():
            count += 1
        elif model is None and key in ("model name", "Model", "cpu model", "cpu", "Hardware"):
            model = normalise(value) or None
    return {"model": model, "count": count}


def parse_modules(text: str) -> list[str]:
    """/proc/modules: the loaded congestion-control modules (tcp_*), sorted."""
    return sorted({line.split()[0] for line in text.splitlines() if line.startswith("tcp_")})


# -- reading this host ---------------------------------------------------------------------------

def command(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise Unreadable(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise Unreadable(f"{' '.join(argv)} timed out after {timeout:g} s") from None


def checked(argv: list[str]) -> str:
    res = command(argv)
    if res.returncode != 0:
        raise Unreadable(f"{' '.join(argv)}: exit {res.returncode}: {normalise(res.stderr or res.stdout)[:200]}")
    return res.stdout


def read_text(path: Path | str) -> str:
    return Path(path).read_text(errors="replace")


def read_sysctls(root: Path = SYSCTL_ROOT) -> dict[str, str]:
    """Every readable entry under root as `net.ipv4.tcp_rmem` -> its value, whitespace normalised.
    Write-only and refusing entries (route.flush, stable_secret unset) are left out."""
    out = {}
    base = root.parent
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        if rel in PER_INTERFACE:
            dirnames[:] = [d for d in dirnames if d in SHARED_ENTRIES]
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            key = ".".join(path.relative_to(base).parts)
            if key in VOLATILE:
                continue
            try:
                out[key] = normalise(path.read_text(errors="replace"))
            except OSError:
                continue
    if not out:
        raise Unreadable(f"nothing readable under {root}")
    return out


def kernel_section() -> dict:
    uname = os.uname()
    try:
        # what follows `--` is init's arguments, not the kernel's settings
        cmdline = normalise(read_text("/proc/cmdline")).partition(" -- ")[0]
    except OSError:
        cmdline = None
    return {"release": uname.release, "version": uname.version, "cmdline": cmdline}


def qdisc_section() -> dict:
    path = SYSCTL_ROOT / "core" / "default_qdisc"
    # only the first network namespace has it (a netns lab host's default is the machine's)
    default = normalise(read_text(path)) if path.exists() else None
    try:
        per_dev = parse_qdiscs(checked(["tc", "-j", "qdisc", "show"]))
    except (Unreadable, ValueError, KeyError) as exc:
        per_dev = {"error": str(exc)}
    return {"default": default, **per_dev}


def _words(path: Path) -> list[str]:
    return sorted(read_text(path).split())


def cca_section() -> dict:
    ipv4 = SYSCTL_ROOT / "ipv4"
    modules = Path("/proc/modules")
    # a kernel built without module support has neither /proc/modules nor module files
    loaded = parse_modules(read_text(modules)) if modules.exists() else []
    files_dir = Path("/lib/modules", os.uname().release, "kernel", "net", "ipv4")
    files = sorted(p.name for p in files_dir.glob("tcp_*.ko*")) if files_dir.is_dir() else []
    return {"available": _words(ipv4 / "tcp_available_congestion_control"),
            "allowed": _words(ipv4 / "tcp_allowed_congestion_control"),
            "default": normalise(read_text(ipv4 / "tcp_congestion_control")),
            "loaded_modules": loaded, "module_files": files}


def _sys_int(path: Path) -> int | None:
    """An integer attribute of /sys; None when the driver does not know (speed -1, EINVAL when down)."""
    try:
        value = int(read_text(path).strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def nic(name: str) -> dict:
    sys_dir = Path("/sys/class/net", name)
    try:
        info = parse_ethtool_info(checked(["ethtool", "-i", name]))
    except Unreadable as exc:
        info = {"driver": None, "driver_version": None, "firmware": None, "bus_info": None, "error": str(exc)}
    try:
        offloads = parse_ethtool_features(checked(["ethtool", "-k", name]))
    except Unreadable as exc:
        offloads = {"error": str(exc)}
    return {**info, "offloads": offloads, "mtu": _sys_int(sys_dir / "mtu"), "speed_mbps": _sys_int(sys_dir / "speed")}


def nics_section(pool: ThreadPoolExecutor) -> dict:
    names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    return dict(zip(names, pool.map(nic, names)))


def cpu_section() -> dict:
    cpu = parse_cpuinfo(read_text("/proc/cpuinfo"))
    cpu["count"] = cpu["count"] or os.cpu_count()
    governors = set()
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        try:
            governors.add(read_text(path).strip())
        except OSError:
            continue
    cpu["governors"] = sorted(governors)
    return cpu


def tool_version(name: str) -> str | None:
    """The first line a tool prints about its version; None when it is not here."""
    for executable in (name, *TOOL_PLACES.get(name, ())):
        path = shutil.which(executable)
        if path is None:
            continue
        try:   # by the name found (not the resolved path, which some tools echo in their line)
            res = command([executable, *VERSION_ARGV[name][1:]], timeout=VERSION_TIMEOUT_S)
        except Unreadable as exc:   # present but silent (a VM under emulation): not "absent"
            return f"({exc})"
        lines = (res.stdout.strip() or res.stderr.strip()).splitlines()
        return lines[0].strip() if lines else None
    return None


def tools_section(pool: ThreadPoolExecutor) -> dict:
    names = list(VERSION_ARGV)
    out = dict(zip(names, pool.map(tool_version, names)))
    out["python"] = f"Python {platform.python_version()}"
    return out


def guarded(part: Callable[[], dict]) -> dict:
    """One part of the fingerprint, or what kept it from being read: never the whole agent."""
    try:
        return part()
    except Exception as exc:              # any failure of one part: the others still count
        return {"error": f"{type(exc).__name__}: {exc}" if not isinstance(exc, Unreadable) else str(exc)}


def fingerprint() -> dict:
    # the commands wait on I/O, not on each other: tools and NICs beside the files, their commands
    # in a pool of their own (a part waiting on its commands never holds a worker they need)
    with ThreadPoolExecutor(max_workers=8) as commands, ThreadPoolExecutor(max_workers=2) as parts:
        tools = parts.submit(guarded, lambda: tools_section(commands))
        nics = parts.submit(guarded, lambda: nics_section(commands))
        return {**FINGERPRINT.stamp(), "kernel": guarded(kernel_section),
                "sysctl": guarded(read_sysctls), "qdisc": guarded(qdisc_section), "cca": guarded(cca_section),
                "nics": nics.result(), "cpu": guarded(cpu_section), "tools": tools.result(),
                "longhaul": {"version": __version__}}


def main() -> int:
    json.dump(fingerprint(), sys.stdout, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
