"""A trial's time series from its CSVs (throughput.csv, rtt.csv, tcpinfo.csv), as numpy arrays.

A missing or unreadable CSV leaves its field empty and says so in `problems`: the report shows
what there is and notes what is not, because a crash mid-trial leaves exactly that.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longhaul.collectors.store.format import RTT_CSV, TCPINFO_CSV, THROUGHPUT_CSV

Series = tuple[np.ndarray, np.ndarray]  # (t_s, value), sorted by time


@dataclass
class TrialSeries:
    """The time series of one trial; a missing or unreadable CSV leaves its field empty."""

    throughput: dict[str, Series] = field(default_factory=dict)  # flow -> aggregate (stream "all")
    rtt: Series | None = None
    inflight: dict[str, Series] = field(default_factory=dict)  # flow -> bytes in flight, all sockets
    srtt: dict[str, Series] = field(default_factory=dict)      # flow -> largest sRTT of its sockets
    retrans: dict[str, Series] = field(default_factory=dict)   # flow -> retransmissions per second
    problems: list[str] = field(default_factory=list)


def load_trial_series(trial_dir: Path) -> TrialSeries:
    trial_dir = Path(trial_dir)
    out = TrialSeries()
    rows = read_rows(trial_dir / THROUGHPUT_CSV, out.problems)
    if rows is not None:
        out.throughput = _group_series([r for r in rows if r.get("stream") == "all"], "mbps")
    rows = read_rows(trial_dir / RTT_CSV, out.problems)
    if rows is not None:
        t, v = _floats(rows, "t_s"), _floats(rows, "rtt_ms")
        keep = np.isfinite(t) & np.isfinite(v)  # lost probe rounds have no rtt
        order = np.argsort(t[keep])
        out.rtt = (t[keep][order], v[keep][order])
    rows = read_rows(trial_dir / TCPINFO_CSV, out.problems)
    if rows is not None:
        out.inflight = _per_flow_ticks(rows, "bytes_in_flight", sum)   # a GridFTP flow has 16 sockets
        out.srtt = _per_flow_ticks(rows, "srtt_ms", max)
        out.retrans = _retrans_per_second(rows)
    return out


def read_rows(path: Path, problems: list[str]) -> list[dict] | None:
    """A trial table's rows as dicts, or None with the reason added to `problems` (a crash can
    leave a table missing or cut short)."""
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
