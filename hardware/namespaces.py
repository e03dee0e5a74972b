"""This machine's network namespaces as longhaul names and removes them, whichever backend made
them (the embedded lab's hosts, a qemu lab's fleet, a probe)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from longhaul.hardware.executors.process import NETNS_DIR, LocalExecutor, ProcessTable, end_pids

NETNS_ETC = Path("/etc/netns")        # per-namespace files (hosts) ip netns exec binds in


def list_namespaces() -> list[str]:
    base = Path(NETNS_DIR)
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def namespace_pids(netns: str) -> list[int]:
    try:
        out = LocalExecutor("controller", ProcessTable()).run(["ip", "netns", "pids", netns], check=False)
    except Exception:
        return []
    return [int(tok) for tok in out.stdout.split() if tok.isdigit()]


def remove_namespace(netns: str) -> None:
    """Stop whatever still runs in one of our namespaces (by pid), then delete it; the kernel
    takes its veths, bridges, qdiscs and iptables rules with it."""
    end_pids(lambda: namespace_pids(netns))
    LocalExecutor("controller", ProcessTable()).run(["ip", "netns", "del", netns], check=False)
    shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)


def stale_namespaces(pattern: re.Pattern, alive) -> list[str]:
    """Namespaces named by `pattern` (group `pid`: the process that made it) whose maker is gone."""
    return [name for name in list_namespaces() if (m := pattern.match(name)) and not alive(int(m["pid"]))]
