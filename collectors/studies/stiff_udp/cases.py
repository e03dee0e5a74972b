"""Seed 002's cases: the cells of a run that reproduce its tables, each with its TCP method and numbers.

A case is a cell with a foreground TCP method against the stiff sinusoidal UDP stream ("stiff":
Tables I/II, IV/V) or, in a cell whose reference source starts with "seed 002" or whose scenario
is named cross-p<N>, against background TCP flows ("cross": Table III). Its method is what the
foreground TCP flows are together (`method`): 1 stream = "Baseline 1", N unmodified streams =
"Parallel N", and one unmodified stream beside fractional ones (a BPF congestion control with an
`increase_divisor`, hardware/bpf_ccas.py) = "Combined N", the paper's combined parallel TCP.

min/max/period/duration of the sinusoid are not in summary.json's declared flows; they are read from
the manifest's expanded cell (`cells[].cell`, durations already time-scaled), else from the run's
snapshot of the profile TOML with the scenario's `set` and the cell's params applied.
"""
from __future__ import annotations

import logging
import math
import re
import tomllib

import numpy as np

from longhaul.collectors.store.records import CellEntry, FlowResult, TrialSummary
from longhaul.collectors.studies.stiff_udp import analysis as su
from longhaul.collectors.studies.stiff_udp import reference as ref
from longhaul.drivers.patterns import SINUSOID
from longhaul.hardware.bpf_ccas import BPF_CCAS
from longhaul.reports.fmt import num

log = logging.getLogger(__name__)
BASELINE = "Baseline 1"
# fping's default ICMP echo: 56 B payload + 8 B ICMP + 20 B IPv4 header = 84 B on the bottleneck
# (Ethernet framing left out); burst mode sends 10 pings per second.
ICMP_IP_BYTES = 84
BURST_PINGS_PER_S = 10


def _seed002(cell: CellEntry) -> bool:
    source = str((cell.reference or {}).get("source") or "")
    return source.lower().startswith("seed 002") or bool(re.fullmatch(r"cross-p\d+", str(cell.scenario)))


def candidate(cell: CellEntry) -> bool:
    """The cheap test first: most runs have nothing for this section."""
    return _seed002(cell) or any(f.get("pattern") == SINUSOID for f in _flows(cell, None).values())


def shape(store, cell: CellEntry) -> tuple[str | None, dict | None, dict[str, dict]]:
    """("stiff" | "cross" | None, the expanded cell, its flows) of a candidate cell: a foreground
    TCP flow against a sinusoid, or (seed 002 only) against background TCP flows."""
    decl = _declared(store, cell)
    flows = _flows(cell, decl)
    if not any(f.get("role") == "foreground" and (f.get("protocol") or "tcp") == "tcp" for f in flows.values()):
        return None, decl, flows
    if any(f.get("pattern") == SINUSOID for f in flows.values()):
        return "stiff", decl, flows
    if _seed002(cell) and any(f.get("role") == "background" and f.get("protocol") == "tcp" for f in flows.values()):
        return "cross", decl, flows
    return None, decl, flows


def collect(store, notes: list[str]) -> tuple[list[dict], list[dict]]:
    """(stiff-UDP cases, cross-traffic cases): one dict per seed-002 cell with its numbers."""
    stiff, cross = [], []
    for cell in store.entries:
        if not candidate(cell):
            continue
        try:
            _add_case(store, cell, stiff, cross)
        except Exception as exc:  # one odd cell must not hide the others
            log.exception("seed 002 section: cell %s", cell.id)
            notes.append(f"Cell {cell.id} could not be analysed: {exc}")
    for cases in (stiff, cross):
        # the same method over paths of several RTTs (seed002-table1-window) is one row per RTT
        if len({c["cell"].topology.rtt_ms for c in cases}) > 1:
            for c in cases:
                rtt = num(c["cell"].topology.rtt_ms)
                c["method"] += f" at {rtt:g} ms" if rtt is not None else " at an unrecorded RTT"
    return stiff, cross


def _add_case(store, cell: CellEntry, stiff: list[dict], cross: list[dict]) -> None:
    kind, decl, flows = shape(store, cell)
    if kind is None:
        return
    fgs = [f for f in flows.values() if f.get("role") == "foreground" and (f.get("protocol") or "tcp") == "tcp"]
    names = [f["name"] for f in fgs]
    ok = cell.ok_trials
    streams, name = method(fgs)
    case = {"cell": cell, "fg": names[0], "streams": streams, "method": name, "ok": ok,
            "tcp_mbps": _sums(ok, names, "mean_mbps"), "tcp_bytes": _sums(ok, names, "bytes")}
    if kind == "stiff":
        sine = next(f for f in flows.values() if f.get("pattern") == SINUSOID)
        stiff.append({**case, **_stiff_numbers(store, case, sine, decl, flows)})
    else:
        bg_tcp = [n for n, f in flows.items() if f.get("role") == "background" and f.get("protocol") == "tcp"]
        case["k"] = sum(_int(flows[n].get("streams")) or 1 for n in bg_tcp)
        case["cross"] = [sum(_values([t], n, "mean_mbps")[0] for n in bg_tcp) for t in ok
                         if all(_values([t], n, "mean_mbps") for n in bg_tcp)]
        cross.append(case)


def method(fgs: list[dict]) -> tuple[int, str]:
    """(streams, the paper's name of the TCP method) of a cell's foreground TCP flows: fractional
    streams beside one unmodified stream are "Combined N" (with its multiplier when it is not the
    paper's 10), else "Baseline 1" or "Parallel N"."""
    streams = sum(_int(f.get("streams")) or 1 for f in fgs)
    divisors = {f["name"]: _divisor(f.get("cca")) for f in fgs}
    fractional = {d for d in divisors.values() if d > 1}
    # a flow's own socket buffer (the window the paper's Table I baseline seems to have had)
    buffers = sorted({str(f["buffer"]) for f in fgs if f.get("buffer") is not None})
    tags = [f"buffer {'/'.join(buffers)}{' B' if all(b.isdigit() for b in buffers) else ''}"] if buffers else []
    if not fractional:
        name = BASELINE if streams == 1 else f"Parallel {streams}"
    else:
        plain = sum(_int(f.get("streams")) or 1 for f in fgs if divisors[f["name"]] == 1)
        tags = ([] if fractional == {ref.FRACTIONAL_MULTIPLIER} else
                [f"multiplier {'/'.join(map(str, sorted(fractional)))}"]) \
            + ([] if plain == 1 else [f"{plain} unmodified"]) + tags
        name = f"Combined {streams}"
    return streams, name + (f" ({', '.join(tags)})" if tags else "")


def _divisor(cca) -> int:
    """1/increase of a flow's congestion control against Reno's: > 1 for a fractional stream."""
    bpf = BPF_CCAS.get(str(cca))
    return (bpf.increase_divisor or 1) if bpf is not None else 1


def _declared(store, cell: CellEntry) -> dict | None:
    """The expanded cell {topology, probe, flows} as run: the manifest's copy, else the profile snapshot."""
    declared = store.manifest.declared(cell.id)
    if declared is not None and isinstance(declared.cell, dict):
        return declared.cell
    prof = store.manifest.profile(cell.profile)
    if prof is None or not prof.source:
        return None
    try:
        doc = tomllib.loads(prof.source)
    except tomllib.TOMLDecodeError:
        return None
    parts = {"topology": dict(doc.get("topology") or {}), "probe": dict(doc.get("probe") or {})}
    scen = next((s for s in doc.get("scenarios") or [] if s.get("name") == cell.scenario), {})
    flows = {f.get("name"): dict(f) for f in doc.get("flows") or []
             if scen.get("flows") is None or f.get("name") in scen["flows"]}
    for key, value in [*(scen.get("set") or {}).items(), *cell.params.items()]:
        path = str(key).split(".")
        if path[0] == "flows" and len(path) == 3 and path[1] in flows:
            flows[path[1]][path[2]] = value
        elif len(path) == 2 and path[0] in parts:
            parts[path[0]][path[1]] = value
    scale = num(store.manifest.time_scale_override) or num(prof.time_scale) \
        or num((doc.get("profile") or {}).get("time_scale")) or 1.0
    for f in flows.values():
        if num(f.get("duration_s")) is not None:
            f["duration_s"] = f["duration_s"] * scale
    return {**parts, "flows": list(flows.values())}


def _flows(cell: CellEntry, decl: dict | None) -> dict[str, dict]:
    """Flow name -> declared keys: summary's declared flows (as stored: every key, None where unset),
    completed by the expanded cell's, which hold what summary.json does not (a sinusoid's min/max/period)."""
    full = {f.get("name"): f for f in (decl or {}).get("flows") or []}
    # a cell rebuilt from trial files only has its flows in its trials
    stored = cell.flows or [f for t in cell.trials for f in t.flows]
    out = {f.name: {**full.get(f.name, {}), **f.to_dict()} for f in stored}
    return {n: f for n, f in out.items() if n}


def _stiff_numbers(store, case: dict, sine: dict, decl: dict | None, flows: dict) -> dict:
    cell, fg = case["cell"], flows[case["fg"]]
    lo, hi, period = num(sine.get("min_mbps")), num(sine.get("max_mbps")), num(sine.get("period_s"))
    tau = num(fg.get("duration_s")) or num(sine.get("duration_s"))
    link = num(cell.topology.bottleneck_rate_mbps) \
        or num(((decl or {}).get("topology") or {}).get("bottleneck_rate_mbps"))
    icmp = _icmp_mbps((decl or {}).get("probe") or {}) if decl else None
    t_bytes = None
    if None not in (lo, hi, period, tau, link, icmp):
        t_bytes = su.theoretical_capacity_bytes(tau, link, lo, hi, period, icmp, c_s=period / (2 * math.pi))
    rtts, fallback = [], 0
    for t in case["ok"]:
        series = store.trial_series(cell.id, t.trial).rtt
        if series is not None and series[0].size:
            keep = (series[0] >= 0) & (series[0] <= (tau or np.inf))   # the transfer, not the tail
            if keep.any():
                rtts.append(float(np.median(series[1][keep])))
        elif t.rtt is not None and num(t.rtt.median_ms) is not None:
            rtts.append(float(t.rtt.median_ms))
            fallback += 1
    return {"lo": lo, "hi": hi, "period": period, "tau": tau, "link": link, "icmp": icmp,
            "t_bytes": t_bytes, "udp": sine["name"], "start": num(sine.get("start_s")) or 0.0,
            "achieved": [su.effectiveness_pct(b, t_bytes) for b in case["tcp_bytes"]] if t_bytes else [],
            "rtt": rtts, "rtt_fallback": fallback, "loss": _values(case["ok"], sine["name"], "lost_percent")}


def _icmp_mbps(probe: dict) -> float:
    """I of eq. (4) for our probe: one 84-byte echo every interval_ms, or 10 a second in burst mode."""
    if probe.get("mode", "burst") == "interval":
        return su.icmp_rate_mbps(ICMP_IP_BYTES, (num(probe.get("interval_ms")) or 10.0) / 1000.0)
    return su.icmp_rate_mbps(ICMP_IP_BYTES * BURST_PINGS_PER_S, 1.0)


def _sums(trials: list[TrialSummary], flows: list[str], key: str) -> list[float]:
    """`key` summed over `flows` in each trial that recorded it for all of them."""
    out = []
    for t in trials:
        parts = [num(_field(t.flow(f), key)) for f in flows]
        if None not in parts:
            out.append(float(sum(parts)))
    return out


def _values(trials: list[TrialSummary], flow: str, key: str) -> list[float]:
    """`key` (a FlowResult field) of `flow` in each trial that recorded it."""
    return [v for t in trials if (v := num(_field(t.flow(flow), key))) is not None]


def _field(flow: FlowResult | None, key: str):
    return None if flow is None else getattr(flow, key)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
