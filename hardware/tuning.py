"""End-host tuning plans: congestion control and TCP buffer limits as sysctl argv lists.

Buffer names follow seed 001 (section 2): `default` leaves the kernel's autotuning limits alone
(about 244 KB per socket), `normal` allows 256 MB and `large` 1 GB; an integer is bytes. The limits
are raised; the sockets still autotune up to them (iperf3 gets -w only for explicit bytes).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from longhaul.hardware.verdicts import KERNEL_SH, kernel_feature, kernel_lines

# The kernel's TCP congestion controls that Linux builds as modules (net/ipv4/tcp_<name>.c): what a
# machine's preflight looks for beyond the registered ones (a stock Debian kernel registers reno
# and cubic, and loads htcp or scalable only when asked for them)
KERNEL_CCA_MODULES = ("bbr", "bic", "cdg", "dctcp", "highspeed", "htcp", "hybla", "illinois", "lp", "nv",
                      "scalable", "vegas", "veno", "westwood", "yeah")

# Seed 001 section 2: default ~244 KB (left to the kernel), normal 256 MB, large 1 GB.
BUFFER_BYTES = {"normal": 256 * 2**20, "large": 2**30}


def buffer_limit(buffer) -> int | None:
    if buffer == "default":
        return None
    if isinstance(buffer, int):
        return buffer
    return BUFFER_BYTES[buffer]


def loadable_ccas(found: str) -> tuple[str, ...]:
    """The congestion controls KERNEL_SH's output (`tcp TCP_CONG <names>`) finds as module files not
    yet loaded."""
    return tuple(name for name, evidence in kernel_lines(found).items()
                 if kernel_feature(evidence)[0] == "loadable")


def local_loadable_ccas(names: tuple[str, ...] = KERNEL_CCA_MODULES) -> tuple[str, ...]:
    """This machine's: what a run may load (modprobe tcp_<name>) for a cell that names it."""
    try:
        done = subprocess.run(["sh", "-c", KERNEL_SH, "sh", "tcp", "TCP_CONG", *names],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return loadable_ccas(done.stdout)


def host_sysctls(cca: str, buffer, allowed_ccas: list[str], may_allow: bool = False) -> dict[str, str]:
    """A namespace may only default to an algorithm the host allows (tcp_allowed_congestion_control
    is global, and changing it would reach beyond the lab); otherwise the namespace keeps its
    default and every flow sets its algorithm on its own socket (iperf3 -C), which root may do.
    may_allow: a host of its own (a real host, a VM) whose allowed list longhaul may extend for the
    run (recorded and restored like every other sysctl here), so the cell's CCA is its default."""
    settings = {
        # a flow's cwnd must not carry over between trials through the route metrics cache
        "net.ipv4.tcp_no_metrics_save": "1",
    }
    if may_allow:
        if cca not in allowed_ccas:
            allowed_ccas = [*allowed_ccas, cca]
        # written even where it already allows it, so a lab retuned to another algorithm rewrites
        # the same keys (Lab.retune)
        settings["net.ipv4.tcp_allowed_congestion_control"] = " ".join(allowed_ccas)
    if cca in allowed_ccas:
        settings["net.ipv4.tcp_congestion_control"] = cca
    limit = buffer_limit(buffer)
    if limit is not None:
        settings.update({
            "net.core.rmem_max": str(limit),
            "net.core.wmem_max": str(limit),
            "net.ipv4.tcp_rmem": f"4096 131072 {limit}",
            "net.ipv4.tcp_wmem": f"4096 16384 {limit}",
        })
    return settings


def router_sysctls() -> dict[str, str]:
    return {"net.ipv4.ip_forward": "1"}


def sysctl_argv(settings: dict[str, str]) -> list[list[str]]:
    return [["sysctl", "-q", "-w", f"{key}={value}"] for key, value in settings.items()]


def local_ccas(kind: str = "available") -> tuple[str, ...]:
    """This machine's kernel's congestion controls: `available` (registered) or `allowed` (what a
    namespace may default to)."""
    try:
        text = Path(f"/proc/sys/net/ipv4/tcp_{kind}_congestion_control").read_text()
    except OSError:
        return ()
    return tuple(text.split())
