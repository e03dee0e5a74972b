"""Where a run came from: its id, times, longhaul's revision, the controller host and tool versions,
and the manifest built from them. Every kind of run (a profile run, an OPS run or evaluation)
writes its manifest through `run_manifest`, so the header keys are the same for all."""

from __future__ import annotations

import platform
import secrets
import subprocess
import time
from pathlib import Path

from longhaul import __version__
from longhaul.collectors.store.manifest import HostInfo, Revision, RunManifest
from longhaul.drivers.agents.fingerprint import tool_version


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def git_revision(repo: Path) -> Revision:
    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return Revision(version=__version__, git_revision=git("rev-parse", "HEAD") or None,
                    git_dirty=bool(git("status", "--porcelain", "--untracked-files=no")))


# The manifest's `tools`: its key -> the fingerprint agent's name of the tool (the agent holds how
# each one tells its version: drivers/agents/fingerprint.py VERSION_ARGV).
CONTROLLER_TOOLS = {"iperf3": "iperf3", "fping": "fping", "iproute2": "ip", "iptables": "iptables"}


def tool_versions() -> dict:
    """The controller's tools as the manifest's `tools` records them: the first line of each
    version output, None for a tool that is not installed."""
    return {key: tool_version(name) for key, name in CONTROLLER_TOOLS.items()}


def host_info() -> HostInfo:
    return HostInfo(hostname=platform.node(), kernel=platform.release(), os=_os_release())


def run_manifest(run_id: str, *, repo: Path, kind: str | None = None, status: str = "running",
                 finished: bool = False, **sections) -> RunManifest:
    """manifest.json of a run: the header every run has, then `sections` (backend, features,
    tools, config, profiles, cells, ...: RunManifest's fields; another name is a TypeError).
    `kind` names runs that are not profile runs ("ops-run", "ops-evaluation"); `finished` stamps a
    run that is written once, complete."""
    now = now_iso()
    return RunManifest(run_id=run_id, started=now, finished=now if finished else None, status=status, kind=kind,
                       longhaul=git_revision(repo), host=host_info(), **sections)


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None
