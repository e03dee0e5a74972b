"""Read a longhaul run store (docs/results-format.md) into plain Python and numpy structures.

The report must be rebuildable from the store alone and must survive partial runs, so every file a
crash can leave missing or truncated is loaded leniently: the trouble is recorded in a `problems`
list for the report's notes instead of raising. Only a store we do not understand (wrong format or
an unknown version) is an error, because guessing at an unknown layout would silently produce a
wrong report.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RUN_FORMAT = "longhaul-run"
SUMMARY_FORMAT = "longhaul-summary"
SUPPORTED_VERSIONS = (1,)

Series = tuple[np.ndarray, np.ndarray]  # (t_s, value), sorted by time


class StoreError(RuntimeError):
    """The directory cannot be read as a run store at all."""


class StoreVersionError(StoreError):
    """The store's `format` or `version` is not one this reader understands."""


@dataclass
class TrialSeries:
    """The time series of one trial; a missing or unreadable CSV leaves its field empty."""

    throughput: dict[str, Series] = field(default_factory=dict)  # flow -> aggregate (stream "all")
    rtt: Series | None = None
    inflight: dict[str, Series] = field(default_factory=dict)  # flow -> bytes in flight, all sockets
    srtt: dict[str, Series] = field(default_factory=dict)      # flow -> largest sRTT of its sockets
    retrans: dict[str, Series] = field(default_factory=dict)   # flow -> retransmissions per second
    problems: list[str] = field(default_factory=list)


@dataclass
class RunStore:
    run_dir: Path
    manifest: dict
    summary: dict
    problems: list[str] = field(default_factory=list)

    @property
    def cells(self) -> list[dict]:
        return self.summary.get("cells", [])

    @property
    def status(self) -> str:
        # summary.json is rewritten after every trial, the manifest maybe only at the start, so
        # whichever says something other than "complete"/"running" is the more telling one.
        states = [self.manifest.get("status"), self.summary.get("status")]
        for bad in ("failed", "interrupted", "running"):
            if bad in states:
                return bad
        return next((s for s in states if s), "unknown")

    def trial_series(self, cell_id: str, trial: int) -> TrialSeries:
        return load_trial_series(self.run_dir / "cells" / cell_id / f"trial-{trial}")


def check_format(doc: dict, expected: str, where: Path) -> None:
    """Raise StoreVersionError unless doc declares `expected` in a supported version."""
    fmt, version = doc.get("format"), doc.get("version")
    if fmt != expected:
        raise StoreVersionError(f"{where}: format is {fmt!r}, expected {expected!r}; "
                                f"this is not a longhaul run store")
    if version not in SUPPORTED_VERSIONS:
        raise StoreVersionError(
            f"{where}: {expected} version {version!r} is not supported (this longhaul reads "
            f"version {', '.join(map(str, SUPPORTED_VERSIONS))}); use a longhaul release that "
            f"knows this version to build the report")


def load_store(run_dir: Path) -> RunStore:
    """Load manifest.json and summary.json, falling back to per-trial files when summary is lost."""
    run_dir = Path(run_dir)
    problems: list[str] = []
    manifest = load_json_object(run_dir / "manifest.json", problems)
    summary = load_json_object(run_dir / "summary.json", problems)
    if manifest is None and summary is None:
        raise StoreError(f"{run_dir}: neither manifest.json nor summary.json is readable; "
                         f"not a run directory ({'; '.join(problems)})")
    if manifest is not None:
        check_format(manifest, RUN_FORMAT, run_dir / "manifest.json")
    if summary is not None:
        check_format(summary, SUMMARY_FORMAT, run_dir / "summary.json")
    manifest = manifest or {}
    if summary is None:
        summary = {"run_id": manifest.get("run_id"), "status": manifest.get("status"),
                   "cells": _cells_from_trial_files(run_dir, manifest, problems)}
    summary["cells"] = [_normalise_cell(c) for c in _merge_declared(summary, manifest)]
    return RunStore(run_dir, manifest, summary, problems)


def load_trial_series(trial_dir: Path) -> TrialSeries:
    out = TrialSeries()
    rows = _read_csv(trial_dir / "throughput.csv", out.problems)
    if rows is not None:
        out.throughput = _group_series([r for r in rows if r.get("stream") == "all"], "mbps")
    rows = _read_csv(trial_dir / "rtt.csv", out.problems)
    if rows is not None:
        t, v = _floats(rows, "t_s"), _floats(rows, "rtt_ms")
        keep = np.isfinite(t) & np.isfinite(v)  # lost probe rounds have no rtt
        order = np.argsort(t[keep])
        out.rtt = (t[keep][order], v[keep][order])
    rows = _read_csv(trial_dir / "tcpinfo.csv", out.problems)
    if rows is not None:
        out.inflight = _inflight_per_flow(rows)
        out.srtt = _per_flow_ticks(rows, "srtt_ms", max)
        out.retrans = _retrans_per_second(rows)
    return out


def load_json_object(path: Path, problems: list[str], required: bool = True) -> dict | None:
    """A JSON object from the store, or None with the reason added to `problems` (a missing
    optional file is no problem)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            problems.append(f"{path.name} is missing")
        return None
    except (OSError, ValueError) as exc:  # a crash mid-write leaves truncated JSON
        problems.append(f"{path.name} is unreadable: {exc}")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path.name} does not hold a JSON object")
        return None
    return doc


def _cells_from_trial_files(run_dir: Path, manifest: dict, problems: list[str]) -> list[dict]:
    """Rebuild summary cells from trial.json files, which are written once per finished trial."""
    problems.append("summary.json unavailable: results rebuilt from the per-trial trial.json files")
    cells = []
    for declared in manifest.get("cells", []):
        trials = []
        for path in sorted((run_dir / "cells" / declared["id"]).glob("trial-*/trial.json")):
            trial = load_json_object(path, problems)
            if trial is not None:
                trials.append(trial)
        cells.append({**declared, "trials": sorted(trials, key=lambda t: t.get("trial", 0))})
    return cells


def _merge_declared(summary: dict, manifest: dict) -> list[dict]:
    """Summary cells plus the manifest's cells that never reached the summary (run cut short)."""
    cells = list(summary.get("cells") or [])
    seen = {c.get("id") for c in cells}
    cells += [{**c, "trials": []} for c in manifest.get("cells", []) if c.get("id") not in seen]
    return cells


def _normalise_cell(cell: dict) -> dict:
    """Fill optional keys so the report never has to ask whether they exist."""
    cell = dict(cell)
    for key, default in (("params", {}), ("topology", {}), ("flows", []), ("trials", [])):
        cell[key] = cell.get(key) or default
    for key in ("labels", "reference", "lab", "profile", "scenario"):
        cell.setdefault(key, None)
    if not cell.get("stats"):
        cell["stats"] = compute_stats(cell["trials"])
    return cell


def compute_stats(trials: list[dict]) -> dict:
    """The `stats` object over ok trials, for summaries written before stats existed."""
    per_flow: dict[str, list[float]] = {}
    jains = []
    for trial in (t for t in trials if t.get("status") == "ok"):
        for flow in trial.get("flows") or []:
            if flow.get("mean_mbps") is not None:
                per_flow.setdefault(flow["name"], []).append(float(flow["mean_mbps"]))
        if trial.get("jain") is not None:
            jains.append(float(trial["jain"]))
    return {"flows": {n: {"mean_mbps": float(np.mean(v)), "std_mbps": _std(v), "n": len(v)}
                      for n, v in per_flow.items()},
            "jain": {"mean": float(np.mean(jains)), "std": _std(jains), "n": len(jains)}
            if jains else None}


def _std(values: list[float]) -> float:
    # Sample std (ddof=1): repeats are a sample of what the lab would give; one repeat has no spread.
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _read_csv(path: Path, problems: list[str]) -> list[dict] | None:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        problems.append(f"{path.parent.name}/{path.name} is missing")
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        problems.append(f"{path.parent.name}/{path.name} is unreadable: {exc}")
    return None


def _to_float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):  # empty cells and a truncated last line
        return math.nan


def _floats(rows: list[dict], column: str) -> np.ndarray:
    return np.array([_to_float(r.get(column)) for r in rows], dtype=float)


def _group_series(rows: list[dict], column: str) -> dict[str, Series]:
    by_flow: dict[str, list[dict]] = {}
    for row in rows:
        by_flow.setdefault(row.get("flow") or "?", []).append(row)
    out = {}
    for flow, flow_rows in by_flow.items():
        t, v = _floats(flow_rows, "t_s"), _floats(flow_rows, column)
        keep = np.isfinite(t) & np.isfinite(v)
        order = np.argsort(t[keep])
        out[flow] = (t[keep][order], v[keep][order])
    return out


def _inflight_per_flow(rows: list[dict]) -> dict[str, Series]:
    """Bytes in flight per flow, summed over its sockets (a GridFTP flow has 16)."""
    return _per_flow_ticks(rows, "bytes_in_flight", sum)


def _retrans_per_second(rows: list[dict]) -> dict[str, Series]:
    """Retransmitted segments per flow and second (growth of each socket's retrans_total)."""
    last: dict[tuple, float] = {}
    bins: dict[str, dict[int, float]] = {}
    for row in sorted(rows, key=lambda r: _to_float(r.get("t_s"))):
        t, value = _to_float(row.get("t_s")), _to_float(row.get("retrans_total"))
        if not (math.isfinite(t) and math.isfinite(value)):
            continue
        sock = (row.get("src"), row.get("sport"), row.get("dst"), row.get("dport"))
        flow = bins.setdefault(row.get("flow") or "?", {})
        flow[math.floor(t)] = flow.get(math.floor(t), 0.0) + max(0.0, value - last.get(sock, 0.0))
        last[sock] = value
    return {f: (np.array(sorted(b), dtype=float) + 1, np.array([b[k] for k in sorted(b)], dtype=float))
            for f, b in bins.items()}


def _per_flow_ticks(rows: list[dict], column: str, combine) -> dict[str, Series]:
    """One value per flow and 10 Hz tick, `combine` over the flow's sockets.

    Sockets are sampled separately, so samples are put on the 10 Hz grid first and each socket
    contributes its last value in a tick; combining raw rows would double-count jittery samples.
    """
    ticks: dict[str, dict[int, dict[tuple, float]]] = {}
    for row in rows:
        t, value = _to_float(row.get("t_s")), _to_float(row.get(column))
        if not (math.isfinite(t) and math.isfinite(value)):
            continue
        sock = (row.get("src"), row.get("sport"), row.get("dst"), row.get("dport"))
        ticks.setdefault(row.get("flow") or "?", {}).setdefault(round(t * 10), {})[sock] = value
    out = {}
    for flow, by_tick in ticks.items():
        keys = sorted(by_tick)
        out[flow] = (np.array(keys, dtype=float) / 10,
                     np.array([combine(by_tick[k].values()) for k in keys], dtype=float))
    return out
