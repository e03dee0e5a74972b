"""Report section "Parallel TCP vs stiff UDP" (seed 002 Tables I-V and the appropriation of VII.C).

Shown when the run has seed-002-shaped cells: a foreground TCP flow against a sinusoid paced-UDP
background (Tables I/II, IV/V), or against background TCP flows in a cell whose reference source
starts with "seed 002" or whose scenario is named cross-p<N> (Table III). Rows are the foreground's
stream count (1 = "Baseline 1", N = "Parallel N"); the paper's numbers come from the cell's
`reference` values, else collectors/seed002_reference.

min/max/period/duration of the sinusoid are not in summary.json's declared flows; they are read from
the manifest's expanded cell (`cells[].cell`, durations already time-scaled), else from the run's
snapshot of the profile TOML with the scenario's `set` and the cell's params applied. A missing cell,
trial or file shows as "–" with a note; an analysis failure becomes a note, never an exception.

SECTION is the reports.sections.Section; its template, stiff_udp.html.j2, lies beside this file.
"""
from __future__ import annotations

import logging
import math
import re
import tomllib
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.store.records import CellEntry, FlowResult, TrialSummary
from longhaul.collectors.studies.stiff_udp import analysis as su
from longhaul.collectors.studies.stiff_udp import appropriation as ap
from longhaul.collectors.studies.stiff_udp import reference as ref
from longhaul.drivers.patterns import SINUSOID
from longhaul.reports.fmt import DASH, mean, mean_std, num
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, decorate, to_svg
from longhaul.reports.sections import figure

log = logging.getLogger(__name__)
# (Min, Max) Mb/s -> the paper's (effectiveness table, fairness table) for that UDP range.
RANGE_TABLES = {(1.0, 10.0): (ref.TABLE_I, ref.TABLE_IV), (50.0, 80.0): (ref.TABLE_II, ref.TABLE_V)}
PAPER_STREAMS = (1, 5, 9)
# fping's default ICMP echo: 56 B payload + 8 B ICMP + 20 B IPv4 header = 84 B on the bottleneck
# (Ethernet framing left out); burst mode sends 10 pings per second.
ICMP_IP_BYTES = 84
BURST_PINGS_PER_S = 10
FIGURE_WINDOW_S = 60.0   # 240 s of a 9.87 s cosine is unreadable at page width


class StiffUdpSection:
    """Seed 002's Tables I-V and the appropriation of section VII.C."""

    name = "stiff-udp"
    template = Path(__file__).with_name("stiff_udp.html.j2")

    def applies(self, store: StoredRun) -> bool:
        try:
            candidates = [c for c in store.entries if _candidate(c)]
        except Exception:  # noqa: BLE001 - an unreadable store is the rest of the report's business
            log.exception("seed 002 section: cell detection failed")
            return False
        for cell in candidates:
            try:
                if _shape(store, cell)[0] is not None:
                    return True
            except Exception:  # noqa: BLE001 - context() turns the cell into a note, which is worth showing
                return True
        return False

    def context(self, store: StoredRun) -> dict:
        notes: list[str] = []
        stiff, cross = _collect(store, notes)
        try:
            parts = {"error": None, **_render(store, stiff, cross, notes)}
        except Exception as exc:  # noqa: BLE001 - the report must survive a bug in one analysis
            log.exception("seed 002 section failed")
            parts = {"error": f"The seed 002 analysis failed: {exc}"}
        return {"intro": None, "effectiveness": [], "fairness": [], "figure": None, "appropriation": None,
                **parts, "notes": notes}


SECTION = StiffUdpSection()


# ---- detection and per-cell numbers -------------------------------------------------------------

def _seed002(cell: CellEntry) -> bool:
    source = str((cell.reference or {}).get("source") or "")
    return source.lower().startswith("seed 002") or bool(re.fullmatch(r"cross-p\d+", str(cell.scenario)))


def _candidate(cell: CellEntry) -> bool:
    """The cheap test first: most runs have nothing for this section."""
    return _seed002(cell) or any(f.get("pattern") == SINUSOID for f in _flows(cell, None).values())


def _shape(store, cell: CellEntry) -> tuple[str | None, dict | None, dict[str, dict]]:
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


def _collect(store, notes: list[str]) -> tuple[list[dict], list[dict]]:
    """(stiff-UDP cases, cross-traffic cases): one dict per seed-002 cell with its numbers."""
    stiff, cross = [], []
    for cell in store.entries:
        if not _candidate(cell):
            continue
        try:
            _add_case(store, cell, stiff, cross)
        except Exception as exc:  # one odd cell must not hide the others
            log.exception("seed 002 section: cell %s", cell.id)
            notes.append(f"Cell {cell.id} could not be analysed: {exc}")
    return stiff, cross


def _add_case(store, cell: CellEntry, stiff: list[dict], cross: list[dict]) -> None:
    kind, decl, flows = _shape(store, cell)
    if kind is None:
        return
    fg = next(f for f in flows.values() if f.get("role") == "foreground" and (f.get("protocol") or "tcp") == "tcp")
    ok = cell.ok_trials
    case = {"cell": cell, "fg": fg["name"], "streams": _int(fg.get("streams")) or 1, "ok": ok,
            "tcp_mbps": _values(ok, fg["name"], "mean_mbps"), "tcp_bytes": _values(ok, fg["name"], "bytes")}
    if kind == "stiff":
        sine = next(f for f in flows.values() if f.get("pattern") == SINUSOID)
        stiff.append({**case, **_stiff_numbers(store, case, sine, decl, flows)})
    else:
        bg_tcp = [n for n, f in flows.items() if f.get("role") == "background" and f.get("protocol") == "tcp"]
        case["k"] = sum(_int(flows[n].get("streams")) or 1 for n in bg_tcp)
        case["cross"] = [sum(_values([t], n, "mean_mbps")[0] for n in bg_tcp) for t in ok
                         if all(_values([t], n, "mean_mbps") for n in bg_tcp)]
        cross.append(case)


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


# ---- rendering -----------------------------------------------------------------------------------

def _render(store, stiff: list[dict], cross: list[dict], notes: list[str]) -> dict:
    """The template's parts in page order; notes are added in the same order as the parts."""
    ranges = sorted({(c["lo"], c["hi"]) for c in stiff},
                    key=lambda r: tuple(math.inf if x is None else x for x in r))
    out = {"intro": _intro(stiff),
           "effectiveness": [_effectiveness(rng, [c for c in stiff if (c["lo"], c["hi"]) == rng], notes)
                             for rng in ranges],
           "fairness": [_fairness(rng, [c for c in stiff if (c["lo"], c["hi"]) == rng], notes)
                        for rng in ranges],
           "figure": None, "appropriation": None}
    if stiff:
        for rng in RANGE_TABLES:
            if rng not in ranges:
                notes.append(f"No cell with UDP {_range(rng)} Mb/s in this run: "
                             f"{RANGE_TABLES[rng][0].number} is not reproduced.")
        out["figure"] = figure(
            _figure(store, ranges, stiff, notes),
            f"Declared stiff UDP rate f(t) (eq. 3, c = period/2π), the UDP flow's per-second received rate "
            f"and the TCP flow's per-second throughput, first {FIGURE_WINDOW_S:g} s of one trial per UDP "
            f"range (fewest TCP streams). Each 1 s receiver interval, plotted at its end, averages f(t) over "
            f"that second, so it swings less than f(t) and lags it by ½ s.")
    if cross:
        out["appropriation"] = _appropriation(cross, notes)
    elif stiff:
        notes.append("No cross-traffic cells (cross-p<N>) in this run: Table III and the appropriation "
                     "of section VII.C are not reproduced.")
    for case in stiff + cross:
        n_all = len(case["cell"].trials)
        if len(case["ok"]) < n_all or not n_all:
            notes.append(f"Cell {case['cell'].id}: {len(case['ok'])} of {n_all} trials ok; "
                         f"only ok trials are used.")
        if case.get("rtt_fallback"):
            notes.append(f"Cell {case['cell'].id}: rtt.csv missing in {case['rtt_fallback']} "
                         f"trial(s); their median RTT is trial.json's (whole trial).")
    return out


def _intro(stiff: list[dict]) -> dict:
    """The numbers behind the text on T (eq. 8), from the first case that has T."""
    c = next((c for c in stiff if c["t_bytes"]), None)
    if c is None:
        return {"t": None, "scaled": None}
    t = {"link": f"{c['link']:g}", "tau": f"{c['tau']:g}", "period": f"{c['period']:.4g}",
         "c": f"{c['period'] / (2 * math.pi):.4g}", "icmp": f"{c['icmp']:.3f}",
         "implied_icmp": f"{ref.IMPLIED_ICMP_MBPS}",
         "excess_mb": f"{(ref.IMPLIED_ICMP_MBPS - c['icmp']) * c['tau'] / 8:.1f}"}
    scaled = {"tau": f"{c['tau']:g}", "paper": f"{ref.DURATION_S:g}"} if c["tau"] != ref.DURATION_S else None
    return {"t": t, "scaled": scaled}


def _effectiveness(rng: tuple, cases: list[dict], notes: list[str]) -> dict:
    table = RANGE_TABLES.get(rng, (None, None))[0]
    paper_t = ref.THEORETICAL_CAPACITY_MB.get(table.number) if table else None
    rows = []
    for streams, case, name in _rows(cases, rng, "UDP " + _range(rng), notes):
        c = case or {}
        if case and not case["t_bytes"]:
            notes.append(f"Cell {case['cell'].id}: T needs the sinusoid's min/max/period, the "
                         f"duration, the bottleneck rate and the probe settings; not all were recorded.")
        rows.append(_tr(name, _ms(c.get("tcp_mbps")), _paper(case, table, name, "tcp", "Throughput Mb/sec"),
                        _f(mean(c.get("tcp_bytes")), 1, 1e-6), _paper(case, table, name, None, "Measured MB"),
                        _f(c.get("t_bytes"), 1, 1e-6), _ms(c.get("achieved")),
                        _paper(case, table, name, "achieved_pct", "Achieved %"), str(len(c.get("ok") or []))))
    return {"title": _title(table, "TCP effectiveness", rng) + (f" (paper T = {paper_t} MB)" if table else ""),
            "rows": rows}


def _fairness(rng: tuple, cases: list[dict], notes: list[str]) -> dict:
    table = RANGE_TABLES.get(rng, (None, None))[1]
    rows = []
    for streams, case, name in _rows(cases, rng, None, []):
        c = case or {}
        loss = float(np.median(c["loss"])) if c.get("loss") else None
        rows.append(_tr(name, _f(float(np.median(c["rtt"])) if c.get("rtt") else None, 2),
                        _paper(case, table, name, "rtt_ms", "RTT (msec)"),
                        _f(su.paper_sqrt_p_from_percent(min(loss, 100.0)) if loss is not None else None, 3),
                        _paper(case, table, name, "sqrt_p", "\\sqrt{p}"), _f(loss, 3),
                        str(len(c.get("ok") or []))))
        if case and case["ok"] and not c.get("loss"):
            notes.append(f"Cell {case['cell'].id}: no UDP loss recorded; √p is “–”.")
    return {"title": _title(table, "fairness", rng), "rows": rows}


def _appropriation(cases: list[dict], notes: list[str]) -> dict:
    base = next((c for c in cases if c["streams"] == 1 and c["cross"]), None)
    b = float(np.median(base["cross"])) if base else None
    if base is None:
        notes.append("No Baseline 1 cross-traffic cell with results: appropriation cannot be computed.")
    rows = []
    for streams, case, name in _rows(cases, None, "cross traffic", notes):
        c = case or {}
        a = float(np.median(c["cross"])) if c.get("cross") else None
        pct = ap.appropriation_pct(b, a) if b and a is not None and streams != 1 else None
        paper_pct = _paper_value(case, "appropriation_pct", ref.APPROPRIATION_PCT.get(name))
        paper_cross = _paper_value(case, "cross", ref.BASELINE_COMPETING_AGGREGATE_MBPS if streams == 1 else None)
        implied = ""
        if paper_cross is None and paper_pct is not None:   # Figure 4's bar, recovered from the text
            paper_cross, implied = round(ap.competing_aggregate_from_pct(
                ref.BASELINE_COMPETING_AGGREGATE_MBPS, paper_pct), 2), "≈"
        k = c.get("k") or ref.COMPETING_STREAMS
        rows.append(_tr(name, _ms(c.get("tcp_mbps")),
                        _paper(case, ref.TABLE_III, name, "tcp", "Throughput Mb/sec"),
                        _f(mean(c.get("tcp_bytes")), 1, 1e-6), _paper(case, ref.TABLE_III, name, None, "Measured MB"),
                        _f(a, 2), _pv(paper_cross, implied),
                        _f(pct, 1) if streams != 1 else "(baseline)", _pv(paper_pct),
                        _f(ap.predicted_appropriation_pct(streams, k), 1) if streams != 1 else DASH,
                        str(len(c.get("ok") or []))))
    return {"title": "TABLE III equivalent and appropriation (section VII.C): 5 cross TCP streams", "rows": rows}


def _rows(cases: list[dict], rng, what: str | None, notes: list[str]):
    """(streams, case or None, row name): the paper's 1/5/9 always, plus any other stream count."""
    by = {}
    for c in cases:
        if c["streams"] in by:
            notes.append(f"Cells {by[c['streams']]['cell'].id} and {c['cell'].id} are both "
                         f"{_row_name(c['streams'])} ({what}); only the first is shown.")
            continue
        by[c["streams"]] = c
    wanted = sorted(set(by) | (set(PAPER_STREAMS) if rng in RANGE_TABLES or rng is None else set()))
    for s in wanted:
        if s not in by and what:
            notes.append(f"No {_row_name(s)} cell ({what}) in this run: its row shows “–”.")
        yield s, by.get(s), _row_name(s)


def _figure(store, ranges, stiff: list[dict], notes: list[str]) -> str | None:
    picks = []
    for rng in ranges:
        for case in sorted((c for c in stiff if (c["lo"], c["hi"]) == rng), key=lambda c: c["streams"]):
            trial, thr = next(((t.trial, s) for t in case["ok"]
                               if (s := store.trial_series(case["cell"].id, t.trial).throughput)),
                              (None, None))
            if trial is not None:
                picks.append((case, trial, thr))
                break
        else:
            notes.append(f"UDP {_range(rng)}: no trial with a throughput.csv; not in the figure.")
    if not picks:
        return None
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, 2.2 * len(picks)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = np.atleast_1d(fig.subplots(len(picks), 1, squeeze=False)).ravel()
        try:
            for ax, (case, trial, thr) in zip(axes, picks):
                end = min(FIGURE_WINDOW_S, case["tau"] or FIGURE_WINDOW_S)
                if None not in (case["lo"], case["hi"], case["period"]):
                    t = np.arange(0.0, end, 0.05)
                    f = [su.udp_rate_mbps(max(0.0, x - case["start"]), case["lo"], case["hi"], case["period"],
                                          c_s=case["period"] / (2 * math.pi)) for x in t]
                    ax.plot(t, f, color="0.35", lw=0.8, ls="--", label="declared f(t)")
                for flow, color in ((case["udp"], PALETTE[1]), (case["fg"], PALETTE[0])):
                    if flow in thr:
                        keep = thr[flow][0] <= end
                        ax.plot(thr[flow][0][keep], thr[flow][1][keep], ".-", ms=2.5, lw=0.9, color=color,
                                label=f"{flow} received (1 s)")
                decorate(ax, f"UDP {_range((case['lo'], case['hi']))} Mb/s vs {_row_name(case['streams'])}: "
                          f"{case['cell'].id}, trial {trial}", "time since trial start (s)", "Mb/s")
                ax.set_ylim(bottom=0)
            return to_svg(fig, "stiff-udp")
        finally:
            fig.clear()


# ---- small helpers -------------------------------------------------------------------------------

def _paper(case, table, row: str, key: str | None, column: str) -> dict:
    """The paper's number: the cell's reference value `key`, else the printed table's."""
    name = "Base" if table is ref.TABLE_V and row == "Baseline 1" else row   # Table V's own row name
    printed = table.value(name, column) if table is not None and name in table.row_names() else None
    return _pv(_paper_value(case, key, printed))


def _pv(value, prefix: str = "") -> dict:
    """A paper value with the precision it was printed with (the template shows it in grey)."""
    return {"text": f"{prefix}{value:g}", "paper": True} if num(value) is not None else _cell(DASH)


def _cell(text: str) -> dict:
    return {"text": text, "paper": False}


def _paper_value(case, key: str | None, default):
    values = ((case["cell"].reference if case else None) or {}).get("values") or {}
    return num(values.get(key)) if key and num(values.get(key)) is not None else num(default)


def _values(trials: list[TrialSummary], flow: str, key: str) -> list[float]:
    """`key` (a FlowResult field) of `flow` in each trial that recorded it."""
    return [v for t in trials if (v := num(_field(t.flow(flow), key))) is not None]


def _field(flow: FlowResult | None, key: str):
    return None if flow is None else getattr(flow, key)


def _title(table, what: str, rng: tuple) -> str:
    return f"{table.number + ' equivalent: ' if table else ''}{what} for UDP ∈ [{_range(rng, ', ')}] Mb/s"


def _row_name(streams: int) -> str:
    return "Baseline 1" if streams == 1 else f"Parallel {streams}"


def _range(rng: tuple, sep: str = "-") -> str:
    return sep.join("?" if x is None else f"{x:g}" for x in rng)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _f(value, digits: int, scale: float = 1.0) -> str:
    v = num(value)
    return DASH if v is None else f"{v * scale:.{digits}f}"


def _ms(values) -> str:
    """mean ± sample std over trials (a single trial has no spread to show)."""
    if not values:
        return DASH
    std = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return mean_std(float(np.mean(values)), std, len(values), _two, _two)


def _two(value) -> str:
    return f"{value:.2f}"


def _tr(name: str, *cells: str | dict) -> dict:
    """A table row: the method's name, then numbers as text or paper values from _pv."""
    return {"name": name, "cells": [c if isinstance(c, dict) else _cell(c) for c in cells]}
