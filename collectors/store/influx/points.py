"""The InfluxDB schema (docs/telemetry.md): what the run store's records and trial tables become
in line protocol. Pure functions of the records and files the file store holds, so the points a
run ships live and the points `longhaul export` back-fills from its directory are the same points,
with the same timestamps: a replay overwrites, never duplicates.

Timestamps are deterministic: a trial's rows at the trial's start (trial.json `started`) plus the
row's `t_s`, to the microsecond; per-run and per-cell points at the run's start (manifest
`started`), told apart by their tags. Every field has one type, fixed here per column, so a field
type conflict cannot come from longhaul. Lines never hold a raw newline (the spool is read by line).
A point written again replaces the fields it carries and keeps the others, so a field that can
be cleared (an error resumed away) is written as "" rather than left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from influxdb_client import Point, WritePrecision

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.records import CellEntry, TrialSummary, Verification
from longhaul.collectors.store.series import read_rows

# Measurements
THROUGHPUT = "lh_throughput"      # per second, per flow and stream (stream "all": the flow's sum)
RTT = "lh_rtt"                    # the RTT probe's rounds
TCPINFO = "lh_tcpinfo"            # the socket sampler's tcp_info, per flow and socket
TRIAL = "lh_trial"                # one point a trial: status, Jain, RTT statistics, collector counts
FLOW = "lh_flow"                  # one point a flow and trial: goodput, bytes, retransmissions, UDP loss
VERIFICATION = "lh_verification"  # one point a cell: the lab check before its first trial
CELL = "lh_cell"                  # one point a cell: status and Jain over its trials
CELL_FLOW = "lh_cell_flow"        # one point a flow and cell: mean and spread over its trials
RUN = "lh_run"                    # one point a run: status, revision
DOC = "lh_doc"                    # the run directory's JSON, TOML and small CSV files, in parts
MEASUREMENTS = (THROUGHPUT, RTT, TCPINFO, TRIAL, FLOW, VERIFICATION, CELL, CELL_FLOW, RUN, DOC)

DOC_PART_CHARS = 15_000           # 1.x limits a string field to 64 KiB; a character is at most 4 bytes


@dataclass(frozen=True)
class Table:
    """One trial CSV as a measurement: its tag columns and its field columns with their types."""

    measurement: str
    tags: tuple[str, ...]
    fields: dict[str, type]


TABLES = {
    fmt.THROUGHPUT_CSV: Table(THROUGHPUT, ("flow", "stream"), {"t_s": float, "mbps": float}),
    fmt.RTT_CSV: Table(RTT, ("mode",), {"t_s": float, "rtt_ms": float, "sent": int, "received": int}),
    fmt.TCPINFO_CSV: Table(TCPINFO, ("flow",), {
        "t_s": float, "src": str, "sport": int, "dst": str, "dport": int, "cwnd": int, "bytes_in_flight": int,
        "srtt_ms": float, "rttvar_ms": float, "retrans_total": int, "delivery_rate_mbps": float,
        "bytes_acked": int}),
}
DOC_TABLES = (fmt.EVENTS_CSV, fmt.DECISIONS_CSV)   # small, not time series: kept whole as documents


def iso_ns(text: str | None) -> int | None:
    """An ISO time of the store ('2026-11-23T22:23:41Z') as integer nanoseconds since the epoch."""
    if not text:
        return None
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def run_start_ns(manifest: RunManifest) -> int:
    """The time of the run's own and its cells' points: the run's start."""
    return iso_ns(manifest.started) or 0


def offset_ns(t_s: float) -> int:
    return round(t_s * 1_000_000) * 1000


def run_tags(manifest: RunManifest) -> dict[str, str]:
    """Tags every point of the run carries."""
    return _clean({"run": manifest.run_id, "backend": manifest.backend, "kernel": manifest.host.kernel})


def cell_tags(entry: CellEntry) -> dict[str, str]:
    return _clean({"profile": entry.profile, "cell": entry.id, "scenario": entry.scenario})


def _clean(tags: dict) -> dict[str, str]:
    return {k: str(v) for k, v in tags.items() if v not in (None, "")}


def point(measurement: str, tags: dict[str, str], fields: dict, ns: int) -> str:
    """One line; fields that are None or not finite are left out ('' when none is left)."""
    p = Point(measurement)
    for key, value in sorted(tags.items()):
        p.tag(key, value)
    for key, value in fields.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        p.field(key, value)
    p.time(ns, WritePrecision.NS)
    return p.to_line_protocol()


def _typed(kind: type, text):
    """A CSV cell as its column's type; None when empty. Integers are written from their text
    (a counter is never rounded)."""
    if text is None or text == "":
        return None
    if kind is str:
        return str(text)
    if kind is int:
        return int(text)
    return float(text)


# --- documents ------------------------------------------------------------------------------------

def doc_lines(tags: dict[str, str], path: str, text: str, base_ns: int) -> list[str]:
    """A file of the run directory (path relative to it) in parts: part k at base_ns + k, each a
    JSON string (so no raw newline reaches the line protocol), with its number `part` and the
    number of `parts` (a client that reads times to the microsecond cannot order them by time)."""
    chunks = [text[i:i + DOC_PART_CHARS] for i in range(0, len(text), DOC_PART_CHARS)] or [""]
    doc_tags = {**tags, "doc": path}
    return [point(DOC, doc_tags, {"text": json.dumps(chunk), "part": k, "parts": len(chunks)}, base_ns + k)
            for k, chunk in enumerate(chunks)]


def doc_text(parts: Iterable[tuple[int, str, int]]) -> str:
    """The file back from its points (part, text field, parts field), as doc_lines wrote it. A
    document rewritten shorter leaves old parts beyond `parts`: part 0 says how many count."""
    ordered = sorted(parts)
    if not ordered:
        return ""
    count = int(ordered[0][2])
    return "".join(json.loads(text) for _, text, _ in ordered[:count])


# --- a trial --------------------------------------------------------------------------------------

def table_lines(name: str, rows: list[dict], tags: dict[str, str], base_ns: int, problems: list[str],
                per_flow: dict[str, dict[str, str]] | None = None) -> Iterator[str]:
    """A trial table's rows as points, each flow's rows with its tags from `per_flow` (tool, cca);
    a row that does not parse is named in `problems`."""
    per_flow = per_flow or {}
    table = TABLES[name]
    sockets: dict[str, dict[tuple, int]] = {}
    for number, row in enumerate(rows, start=2):        # line 1 is the header
        try:
            fields = {col: _typed(kind, row.get(col)) for col, kind in table.fields.items()}
        except ValueError as exc:
            problems.append(f"{name} line {number}: {exc}")
            continue
        if fields["t_s"] is None:
            problems.append(f"{name} line {number}: no t_s")
            continue
        row_tags = {**tags, **_clean({k: row.get(k) for k in table.tags})}
        row_tags.update(per_flow.get(row_tags.get("flow", ""), {}))
        if table.measurement == TCPINFO:   # a flow's sockets (16 for GridFTP) are its streams
            known = sockets.setdefault(row_tags.get("flow", ""), {})
            key = (row.get("src"), row.get("sport"), row.get("dst"), row.get("dport"))
            row_tags["stream"] = str(known.setdefault(key, len(known)))
        line = point(table.measurement, row_tags, fields, base_ns + offset_ns(fields["t_s"]))
        if line:
            yield line


def flow_tags(entry: CellEntry) -> dict[str, dict[str, str]]:
    """Per flow name: the tags its declaration gives (tool, cca, role)."""
    return {f.name: _clean({"tool": f.tool, "cca": f.cca, "role": f.role}) for f in entry.flows if f.name}


def trial_lines(manifest: RunManifest, entry: CellEntry, trial: TrialSummary, trial_dir: Path,
                problems: list[str]) -> Iterator[str]:
    """Everything of one trial: its summary, its flows, its tables (series and documents)."""
    base = iso_ns(trial.started) or run_start_ns(manifest)
    tags = {**run_tags(manifest), **cell_tags(entry), "trial": str(trial.trial)}
    rtt, coll = trial.rtt, trial.collector
    yield point(TRIAL, tags, {
        "status": trial.status, "error": trial.error or "", "duration_s": _float(trial.duration_s),
        "jain": _float(trial.jain), "host_cpu_steal_pct": _float(trial.host_cpu_steal_pct),
        **({f"rtt_{k}": _float(getattr(rtt, k)) for k in ("idle_ms", "median_ms", "p95_ms", "max_ms",
                                                          "inflation_median_ms", "inflation_p95_ms",
                                                          "inflation_max_ms")} if rtt else {}),
        "rtt_samples": rtt.samples if rtt else None,
        **({k: getattr(coll, k) for k in ("socket_samples", "sampler_ticks", "rtt_rounds")} if coll else {}),
        "tcp_memory_pressures": trial.tcp_memory_pressures,
    }, base)
    declared = flow_tags(entry)
    for flow in trial.flows:
        ftags = {**tags, "flow": flow.name, **declared.get(flow.name, {}),
                 **_clean({"tool": flow.tool, "cca": flow.cca, "role": flow.role})}
        yield point(FLOW, ftags, {
            "mean_mbps": _float(flow.mean_mbps), "span_mean_mbps": _float(flow.span_mean_mbps),
            "bytes": _float(flow.bytes), "on_s": _float(flow.on_s), "retransmits": flow.retransmits,
            "lost_percent": _float(flow.lost_percent), "bursts": flow.bursts,
            "completed_bursts": flow.completed_bursts,
            "observed_cca": ",".join(flow.observed_cca) if flow.observed_cca else None}, base)
    for name in TABLES:
        path = Path(trial_dir) / name
        if not path.is_file():
            continue
        yield from table_lines(name, read_rows(path, problems) or [], tags, base, problems, declared)
    rel = f"{fmt.CELLS_DIR}/{entry.id}/{fmt.TRIAL_PREFIX}{trial.trial}"
    run_base = run_start_ns(manifest)
    doc_base = run_tags(manifest)
    yield from doc_lines(doc_base, f"{rel}/{fmt.TRIAL_JSON}", json.dumps(trial.to_dict()), run_base)
    for name in DOC_TABLES:
        path = Path(trial_dir) / name
        if path.is_file():
            yield from doc_lines(doc_base, f"{rel}/{name}", path.read_bytes().decode("utf-8"), run_base)


def _float(value):
    """Numbers that are sometimes int and sometimes float in the JSON are always floats here."""
    return None if value is None else float(value)


# --- cells and the run ----------------------------------------------------------------------------

def verification_lines(manifest: RunManifest, entry: CellEntry, verification: Verification) -> list[str]:
    base = run_start_ns(manifest)
    tags = {**run_tags(manifest), **cell_tags(entry)}
    v = verification
    fields = {"ok": v.ok, "problems": "; ".join(v.problems), "attempt": v.attempt,
              "host_cpu_steal_pct": _float(v.host_cpu_steal_pct),
              "rtt_configured_ms": _float(v.rtt_ms.configured) if v.rtt_ms else None,
              "rtt_measured_ms": _float(v.rtt_ms.measured) if v.rtt_ms else None,
              "rate_configured_mbps": _float(v.rate_mbps.configured) if v.rate_mbps else None,
              "rate_measured_mbps": _float(v.rate_mbps.measured) if v.rate_mbps else None,
              "rate_goodput_mbps": _float(v.rate_mbps.goodput) if v.rate_mbps else None,
              "queue_bytes": _float(v.queue_bytes.configured) if v.queue_bytes else None}
    lines = [point(VERIFICATION, tags, fields, base)]
    rel = f"{fmt.CELLS_DIR}/{entry.id}/{fmt.VERIFICATION}"
    return lines + doc_lines(run_tags(manifest), rel, json.dumps(v.to_dict()), base)


def cell_lines(manifest: RunManifest, entry: CellEntry) -> list[str]:
    base = run_start_ns(manifest)
    tags = {**run_tags(manifest), **cell_tags(entry)}
    stats = entry.stats
    jain = stats.jain if stats else None
    lines = [point(CELL, tags, {"status": entry.status, "error": entry.error or "", "trials_ok": len(entry.ok_trials),
                                "jain_mean": _float(jain.mean) if jain else None,
                                "jain_std": _float(jain.std) if jain else None, "jain_n": jain.n if jain else None,
                                "rtt_ms": _float(entry.topology.rtt_ms),
                                "bottleneck_rate_mbps": _float(entry.topology.bottleneck_rate_mbps)}, base)]
    declared = flow_tags(entry)
    for name, fs in (stats.flows if stats else {}).items():
        lines.append(point(CELL_FLOW, {**tags, "flow": name, **declared.get(name, {})},
                           {"mean_mbps": _float(fs.mean_mbps), "std_mbps": _float(fs.std_mbps), "n": fs.n}, base))
    return [line for line in lines if line]


def run_lines(manifest: RunManifest, summary: dict | None = None) -> list[str]:
    """The run's point and its documents: manifest.json, and summary.json when given."""
    base = run_start_ns(manifest)
    tags = run_tags(manifest)
    lines = [point(RUN, {**tags, **_clean({"host": manifest.host.hostname})},
                   {"status": manifest.status, "finished": manifest.finished,
                    "git_revision": manifest.longhaul.git_revision, "longhaul_version": manifest.longhaul.version,
                    "cells": len(manifest.cells)}, base)]
    lines += doc_lines(tags, fmt.MANIFEST, json.dumps(manifest.to_dict()), base)
    if summary is not None:
        lines += doc_lines(tags, fmt.SUMMARY, json.dumps(summary), base)
    return lines


def source_lines(manifest: RunManifest, run_dir: Path) -> list[str]:
    """The config and profiles as run (config.toml, profiles/*.toml), so a run rebuilt from the
    database can be resumed and its report shows its sources."""
    base = run_start_ns(manifest)
    tags = run_tags(manifest)
    run_dir = Path(run_dir)
    lines = []
    paths = [run_dir / fmt.CONFIG_SNAPSHOT, *sorted((run_dir / fmt.PROFILES_DIR).glob("*.toml"))]
    for path in paths:
        if path.is_file():
            lines += doc_lines(tags, path.relative_to(run_dir).as_posix(), path.read_bytes().decode("utf-8"), base)
    return lines
