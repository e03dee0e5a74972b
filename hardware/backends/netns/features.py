"""Preflight: what this machine can do, detected (never assumed) in a scratch namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from longhaul.hardware.bpf_ccas import BPF_CCAS, loadable
from longhaul.hardware.tuning import local_ccas, local_loadable_ccas

TOOLS = ("ip", "tc", "iptables", "iperf3", "fping", "ss", "sysctl")


@dataclass(frozen=True)
class Features:
    root: bool
    netem: bool
    tbf: bool
    htb: bool
    nfqueue: bool
    congestion_controls: tuple[str, ...]
    allowed_congestion_controls: tuple[str, ...] = ()
    tools: dict[str, str | None] = field(default_factory=dict)
    delayline: str | None = None  # path of the built helper, if present
    # net.core.rmem_max/wmem_max exist in a namespace (per-namespace on newer kernels); where they
    # do not (Debian 12's 6.1) they are the machine's own, which the lab leaves alone
    core_mem_in_netns: bool = True
    # longhaul's BPF congestion controls this machine can register for a run (hardware/bpf_ccas.py)
    bpf_ccas: tuple[str, ...] = ()
    # the kernel's own that are modules not yet loaded (a stock Debian kernel's htcp, scalable):
    # a run loads those its cells name (load_modules) and the manifest says which it loaded
    loadable_ccas: tuple[str, ...] = ()
    modules_loaded: tuple[str, ...] = ()

    @property
    def runnable_ccas(self) -> tuple[str, ...]:
        """What a cell's flows may name here: the kernel's, loaded or loadable, and the BPF ones a
        run registers."""
        return tuple(dict.fromkeys(self.congestion_controls + self.loadable_ccas + self.bpf_ccas))

    @property
    def delay(self) -> str:
        return "netem" if self.netem else "delayline"

    def problems(self) -> list[str]:
        """What stops the netns lab from running here, in words a user can act on."""
        out = []
        if not self.root:
            out.append("the netns lab needs root (namespaces, qdiscs, iptables)")
        out += [f"{tool} is not installed (make setup installs it)" for tool, path in self.tools.items() if not path]
        if not self.tbf:
            out.append("the tbf qdisc is not available in this kernel")
        if not self.netem and not self.nfqueue:
            out.append("neither netem nor iptables NFQUEUE is available: no way to add delay")
        if not self.netem and self.nfqueue and not self.delayline:
            out.append("no netem here and the delay-line helper is not built (make setup builds it)")
        return out

    def as_dict(self) -> dict:
        data = asdict(self)
        data["delay"] = self.delay
        data["congestion_controls"] = list(self.congestion_controls)
        data["allowed_congestion_controls"] = list(self.allowed_congestion_controls)
        data["loadable_ccas"] = list(self.loadable_ccas)
        data["modules_loaded"] = list(self.modules_loaded)
        data["bpf_ccas"] = {name: {"stands_for": BPF_CCAS[name].stands_for, "sha256": BPF_CCAS[name].sha256()}
                            for name in self.bpf_ccas}
        return data


def _ok(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def detect(delayline_path: Path | None = None) -> Features:
    tools = {tool: shutil.which(tool) for tool in TOOLS}
    root = os.geteuid() == 0
    helper = str(delayline_path) if delayline_path and os.access(delayline_path, os.X_OK) else None
    if not (root and tools["ip"] and tools["tc"]):
        return Features(root, False, False, False, False, local_ccas(), local_ccas("allowed"), tools, helper,
                        bpf_ccas=loadable(), loadable_ccas=local_loadable_ccas())
    scratch = f"lh-probe-{os.getpid()}"
    inns = ["ip", "netns", "exec", scratch]
    if not _ok(["ip", "netns", "add", scratch]):
        return Features(root, False, False, False, False, local_ccas(), local_ccas("allowed"), tools, helper,
                        bpf_ccas=loadable(), loadable_ccas=local_loadable_ccas())
    try:
        _ok(inns + ["ip", "link", "set", "lo", "up"])
        found = {}
        for kind, args in (("netem", ["netem", "delay", "1ms"]), ("tbf", ["tbf", "rate", "1mbit", "burst", "10k", "limit", "10k"]),
                           ("htb", ["htb"])):
            found[kind] = _ok(inns + ["tc", "qdisc", "add", "dev", "lo", "root", *args])
            _ok(inns + ["tc", "qdisc", "del", "dev", "lo", "root"])
        nfqueue = bool(tools["iptables"]) and _ok(
            inns + ["iptables", "-t", "mangle", "-A", "FORWARD", "-j", "NFQUEUE", "--queue-num", "7"])
        core_mem = _ok(inns + ["test", "-e", "/proc/sys/net/core/rmem_max"])
    finally:
        _ok(["ip", "netns", "del", scratch])
    return Features(root, found["netem"], found["tbf"], found["htb"], nfqueue, local_ccas(),
                    local_ccas("allowed"), tools, helper, core_mem, loadable(), local_loadable_ccas())


def load_modules(features: Features, wanted) -> Features:
    """The kernel congestion controls among `wanted` that are modules not yet loaded, loaded
    (modprobe: a socket naming one does not load it without CAP_SYS_MODULE in its namespace, and
    the sysctls take only registered ones); left loaded after the run, where sockets may still hold
    them. RuntimeError naming the module when the kernel refuses it."""
    modules = []
    for cca in dict.fromkeys(wanted):
        if cca in features.loadable_ccas and cca not in features.congestion_controls:
            done = subprocess.run(["modprobe", f"tcp_{cca}"], capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise RuntimeError(f"modprobe tcp_{cca} failed: {done.stderr.strip() or done.returncode}")
            modules.append(f"tcp_{cca}")
    if not modules:
        return features
    return replace(features, congestion_controls=local_ccas(), allowed_congestion_controls=local_ccas("allowed"),
                   loadable_ccas=tuple(c for c in features.loadable_ccas if f"tcp_{c}" not in modules),
                   modules_loaded=features.modules_loaded + tuple(modules))
