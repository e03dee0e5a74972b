"""Report section "Parallel TCP vs stiff UDP" (seed 002 Tables I-V and the appropriation of VII.C).

Shown when the run has seed 002's cases (cases.py: a foreground TCP method against the stiff
sinusoidal UDP stream, or against background TCP flows); a row per TCP method ("Baseline 1",
"Parallel N", "Combined N"), the paper's rows always and in its order. The paper's numbers come
from the cell's `reference` values, else reference.py. A missing cell, trial or file shows as "–"
with a note; an analysis failure becomes a note, never an exception.

SECTION is the reports.sections.Section; its template, stiff_udp.html.j2, lies beside this file.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.studies.stiff_udp import analysis as su
from longhaul.collectors.studies.stiff_udp import appropriation as ap
from longhaul.collectors.studies.stiff_udp import cases as sc
from longhaul.collectors.studies.stiff_udp import reference as ref
from longhaul.reports.fmt import DASH, mean, mean_std, num
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, decorate, to_svg
from longhaul.reports.sections import figure

log = logging.getLogger(__name__)
# (Min, Max) Mb/s -> the paper's (effectiveness table, fairness table) for that UDP range.
RANGE_TABLES = {(1.0, 10.0): (ref.TABLE_I, ref.TABLE_IV), (50.0, 80.0): (ref.TABLE_II, ref.TABLE_V)}
# the printed tables' rows, in their order ("Base" in Table V is its "Baseline 1")
PAPER_ROWS = ref.TABLE_I.row_names()
FIGURE_WINDOW_S = 60.0   # 240 s of a 9.87 s cosine is unreadable at page width


class StiffUdpSection:
    """Seed 002's Tables I-V and the appropriation of section VII.C."""

    name = "stiff-udp"
    template = Path(__file__).with_name("stiff_udp.html.j2")

    def applies(self, store: StoredRun) -> bool:
        try:
            candidates = [c for c in store.entries if sc.candidate(c)]
        except Exception:  # noqa: BLE001 - an unreadable store is the rest of the report's business
            log.exception("seed 002 section: cell detection failed")
            return False
        for cell in candidates:
            try:
                if sc.shape(store, cell)[0] is not None:
                    return True
            except Exception:  # noqa: BLE001 - context() turns the cell into a note, which is worth showing
                return True
        return False

    def context(self, store: StoredRun) -> dict:
        notes: list[str] = []
        stiff, cross = sc.collect(store, notes)
        try:
            parts = {"error": None, **_render(store, stiff, cross, notes)}
        except Exception as exc:  # noqa: BLE001 - the report must survive a bug in one analysis
            log.exception("seed 002 section failed")
            parts = {"error": f"The seed 002 analysis failed: {exc}"}
        return {"intro": None, "effectiveness": [], "fairness": [], "figure": None, "appropriation": None,
                **parts, "notes": notes}


SECTION = StiffUdpSection()


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
    for case, name in _rows(cases, rng, "UDP " + _range(rng), notes):
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
    for case, name in _rows(cases, rng, None, []):
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
    base = next((c for c in cases if c["method"] == sc.BASELINE and c["cross"]), None)
    b = float(np.median(base["cross"])) if base else None
    if base is None:
        notes.append("No Baseline 1 cross-traffic cell with results: appropriation cannot be computed.")
    rows = []
    for case, name in _rows(cases, None, "cross traffic", notes):
        c = case or {}
        base_row = name == sc.BASELINE
        a = float(np.median(c["cross"])) if c.get("cross") else None
        pct = ap.appropriation_pct(b, a) if b and a is not None and not base_row else None
        paper_pct = _paper_value(case, "appropriation_pct", ref.APPROPRIATION_PCT.get(name))
        paper_cross = _paper_value(case, "cross", ref.BASELINE_COMPETING_AGGREGATE_MBPS if base_row else None)
        implied = ""
        if paper_cross is None and paper_pct is not None:   # Figure 4's bar, recovered from the text
            paper_cross, implied = round(ap.competing_aggregate_from_pct(
                ref.BASELINE_COMPETING_AGGREGATE_MBPS, paper_pct), 2), "≈"
        k = c.get("k") or ref.COMPETING_STREAMS
        # N/(N+k) is the share of N equal streams: not a prediction for fractional ones
        predicted = ap.predicted_appropriation_pct(c["streams"], k) if name.startswith("Parallel") and case else None
        rows.append(_tr(name, _ms(c.get("tcp_mbps")),
                        _paper(case, ref.TABLE_III, name, "tcp", "Throughput Mb/sec"),
                        _f(mean(c.get("tcp_bytes")), 1, 1e-6), _paper(case, ref.TABLE_III, name, None, "Measured MB"),
                        _f(a, 2), _pv(paper_cross, implied),
                        "(baseline)" if base_row else _f(pct, 1), _pv(paper_pct), _f(predicted, 1),
                        str(len(c.get("ok") or []))))
    return {"title": "TABLE III equivalent and appropriation (section VII.C): 5 cross TCP streams", "rows": rows}


def _rows(cases: list[dict], rng, what: str | None, notes: list[str]):
    """(case or None, row name): the paper's rows always, in its order, then any other method."""
    by: dict[str, dict] = {}
    for c in cases:
        if c["method"] in by:
            notes.append(f"Cells {by[c['method']]['cell'].id} and {c['cell'].id} are both "
                         f"{c['method']} ({what}); only the first is shown.")
            continue
        by[c["method"]] = c
    paper = list(PAPER_ROWS) if rng in RANGE_TABLES or rng is None else []
    others = sorted((c for n, c in by.items() if n not in paper), key=lambda c: (c["streams"], c["method"]))
    missing = [n for n in paper if n not in by]
    if missing and what:
        notes.append(f"No {', '.join(missing)} cell ({what}) in this run: "
                     f"{'its row shows' if len(missing) == 1 else 'their rows show'} “–”.")
    for name in paper + [c["method"] for c in others]:
        yield by.get(name), name


def _figure(store, ranges, stiff: list[dict], notes: list[str]) -> str | None:
    picks = []
    for rng in ranges:
        for case in sorted((c for c in stiff if (c["lo"], c["hi"]) == rng), key=lambda c: (c["streams"], c["method"])):
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
                decorate(ax, f"UDP {_range((case['lo'], case['hi']))} Mb/s vs {case['method']}: "
                          f"{case['cell'].id}, trial {trial}", "time since trial start (s)", "Mb/s")
                ax.set_ylim(bottom=0)
            return to_svg(fig, "stiff-udp")
        finally:
            fig.clear()


# ---- small helpers -------------------------------------------------------------------------------

def _paper(case, table, row: str, key: str | None, column: str) -> dict:
    """The paper's number: the cell's reference value `key`, else the printed table's."""
    name = "Base" if table is ref.TABLE_V and row == sc.BASELINE else row   # Table V's own row name
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


def _title(table, what: str, rng: tuple) -> str:
    return f"{table.number + ' equivalent: ' if table else ''}{what} for UDP ∈ [{_range(rng, ', ')}] Mb/s"


def _range(rng: tuple, sep: str = "-") -> str:
    return sep.join("?" if x is None else f"{x:g}" for x in rng)


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
