"""Finding and removing what crashed runs of longhaul left behind, and nothing else.

A run registers its tag with its pid in /run/longhaul; everything it creates is named after that
tag (namespaces `lh-<tag>...`, /etc/netns/lh-<tag>...). A namespace is a leftover when no live
longhaul process owns its tag. Removing the namespace removes its veths, qdiscs and iptables
rules; processes still inside it are ended by pid first (a qemu lab's VMs run inside its
namespace `lh-q<pid>`, so they go with it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from longhaul.hardware.backends.netns.lab import NETNS_ETC, remove_namespace
from longhaul.hardware.executors.process import NETNS_DIR
from longhaul.hardware.topology import NS_PREFIX

STATE_DIR = Path("/run/longhaul")
_TAGGED = re.compile(rf"^{re.escape(NS_PREFIX)}(?P<tag>[0-9a-f]{{6}})\d+-[A-Z]\d+$")
_PROBE = re.compile(rf"^{re.escape(NS_PREFIX)}probe-(?P<pid>\d+)$")
_FLEET = re.compile(rf"^{re.escape(NS_PREFIX)}q(?P<pid>\d+)$")     # a qemu lab's VMs, named by the run's pid


def register(tag: str, run_dir: Path) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / f"{tag}.json").write_text(json.dumps({"pid": os.getpid(), "run_dir": str(run_dir)}))


def unregister(tag: str) -> None:
    (STATE_DIR / f"{tag}.json").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_alive(tag: str) -> bool:
    try:
        pid = json.loads((STATE_DIR / f"{tag}.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    return _alive(int(pid))


def list_namespaces() -> list[str]:
    base = Path(NETNS_DIR)
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def find() -> list[str]:
    """Namespaces (and stray /etc/netns entries) of longhaul runs that are no longer running."""
    names = set(list_namespaces())
    if NETNS_ETC.is_dir():
        names |= {p.name for p in NETNS_ETC.iterdir()}
    stale = []
    for name in sorted(names):
        tagged, by_pid = _TAGGED.match(name), _PROBE.match(name) or _FLEET.match(name)
        if tagged and not _owner_alive(tagged["tag"]):
            stale.append(name)
        elif by_pid and not _alive(int(by_pid["pid"])):
            stale.append(name)
    return stale


def clean() -> list[str]:
    removed = find()
    for name in removed:
        remove_namespace(name)
    if STATE_DIR.is_dir():
        for marker in STATE_DIR.glob("*.json"):
            if not _owner_alive(marker.stem):
                marker.unlink(missing_ok=True)
    return removed
