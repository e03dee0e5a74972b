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
"""
from __future__ import annotations

import html
import logging
import math
import re
import tomllib

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from longhaul.collectors.studies.stiff_udp import appropriation as ap
from longhaul.collectors.studies.stiff_udp import reference as ref
from longhaul.collectors.studies.stiff_udp import analysis as su
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, _decorate, _to_svg

log = logging.getLogger(__name__)
DASH = "–"
# (Min, Max) Mb/s -> the paper's (effectiveness table, fairness table) for that UDP range.
RANGE_TABLES = {(1.0, 10.0): (ref.TABLE_I, ref.TABLE_IV), (50.0, 80.0): (ref.TABLE_II, ref.TABLE_V)}
PAPER_STREAMS = (1, 5, 9)
# fping's default ICMP echo: 56 B payload + 8 B ICMP + 20 B IPv4 header = 84 B on the bottleneck
# (Ethernet framing left out); burst mode sends 10 pings per second.
ICMP_IP_BYTES = 84
BURST_PINGS_PER_S = 10
FIGURE_WINDOW_S = 60.0   # 240 s of a 9.87 s cosine is unreadable at page width


def section(store) -> str | None:
    notes: list[str] = []
    try:
        stiff, cross = _collect(store, notes)
    except Exception:  # an unreadable store is the rest of the report's business
        log.exception("seed 002 section: cell detection failed")
        return None
    if not stiff and not cross and not notes:
        return None
    try:
        parts = _render(store, stiff, cross, notes)
    except Exception as exc:  # the report must survive a bug in one analysis
        log.exception("seed 002 section failed")
        parts = [f'<p class="missing">The seed 002 analysis failed: {_e(exc)}</p>']
    if notes:
        parts.append('<ul class="missing">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return ('<section id="stiff-udp"><h2>Parallel TCP against stiff UDP and cross traffic '
            '(seed 002, Tables I–V)</h2>' + "\n".join(parts) + "</section>")


# ---- detection and per-cell numbers -------------------------------------------------------------

def _collect(store, notes: list[str]) -> tuple[list[dict], list[dict]]:
    """(stiff-UDP cases, cross-traffic cases): one dict per seed-002 cell with its numbers."""
    stiff, cross = [], []
    for cell in store.cells:
        source = str(((cell.get("reference") or {}).get("source")) or "")
        seed002 = source.lower().startswith("seed 002") or re.fullmatch(r"cross-p\d+", str(cell.get("scenario")))
        if not seed002 and not any(f.get("pattern") == "sinusoid" for f in _flows(cell, None).values()):
            continue   # cheap test first: most runs have nothing for this section
        try:
            _add_case(store, cell, seed002, stiff, cross)
        except Exception as exc:  # one odd cell must not hide the others
            log.exception("seed 002 section: cell %s", cell.get("id"))
            notes.append(f"Cell {cell.get('id')} could not be analysed: {exc}")
    return stiff, cross


def _add_case(store, cell: dict, seed002, stiff: list[dict], cross: list[dict]) -> None:
    decl = _declared(store, cell)
    flows = _flows(cell, decl)
    fg = next((f for f in flows.values() if f.get("role") == "foreground"
               and (f.get("protocol") or "tcp") == "tcp"), None)
    if fg is None:
        return
    sine = next((f for f in flows.values() if f.get("pattern") == "sinusoid"), None)
    bg_tcp = [n for n, f in flows.items() if f.get("role") == "background" and f.get("protocol") == "tcp"]
    ok = [t for t in cell.get("trials") or [] if t.get("status") == "ok"]
    case = {"cell": cell, "fg": fg["name"], "streams": _int(fg.get("streams")) or 1, "ok": ok,
            "tcp_mbps": _values(ok, fg["name"], "mean_mbps"), "tcp_bytes": _values(ok, fg["name"], "bytes")}
    if sine is not None:
        stiff.append({**case, **_stiff_numbers(store, case, sine, decl, flows)})
    elif seed002 and bg_tcp:
        case["k"] = sum(_int(flows[n].get("streams")) or 1 for n in bg_tcp)
        case["cross"] = [sum(_flow(t, n)["mean_mbps"] for n in bg_tcp) for t in ok
                         if all(_values([t], n, "mean_mbps") for n in bg_tcp)]
        cross.append(case)


def _declared(store, cell: dict) -> dict | None:
    """The expanded cell {topology, probe, flows} as run: the manifest's copy, else the profile snapshot."""
    for c in store.manifest.get("cells") or []:
        if c.get("id") == cell.get("id") and isinstance(c.get("cell"), dict):
            return c["cell"]
    prof = (store.manifest.get("profiles") or {}).get(cell.get("profile")) or {}
    if not prof.get("source"):
        return None
    try:
        doc = tomllib.loads(prof["source"])
    except tomllib.TOMLDecodeError:
        return None
    parts = {"topology": dict(doc.get("topology") or {}), "probe": dict(doc.get("probe") or {})}
    scen = next((s for s in doc.get("scenarios") or [] if s.get("name") == cell.get("scenario")), {})
    flows = {f.get("name"): dict(f) for f in doc.get("flows") or []
             if scen.get("flows") is None or f.get("name") in scen["flows"]}
    for key, value in [*(scen.get("set") or {}).items(), *(cell.get("params") or {}).items()]:
        path = str(key).split(".")
        if path[0] == "flows" and len(path) == 3 and path[1] in flows:
            flows[path[1]][path[2]] = value
        elif len(path) == 2 and path[0] in parts:
            parts[path[0]][path[1]] = value
    scale = _num(store.manifest.get("time_scale_override")) or _num(prof.get("time_scale")) \
        or _num((doc.get("profile") or {}).get("time_scale")) or 1.0
    for f in flows.values():
        if _num(f.get("duration_s")) is not None:
            f["duration_s"] = f["duration_s"] * scale
    return {**parts, "flows": list(flows.values())}


def _flows(cell: dict, decl: dict | None) -> dict[str, dict]:
    """Flow name -> declared keys: summary's declared flows, completed by the expanded cell's."""
    full = {f.get("name"): f for f in (decl or {}).get("flows") or []}
    out = {f.get("name"): {**full.get(f.get("name"), {}), **f} for f in cell.get("flows") or []}
    if not out:   # a cell rebuilt from trial files only
        out = {f.get("name"): {**full.get(f.get("name"), {}), **f}
               for t in cell.get("trials") or [] for f in t.get("flows") or []}
    return {n: f for n, f in out.items() if n}


def _stiff_numbers(store, case: dict, sine: dict, decl: dict | None, flows: dict) -> dict:
    cell, fg = case["cell"], flows[case["fg"]]
    lo, hi, period = _num(sine.get("min_mbps")), _num(sine.get("max_mbps")), _num(sine.get("period_s"))
    tau = _num(fg.get("duration_s")) or _num(sine.get("duration_s"))
    link = _num((cell.get("topology") or {}).get("bottleneck_rate_mbps")) \
        or _num(((decl or {}).get("topology") or {}).get("bottleneck_rate_mbps"))
    icmp = _icmp_mbps((decl or {}).get("probe") or {}) if decl else None
    t_bytes = None
    if None not in (lo, hi, period, tau, link, icmp):
        t_bytes = su.theoretical_capacity_bytes(tau, link, lo, hi, period, icmp, c_s=period / (2 * math.pi))
    rtts, fallback = [], 0
    for t in case["ok"]:
        series = store.trial_series(cell["id"], t.get("trial")).rtt
        if series is not None and series[0].size:
            keep = (series[0] >= 0) & (series[0] <= (tau or np.inf))   # the transfer, not the tail
            if keep.any():
                rtts.append(float(np.median(series[1][keep])))
        elif _num((t.get("rtt") or {}).get("median_ms")) is not None:
            rtts.append(float(t["rtt"]["median_ms"]))
            fallback += 1
    return {"lo": lo, "hi": hi, "period": period, "tau": tau, "link": link, "icmp": icmp,
            "t_bytes": t_bytes, "udp": sine["name"], "start": _num(sine.get("start_s")) or 0.0,
            "achieved": [su.effectiveness_pct(b, t_bytes) for b in case["tcp_bytes"]] if t_bytes else [],
            "rtt": rtts, "rtt_fallback": fallback, "loss": _values(case["ok"], sine["name"], "lost_percent")}


def _icmp_mbps(probe: dict) -> float:
    """I of eq. (4) for our probe: one 84-byte echo every interval_ms, or 10 a second in burst mode."""
    if probe.get("mode", "burst") == "interval":
        return su.icmp_rate_mbps(ICMP_IP_BYTES, (_num(probe.get("interval_ms")) or 10.0) / 1000.0)
    return su.icmp_rate_mbps(ICMP_IP_BYTES * BURST_PINGS_PER_S, 1.0)


# ---- rendering -----------------------------------------------------------------------------------

def _render(store, stiff: list[dict], cross: list[dict], notes: list[str]) -> list[str]:
    parts = [_intro(stiff, cross)]
    ranges = sorted({(c["lo"], c["hi"]) for c in stiff},
                    key=lambda r: tuple(math.inf if x is None else x for x in r))
    for rng in ranges:
        parts.append(_effectiveness(rng, [c for c in stiff if (c["lo"], c["hi"]) == rng], notes))
    for rng in ranges:
        parts.append(_fairness(rng, [c for c in stiff if (c["lo"], c["hi"]) == rng], notes))
    if stiff:
        for rng in RANGE_TABLES:
            if rng not in ranges:
                notes.append(f"No cell with UDP {_range(rng)} Mb/s in this run: "
                             f"{RANGE_TABLES[rng][0].number} is not reproduced.")
        svg = _figure(store, ranges, stiff, notes)
        if svg:
            parts.append(f"<figure>{svg}<figcaption>Declared stiff UDP rate f(t) (eq. 3, c = period/2π), "
                         f"the UDP flow's per-second received rate and the TCP flow's per-second "
                         f"throughput, first {FIGURE_WINDOW_S:g} s of one trial per UDP range (fewest "
                         f"TCP streams). Each 1 s receiver interval, plotted at its end, averages f(t) over "
                         f"that second, so it swings less than f(t) and lags it by ½ s.</figcaption></figure>")
    if cross:
        parts.append(_appropriation(cross, notes))
    elif stiff:
        notes.append("No cross-traffic cells (cross-p<N>) in this run: Table III and the appropriation "
                     "of section VII.C are not reproduced.")
    for case in stiff + cross:
        n_all = len(case["cell"].get("trials") or [])
        if len(case["ok"]) < n_all or not n_all:
            notes.append(f"Cell {case['cell'].get('id')}: {len(case['ok'])} of {n_all} trials ok; "
                         f"only ok trials are used.")
        if case.get("rtt_fallback"):
            notes.append(f"Cell {case['cell'].get('id')}: rtt.csv missing in {case['rtt_fallback']} "
                         f"trial(s); their median RTT is trial.json's (whole trial).")
    return parts


def _intro(stiff: list[dict], cross: list[dict]) -> str:
    text = ("<p>A 1-stream (“Baseline 1”) or N-stream (“Parallel N”) TCP transfer shares the "
            "bottleneck with the paper's stiff sinusoidal UDP stream or with 5 single TCP streams; "
            "the paper's “Combined” rows need its kernel patch and are not run. Ours: mean ± "
            "sample std over ok trials (n in the last column); paper's values in grey.</p>")
    known = [c for c in stiff if c["t_bytes"]]
    if known:
        c = known[0]
        text += (f"<p>T is eq. (8) for what our lab sent: M = {c['link']:g} Mb/s (the configured "
                 f"bottleneck), τ = the TCP flow's duration ({c['tau']:g} s), Min/Max/period of the "
                 f"declared sinusoid with c = period/2π as our paced source uses (period {c['period']:.4g} s, "
                 f"c = {c['period'] / (2 * math.pi):.4g} s, the paper's 0.05π·10 s), and I = {c['icmp']:.3f} "
                 f"Mb/s: our fping sends its default 56-byte payload (84 B as IPv4 packet) every "
                 f"probe interval, where the paper sent 1440 B every 10 ms (its printed T imply I = "
                 f"{ref.IMPLIED_ICMP_MBPS} Mb/s). So our T is larger than the paper's by about "
                 f"(1.09 − I)·τ/8 MB ({(ref.IMPLIED_ICMP_MBPS - c['icmp']) * c['tau'] / 8:.1f} MB here). "
                 f"Units: our Measured MB are 10<sup>6</sup> bytes received and Achieved % divides bytes "
                 f"by bytes; the paper's Measured MB look like Iperf MBytes (2<sup>20</sup> B) divided by "
                 f"T in 10<sup>6</sup>-byte MB, which understates its Achieved % by 4.9 % relative.</p>")
        if c["tau"] != ref.DURATION_S:
            text += (f"<p class='missing'>Our transfers lasted {c['tau']:g} s, not the paper's "
                     f"{ref.DURATION_S:g} s (time scale): compare Mb/s and percentages, not MB.</p>")
    return text


def _effectiveness(rng: tuple, cases: list[dict], notes: list[str]) -> str:
    table = RANGE_TABLES.get(rng, (None, None))[0]
    paper_t = ref.THEORETICAL_CAPACITY_MB.get(table.number) if table else None
    head = ("<tr><th>TCP method</th><th>Throughput Mb/s</th><th>paper</th><th>Measured MB</th>"
            "<th>paper</th><th>T MB (ours)</th><th>Achieved %</th><th>paper</th><th>n</th></tr>")
    rows = []
    for streams, case, name in _rows(cases, rng, "UDP " + _range(rng), notes):
        c = case or {}
        if case and not case["t_bytes"]:
            notes.append(f"Cell {case['cell'].get('id')}: T needs the sinusoid's min/max/period, the "
                         f"duration, the bottleneck rate and the probe settings; not all were recorded.")
        rows.append(_tr(name, _ms(c.get("tcp_mbps")), _paper(case, table, name, "tcp", "Throughput Mb/sec"),
                        _f(_mean(c.get("tcp_bytes")), 1, 1e-6), _paper(case, table, name, None, "Measured MB"),
                        _f(c.get("t_bytes"), 1, 1e-6), _ms(c.get("achieved")),
                        _paper(case, table, name, "achieved_pct", "Achieved %"), str(len(c.get("ok") or []))))
    return _table(_title(table, "TCP effectiveness", rng) + (f" (paper T = {paper_t} MB)" if table else ""),
                  head, rows)


def _fairness(rng: tuple, cases: list[dict], notes: list[str]) -> str:
    table = RANGE_TABLES.get(rng, (None, None))[1]
    head = ("<tr><th>TCP method</th><th>median RTT ms</th><th>paper</th><th>√p</th><th>paper</th>"
            "<th>UDP loss % (median)</th><th>n</th></tr>")
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
            notes.append(f"Cell {case['cell'].get('id')}: no UDP loss recorded; √p is “–”.")
    title = _title(table, "fairness", rng)
    note = ("<p>Median RTT: median of the per-trial medians of our probe's rtt.csv within the "
            "transfer [0, τ]. √p as the paper prints it: the square root of the UDP loss in percent "
            "(collectors/stiff_udp.paper_sqrt_p), here of the median loss over trials.</p>")
    return _table(title, head, rows) + note


def _appropriation(cases: list[dict], notes: list[str]) -> str:
    base = next((c for c in cases if c["streams"] == 1 and c["cross"]), None)
    b = float(np.median(base["cross"])) if base else None
    if base is None:
        notes.append("No Baseline 1 cross-traffic cell with results: appropriation cannot be computed.")
    head = ("<tr><th>TCP method</th><th>Throughput Mb/s</th><th>paper</th><th>Measured MB</th><th>paper</th>"
            "<th>cross aggregate Mb/s (median)</th><th>paper</th><th>appropriation %</th><th>paper</th>"
            "<th>N/(N+k) predicts %</th><th>n</th></tr>")
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
                        _f(_mean(c.get("tcp_bytes")), 1, 1e-6), _paper(case, ref.TABLE_III, name, None, "Measured MB"),
                        _f(a, 2), _pv(paper_cross, implied),
                        _f(pct, 1) if streams != 1 else "(baseline)", _pv(paper_pct),
                        _f(ap.predicted_appropriation_pct(streams, k), 1) if streams != 1 else DASH,
                        str(len(c.get("ok") or []))))
    note = ("<p>Appropriation = (B − A)/B · 100 with B the 5 cross streams' median aggregate against "
            "Baseline 1 and A the same against the method (collectors/studies/stiff_udp/appropriation.py); “≈” marks "
            "the paper's cross aggregate implied by its 75.3 Mb/s baseline and its appropriation %.</p>")
    return _table("TABLE III equivalent and appropriation (section VII.C): 5 cross TCP streams", head, rows) + note


def _rows(cases: list[dict], rng, what: str | None, notes: list[str]):
    """(streams, case or None, row name): the paper's 1/5/9 always, plus any other stream count."""
    by = {}
    for c in cases:
        if c["streams"] in by:
            notes.append(f"Cells {by[c['streams']]['cell'].get('id')} and {c['cell'].get('id')} are both "
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
            trial, thr = next(((t.get("trial"), s) for t in case["ok"]
                               if (s := store.trial_series(case["cell"]["id"], t.get("trial")).throughput)),
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
                _decorate(ax, f"UDP {_range((case['lo'], case['hi']))} Mb/s vs {_row_name(case['streams'])}: "
                          f"{case['cell'].get('id')}, trial {trial}", "time since trial start (s)", "Mb/s")
                ax.set_ylim(bottom=0)
            return _to_svg(fig, "stiff-udp")
        finally:
            fig.clear()


# ---- small helpers -------------------------------------------------------------------------------

def _paper(case, table, row: str, key: str | None, column: str) -> str:
    """The paper's number: the cell's reference value `key`, else the printed table's."""
    name = "Base" if table is ref.TABLE_V and row == "Baseline 1" else row   # Table V's own row name
    printed = table.value(name, column) if table is not None and name in table.row_names() else None
    return _pv(_paper_value(case, key, printed))


def _pv(value, prefix: str = "") -> str:
    """A paper value with the precision it was printed with."""
    return f'<span class="paper-inline">{prefix}{value:g}</span>' if _num(value) is not None else DASH


def _paper_value(case, key: str | None, default):
    values = (((case or {}).get("cell") or {}).get("reference") or {}).get("values") or {}
    return _num(values.get(key)) if key and _num(values.get(key)) is not None else _num(default)


def _values(trials: list[dict], flow: str, key: str) -> list[float]:
    """`key` of `flow` in each trial that recorded it."""
    return [v for t in trials if (v := _num(_flow(t, flow).get(key))) is not None]


def _flow(trial: dict, name: str) -> dict:
    return next((f for f in trial.get("flows") or [] if f.get("name") == name), {})


def _title(table, what: str, rng: tuple) -> str:
    return f"{table.number + ' equivalent: ' if table else ''}{what} for UDP ∈ [{_range(rng, ', ')}] Mb/s"


def _row_name(streams: int) -> str:
    return "Baseline 1" if streams == 1 else f"Parallel {streams}"


def _range(rng: tuple, sep: str = "-") -> str:
    return sep.join("?" if x is None else f"{x:g}" for x in rng)


def _num(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mean(values) -> float | None:
    return float(np.mean(values)) if values else None   # values: from _values, all numbers


def _f(value, digits: int, scale: float = 1.0) -> str:
    v = _num(value)
    return DASH if v is None else f"{v * scale:.{digits}f}"


def _ms(values) -> str:
    """mean ± sample std over trials (a single trial has no spread to show)."""
    if not values:
        return DASH
    return f"{np.mean(values):.2f}" + (f" ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else "")


def _tr(first: str, *rest: str) -> str:   # rest: numbers as text, or a paper value's <span>
    return (f"<tr><td>{_e(first)}</td>"
            + "".join(f"<td class='num'>{c if c.startswith('<span') else _e(c)}</td>" for c in rest) + "</tr>")


def _table(title: str, head: str, rows: list[str]) -> str:
    return f"<h3>{_e(title)}</h3><table class='stiff-udp'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _e(value) -> str:
    return html.escape(str(value))
