"""Finding and removing what crashed runs of longhaul left behind, and nothing else.

A run registers its tag with its pid in /run/longhaul; everything it creates is named after that
tag (namespaces `lh-<tag>...`, /etc/netns/lh-<tag>...). A namespace is a leftover when no live
longhaul process owns its tag. Removing the namespace removes its veths, qdiscs and iptables
rules; processes still inside it are ended by pid first (a qemu lab's VMs run inside its
namespace `lh-q<pid>`, so they go with it). A process a run started outside its namespaces (the
machine's one tcp_info probe, which reads every sender namespace from the root namespace and holds
sockets in them) is in the run's process journal, `/run/longhaul/<tag>.pids`: a run that is gone
has its journal's live processes ended by pid (and start time: a pid is reused) before its
namespaces are deleted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from longhaul.hardware.backends.netns.lab import NETNS_ETC, end_pids, remove_namespace
from longhaul.hardware.executors.process import NETNS_DIR, ProcessTable, start_ticks
from longhaul.hardware.topology import NS_PREFIX

STATE_DIR = Path("/run/longhaul")
_TAGGED = re.compile(rf"^{re.escape(NS_PREFIX)}(?P<tag>[0-9a-f]{{6}})\d+-[A-Z]\d+$")
_PROBE = re.compile(rf"^{re.escape(NS_PREFIX)}probe-(?P<pid>\d+)$")
_FLEET = re.compile(rf"^{re.escape(NS_PREFIX)}q(?P<pid>\d+)$")     # a qemu lab's VMs, named by the run's pid


def _journal(tag: str) -> Path:
    return STATE_DIR / f"{tag}.pids"


def register(tag: str, run_dir: Path, procs: ProcessTable | None = None) -> None:
    """The run's marker, and its process journal where `procs` is given."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / f"{tag}.json").write_text(json.dumps({"pid": os.getpid(), "run_dir": str(run_dir)}))
    if procs is not None:
        procs.journal = _journal(tag)


def unregister(tag: str, procs: ProcessTable | None = None) -> None:
    if procs is not None:
        procs.journal = None
    (STATE_DIR / f"{tag}.json").unlink(missing_ok=True)
    _journal(tag).unlink(missing_ok=True)


def _journaled(tag: str) -> list[tuple[int, str]]:
    """(pid, label) of the journal's processes that are still the ones the run started."""
    try:
        lines = _journal(tag).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:          # a line cut by the SIGKILL
            continue
        if entry.get("start") is not None and start_ticks(entry["pid"]) == entry["start"]:
            found.append((entry["pid"], f"{entry.get('label')} on {entry.get('host')}"))
    return found


def _stale_tags() -> list[str]:
    return sorted(m.stem for m in STATE_DIR.glob("*.json") if not _owner_alive(m.stem)) if STATE_DIR.is_dir() else []


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
    """Processes, namespaces (and stray /etc/netns entries) of longhaul runs no longer running."""
    names = set(list_namespaces())
    if NETNS_ETC.is_dir():
        names |= {p.name for p in NETNS_ETC.iterdir()}
    stale = [f"process {pid} ({label}) of run {tag}" for tag in _stale_tags() for pid, label in _journaled(tag)]
    for name in sorted(names):
        tagged, by_pid = _TAGGED.match(name), _PROBE.match(name) or _FLEET.match(name)
        if tagged and not _owner_alive(tagged["tag"]):
            stale.append(name)
        elif by_pid and not _alive(int(by_pid["pid"])):
            stale.append(name)
    return stale


def clean() -> list[str]:
    removed = find()
    for tag in _stale_tags():
        pids = [pid for pid, _ in _journaled(tag)]
        end_pids(lambda pids=pids: [pid for pid in pids if _alive(pid)])
    for name in removed:
        if not name.startswith("process "):
            remove_namespace(name)
    for tag in _stale_tags():
        unregister(tag)
    return removed
