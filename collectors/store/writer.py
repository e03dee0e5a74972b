"""The run store (docs/results-format.md): one directory per run, written as the run goes so an
interrupted or crashed run keeps every trial it finished."""

from __future__ import annotations

import os
import platform
import secrets
import subprocess
import time
from pathlib import Path

from longhaul import __version__
from longhaul.appliance.config.profiles import CellSpec
from longhaul.collectors.metrics import mean_std
from longhaul.core.tables import read_json, write_json

FORMAT_VERSION = 1


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_trialless_summary(run_dir: Path, status: str) -> None:
    """summary.json of a run with no trials (an OPS evaluation or Figure 29 run), so the report reads it."""
    write_json(Path(run_dir) / "summary.json", {"format": "longhaul-summary", "version": FORMAT_VERSION,
                                                "run_id": Path(run_dir).name, "status": status, "cells": []})


def git_revision(repo: Path) -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"version": __version__, "git_revision": git("rev-parse", "HEAD") or None,
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def tool_versions() -> dict:
    out = {}
    for tool, argv in {"iperf3": ["iperf3", "--version"], "fping": ["fping", "--version"],
                       "iproute2": ["ip", "-V"], "iptables": ["iptables", "--version"]}.items():
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=5)
            out[tool] = (res.stdout or res.stderr).strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            out[tool] = None
    return out


def cell_params_view(spec: CellSpec) -> dict:
    return {"id": spec.id, "profile": spec.profile, "scenario": spec.scenario, "params": spec.params,
            "labels": spec.labels, "reference": spec.reference, "cell": spec.cell.model_dump()}


class RunStore:
    def __init__(self, root: Path, run_id: str, *, existing: bool = False):
        self.run_id = run_id
        self.dir = Path(root) / run_id
        self.manifest: dict = {}
        self.cells: list[dict] = []
        if existing:
            self.manifest = read_json(self.dir / "manifest.json")
            self.cells = read_json(self.dir / "summary.json")["cells"]
        else:
            self.dir.mkdir(parents=True, exist_ok=False)

    @classmethod
    def open(cls, run_dir: Path) -> "RunStore":
        """An existing run, to resume it."""
        run_dir = Path(run_dir).resolve()
        for name in ("manifest.json", "summary.json", "config.toml"):
            if not (run_dir / name).is_file():
                raise FileNotFoundError(f"{run_dir} is not a resumable longhaul run (no {name})")
        return cls(run_dir.parent, run_dir.name, existing=True)

    def snapshot_sources(self, config) -> None:
        """The config and profile files as run, so `run --resume` rebuilds exactly these cells."""
        (self.dir / "config.toml").write_text(config.path.read_text())
        (self.dir / "profiles").mkdir(exist_ok=True)
        for profile in config.profiles:
            (self.dir / "profiles" / f"{profile.name}.toml").write_text(profile.source_text)

    def done_trials(self) -> set[tuple[str, int]]:
        return {(c["id"], t["trial"]) for c in self.cells for t in c["trials"] if t["status"] == "ok"}

    def entry(self, spec: CellSpec) -> dict | None:
        return next((c for c in self.cells if c["id"] == spec.id), None)

    def resumed(self) -> None:
        self.manifest.setdefault("resumed", []).append(now_iso())
        self.manifest.update(status="running", finished=None, pid=os.getpid())
        for entry in self.cells:   # failed and interrupted trials, and refused cells, are tried again
            entry["trials"] = [t for t in entry["trials"] if t["status"] == "ok"]
            if entry["status"] == "refused":
                entry.update(status="pending", lab=None)
                entry.pop("error", None)
        write_json(self.dir / "manifest.json", self.manifest)

    def write_manifest(self, *, config, features, backend: str, repo: Path, cells: list[CellSpec],
                       order: dict) -> None:
        self.manifest = {
            "format": "longhaul-run", "version": FORMAT_VERSION, "run_id": self.run_id,
            "started": now_iso(), "finished": None, "status": "running",
            "longhaul": git_revision(repo),
            "host": {"hostname": platform.node(), "kernel": platform.release(), "os": _os_release()},
            "backend": backend, "features": features.as_dict(), "tools": tool_versions(),
            "config_path": str(config.path), "config": config.raw,
            "time_scale_override": config.time_scale,
            "profiles": {p.name: {"path": str(p.path), "description": p.meta.description,
                                  "repeats": p.meta.repeats, "time_scale": p.meta.time_scale,
                                  "source": p.source_text} for p in config.profiles},
            "cells": [cell_params_view(c) for c in cells],
            "order": order,
            "pid": os.getpid(),
        }
        write_json(self.dir / "manifest.json", self.manifest)

    def cell_dir(self, spec: CellSpec) -> Path:
        path = self.dir / "cells" / spec.id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def begin_cell(self, spec: CellSpec, status: str = "running") -> dict:
        topo = spec.cell.topology
        entry = {
            "id": spec.id, "profile": spec.profile, "scenario": spec.scenario, "params": spec.params,
            "topology": {"pairs": topo.pairs, "access_rate_mbps": topo.access_rate_mbps,
                         "bottleneck_rate_mbps": topo.bottleneck_rate_mbps, "rtt_ms": topo.rtt_ms,
                         "queue_bytes": topo.queue_bytes, "mtu": topo.mtu},
            "labels": spec.labels, "reference": spec.reference, "status": status,
            "flows": [{"name": f.name, "role": f.role, "tool": f.tool, "protocol": f.protocol,
                       "cca": spec.cell.flow_cca(f) if f.protocol == "tcp" else None, "pair": f.pair,
                       "streams": f.streams, "pattern": f.pattern} for f in spec.cell.flows],
            "lab": None, "trials": [], "stats": None, "jain": None,
        }
        self.cells.append(entry)
        self.write_summary()
        return entry

    def record_verification(self, entry: dict, spec: CellSpec, verification: dict) -> None:
        entry["lab"] = verification
        write_json(self.cell_dir(spec) / "verification.json", verification)
        self.write_summary()

    def record_trial(self, entry: dict, spec: CellSpec, trial: dict) -> None:
        entry["trials"].append(trial)
        write_json(self.cell_dir(spec) / f"trial-{trial['trial']}" / "trial.json", trial)
        entry["stats"] = cell_stats(entry["trials"])
        entry["jain"] = entry["stats"]["jain"]["mean"]
        self.write_summary()

    def end_cell(self, entry: dict, status: str, error: str | None = None) -> None:
        entry["status"] = status
        if error:
            entry["error"] = error
        self.write_summary()

    def write_summary(self, status: str | None = None) -> None:
        write_json(self.dir / "summary.json", {
            "format": "longhaul-summary", "version": FORMAT_VERSION, "run_id": self.run_id,
            "status": status or self.manifest.get("status", "running"), "cells": self.cells})

    def finish(self, status: str) -> None:
        self.manifest.update(status=status, finished=now_iso())
        write_json(self.dir / "manifest.json", self.manifest)
        self.write_summary(status)


def cell_stats(trials: list[dict]) -> dict:
    good = [t for t in trials if t["status"] == "ok"]
    names = [f["name"] for t in good for f in t["flows"]]
    flows = {}
    for name in dict.fromkeys(names):
        values = [f["mean_mbps"] for t in good for f in t["flows"] if f["name"] == name]
        stats = mean_std(values)
        flows[name] = {"mean_mbps": stats["mean"], "std_mbps": stats["std"], "n": stats["n"]}
    return {"flows": flows, "jain": mean_std(t["jain"] for t in good)}


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None

