"""longhaul's own congestion controls, in BPF (hardware/bpfcca/, built by the setup into build/bpf):
the papers' algorithms where a kernel lacks them (H-TCP and Scalable TCP as the kernel defines them;
this machine's kernel has only reno, cubic and bbr and loads no modules) and seed 002's fractional
Reno, which no kernel has. Each has a name of its own (`lh_...`, never a kernel module's), which is
what a profile's `cca` names and what sockets report.

A BPF congestion control is registered in a kernel, not a namespace: a run registers the ones its
cells name that the kernel does not already offer, for its whole session, and unregisters them at
its end; the names it registered are written beside its run marker (/run/longhaul/<tag>.bpf), so
`longhaul clean` unregisters what a killed run left, unless a live run holds it too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from longhaul.core.paths import REPO
from longhaul.hardware import run_marker
from longhaul.hardware.tuning import local_ccas

log = logging.getLogger(__name__)

# $LONGHAUL_BPF_DIR moves it (a test of a machine where none is built)
BUILD_BPF = Path(os.environ.get("LONGHAUL_BPF_DIR") or REPO / "build" / "bpf")
BTF = Path("/sys/kernel/btf/vmlinux")
JIT = Path("/proc/sys/net/core/bpf_jit_enable")
NETDEV_BACKLOG = Path("/proc/sys/net/core/netdev_max_backlog")


@dataclass(frozen=True)
class BpfCca:
    name: str                   # the algorithm's name in the kernel once registered
    stands_for: str | None      # the kernel module it is written after (None: no kernel has it)
    what: str
    # seed 002's fractional streams: Reno whose congestion-avoidance increase is 1/divisor of its own
    # (the paper's "virtual RTT multiplier"); None for the others
    increase_divisor: int | None = None

    @property
    def object(self) -> Path:
        return BUILD_BPF / f"{self.name}.bpf.o"

    def sha256(self) -> str | None:
        try:
            return hashlib.sha256(self.object.read_bytes()).hexdigest()
        except OSError:
            return None


BPF_CCAS = {cca.name: cca for cca in (
    BpfCca("lh_htcp", "htcp", "H-TCP as net/ipv4/tcp_htcp.c (RTT scaling and bandwidth switch on), in BPF"),
    BpfCca("lh_scalable", "scalable", "Scalable TCP as net/ipv4/tcp_scalable.c (a = 0.01, b = 1/8), in BPF"),
    BpfCca("lh_frac1", "reno", "Reno itself in BPF (a fractional stream of factor 1): BPF's cost beside the kernel's",
           1),
    BpfCca("lh_frac10", None, "seed 002's fractional stream: Reno with 1/10 of its increase, in BPF", 10),
    BpfCca("lh_frac100", None, "seed 002's fractional stream: Reno with 1/100 of its increase, in BPF", 100),
)}


def stand_in(cca: str) -> str | None:
    """The BPF congestion control written after kernel module `cca` (H-TCP, Scalable TCP), if any;
    Reno has its own in every kernel."""
    return next((b.name for b in BPF_CCAS.values() if b.stands_for == cca and cca != "reno"), None)


def unavailable_reason() -> str | None:
    """Why this machine cannot register BPF congestion controls (None: it can)."""
    if os.geteuid() != 0:
        return "registering a BPF congestion control needs root (CAP_BPF and CAP_NET_ADMIN)"
    if not BTF.exists():
        return f"the kernel has no BTF ({BTF} is missing)"
    try:
        jit = JIT.read_text().strip()
    except OSError:
        if not _in_first_netns():
            jit = "unseen"      # a namespace's /proc/sys/net has no JIT knob: bpftool finds out at registration
        else:
            return f"the kernel has no BPF JIT ({JIT} is missing)"
    if jit == "0":
        return f"the BPF JIT is off ({JIT} = 0; struct_ops needs it)"
    if _bpftool() is None:
        return "bpftool is not installed (make setup installs it)"
    return None


def _in_first_netns() -> bool:
    """Whether this process sees the machine's own network namespace (an SSH host that is a
    namespace of a bigger machine, as in tests/system/test_hosts_lab.py, does not): the JIT's knob,
    like netdev_max_backlog, is only in the first one's /proc/sys/net/core (/proc/1/ns/net, the
    direct test, is not readable in every container)."""
    return NETDEV_BACKLOG.exists()


def loadable() -> tuple[str, ...]:
    """The BPF congestion controls this machine can register: built, and BPF allowing it."""
    if unavailable_reason() is not None:
        return ()
    return tuple(name for name, cca in BPF_CCAS.items() if cca.object.is_file())


def missing_reason(name: str) -> str:
    """Why `name`, a BPF congestion control, cannot run here."""
    return unavailable_reason() or f"{BPF_CCAS[name].object} is not built (make setup builds it)"


def kernel_ccas() -> tuple[str, ...]:
    return local_ccas()


def _bpftool() -> str | None:
    """bpftool lives in sbin, which a user's PATH may leave out."""
    return shutil.which("bpftool", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()[-300:]}")


def register(name: str) -> None:
    _run([_bpftool() or "bpftool", "struct_ops", "register", str(BPF_CCAS[name].object)])


def unregister(name: str) -> None:
    """The struct_ops map of `name` (the objects name their map after the algorithm)."""
    _run([_bpftool() or "bpftool", "struct_ops", "unregister", "name", name])


def _held(tag: str) -> Path:
    return run_marker.STATE_DIR / f"{tag}.bpf"


def _holders(alive: bool) -> list[str]:
    """The tags of runs holding BPF congestion controls whose owner is (or is not) alive."""
    return [p.stem for p in run_marker.holds(".bpf", alive)]


def _holdings(tags) -> set[str]:
    names: set[str] = set()
    for tag in tags:
        try:
            names |= set(_held(tag).read_text().split())
        except OSError:
            continue
    return names


class Holding:
    """The BPF congestion controls a run registered, held for its session (hardware/bpf_ccas.py's
    docstring): `ensure` registers what the kernel lacks, once, when a lab is first built (after
    every preflight, so a refused run sets up nothing); `close` unregisters them unless another
    live run holds them."""

    def __init__(self, tag: str):
        self.tag = tag
        self.mine: list[str] = []

    def ensure(self, names) -> None:
        for name in dict.fromkeys(names):
            if name in BPF_CCAS and name not in self.mine and name not in kernel_ccas():
                # the hold is written before the registration: a SIGKILL between the two leaves
                # nothing that `longhaul clean` cannot see
                self.mine.append(name)
                run_marker.STATE_DIR.mkdir(parents=True, exist_ok=True)
                _held(self.tag).write_text("\n".join(self.mine) + "\n")
                register(name)

    def close(self) -> None:
        _held(self.tag).unlink(missing_ok=True)
        still = _holdings(_holders(alive=True))
        for name in self.mine:
            if name not in still and name in kernel_ccas():
                try:
                    unregister(name)
                except RuntimeError as exc:     # the teardown goes on; clean finds it again
                    log.error("BPF congestion control %s stays registered: %s", name, exc)
        self.mine = []


@contextmanager
def held(tag: str):
    holding = Holding(tag)
    try:
        yield holding
    finally:
        holding.close()


def leftovers(remove: bool) -> list[str]:
    """BPF congestion controls that runs killed without a teardown registered and no live run holds."""
    stale = _holders(alive=False)
    still = _holdings(_holders(alive=True))
    found = sorted(name for name in _holdings(stale) if name not in still and name in kernel_ccas())
    if remove:
        for name in found:
            unregister(name)
        for tag in stale:
            _held(tag).unlink(missing_ok=True)
    return [f"BPF congestion control {name}" for name in found]
