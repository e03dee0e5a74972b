"""The planning report (plan.html / plan.pdf): from a plan document (sweep.py) and, when the lab
replayed the trace, its replay document; plain data and figures for plan.html.j2."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from longhaul.collectors.studies.planning import reference as ref
from longhaul.collectors.studies.planning.replay_record import unfaithful_legs
from longhaul.collectors.studies.planning.sweep import baseline_at, find, headline
from longhaul.reports.fmt import DASH
from longhaul.reports.plots import PALETTE, RC, to_svg
from longhaul.reports.render import render_document, write_document
from longhaul.reports.sections import figure

TEMPLATE = Path(__file__).with_name("plan.html.j2")
SHOWN_PROBLEMS = 50   # the report lists this many bad lines; the JSON has them all


def _x(value, digits: int = 2, suffix: str = "x") -> str:
    return DASH if value is None else f"{value:.{digits}f}{suffix}"


def _gbps(bps) -> str:
    return DASH if bps is None else (f"{bps / 1e9:.2f} Gb/s" if bps >= 1e9 else f"{bps / 1e6:.1f} Mb/s")


def _pct(frac) -> str:
    return DASH if frac is None else f"{frac * 100:+.0f} %"


def _grid_figure(doc: dict, kind: str) -> str | None:
    """Figures 3-8: a row per class (OD, BE), a column per %-OD-transfers, a line per %-OD-bandwidth,
    slowdown against the load ratio on a log axis, the all-BE baseline shaded."""
    configs = doc["configs"]
    if not configs:
        return None
    od_pcts = sorted({c["od_transfers_pct"] for c in configs})
    loads = sorted({b["load_ratio"] for b in doc["baseline"] if b["load_ratio"] in {c["load_ratio"] for c in configs}})
    base = [baseline_at(doc, x)[f"{kind}_bs_all"] for x in loads]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.2, 3.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(2, len(od_pcts), sharex=True, sharey="row", squeeze=False)
        for col, p in enumerate(od_pcts):
            for row, cls in enumerate(("od", "be")):
                ax = axes[row][col]
                ax.fill_between(loads, [1.0] * len(loads), base, color="#f5d742", alpha=0.35, lw=0,
                                label="all-BE baseline")
                bws = sorted({c["od_bandwidth_pct"] for c in configs if c["od_transfers_pct"] == p})
                for k, bw in enumerate(bws):
                    pts = sorted((c["load_ratio"], c[f"{kind}_bs_{cls}"]) for c in configs
                                 if c["od_transfers_pct"] == p and c["od_bandwidth_pct"] == bw
                                 and c[f"{kind}_bs_{cls}"] is not None)
                    if pts:
                        ax.plot(*zip(*pts), marker="o", ms=3, lw=1.2, color=PALETTE[k % len(PALETTE)],
                                label=f"OD bw {bw:g} %")
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(ScalarFormatter())
                ax.yaxis.set_minor_formatter(NullFormatter())
                ax.grid(True, alpha=0.3, lw=0.5, which="both")
                if row == 0:
                    ax.set_title(f"{p:g} % OD transfers", fontsize=8.5)
                if row == 1:
                    ax.set_xlabel("transfer-load ratio")
                if col == 0:
                    ax.set_ylabel(f"{kind}. BS, {cls.upper()}")
        top = max([*base, *(c[f"{kind}_bs_{cls}"] or 1 for c in configs for cls in ("od", "be"))])
        axes[0][0].set_ylim(0.95, max(2.0, top * 1.3))
        axes[1][0].set_ylim(0.95, max(2.0, top * 1.3))
        handles, labels = axes[1][-1].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", frameon=False, fontsize=7)
        try:
            return to_svg(fig, f"plan-{kind}", f"{kind} bounded slowdown")
        finally:
            fig.clear()


def _demand_figure(doc: dict) -> str | None:
    """Figure 2: the trace's aggregate throughput as logged, with its peak and mean."""
    series = doc["trace"].get("logged_series_bps") or []
    if not series:
        return None
    bin_s = doc["sweep"]["bin_s"]
    hours = np.arange(len(series)) * bin_s / 3600
    logged = doc["trace"]["logged"]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.2, 2.3), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.plot(hours, np.array(series) / 1e9, lw=0.8, color=PALETTE[0], label="logged")
        for value, name in ((logged["peak_bps"], "peak"), (logged["mean_bps"], "mean")):
            ax.axhline(value / 1e9, ls="--", lw=0.8, color="#555", label=f"{name} {_gbps(value)}")
        ax.axhline(doc["capacity_bps"] / 1e9, ls=":", lw=0.9, color=PALETTE[1], label=f"capacity {_gbps(doc['capacity_bps'])}")
        ax.set_xlabel("hours from the trace's start")
        ax.set_ylabel("Gb/s")
        ax.grid(True, alpha=0.3, lw=0.5)
        fig.legend(loc="outside right upper", frameon=False, fontsize=7)
        try:
            return to_svg(fig, "plan-demand", "aggregate throughput as logged")
        finally:
            fig.clear()


def claim_rows(doc: dict) -> list[dict]:
    """The paper's statements with ours beside them, under the same conditions."""
    b2 = baseline_at(doc, 2.0)
    rows = {}
    if b2:
        rows["baseline_2x_avg"] = (f"{_x(b2['avg_bs_all'])}", b2["avg_bs_all"] < 1.5)
        rows["baseline_2x_gap"] = (f"gap {_pct(b2['gap_change'])}",
                                   None if b2["gap_change"] is None else b2["gap_change"] < 0)
        rows["baseline_2x_max"] = (f"{_x(b2['max_bs_all'], 1)}", b2["max_bs_all"] < 12)
    od50 = [c for c in (find(doc, 50.0, 60.0, 2.0), find(doc, 50.0, 70.0, 2.0)) if c]
    if od50:
        rows["od50_2x"] = ("; ".join(f"bw {c['od_bandwidth_pct']:g} %: OD {_x(c['avg_bs_od'])}, BE {_x(c['avg_bs_be'])}"
                                     for c in od50),
                           all(c["avg_bs_od"] < 1.1 and c["avg_bs_be"] < 2.0 for c in od50))
    over = [c for c in doc["configs"] if 0 < c["od_bandwidth_pct"] - c["od_transfers_pct"] <= 20
            and c["od_bandwidth_pct"] < 100]
    if over:
        mx_od = max((c["max_bs_od"] for c in over if c["max_bs_od"] is not None), default=None)
        mx_be = max((c["max_bs_be"] for c in over if c["max_bs_be"] is not None), default=None)
        rows["max_bw_over"] = (f"max OD {_x(mx_od, 1)}, max BE {_x(mx_be, 1)}",
                               None if mx_od is None or mx_be is None else mx_od < 5 and mx_be < 18)
    c3040 = find(doc, 30.0, 40.0, 2.0)
    if c3040:
        text = f"simulated: OD {_x(c3040['avg_bs_od'])}, BE {_x(c3040['avg_bs_be'])}"
        rows["testbed_30_40"] = (text, None)
    t = doc["trace"]["logged"]
    rows["cov"] = (f"{_x(t.get('cov_concurrency'), 2, '')} and {_x(t.get('cov_throughput'), 2, '')} "
                   "(this trace)", None)
    return [{"paper": c.text, "where": c.where, "ours": rows[c.key][0],
             "holds": {True: "yes", False: "no", None: DASH}[rows[c.key][1]]}
            for c in ref.CLAIMS if c.key in rows]


def config_rows(doc: dict) -> list[dict]:
    rows = [{"od": "all BE", "bw": DASH, "load": f"{b['load_ratio']:g}x", "avg_od": DASH, "avg_be": _x(b["avg_bs_all"]),
             "max_od": DASH, "max_be": _x(b["max_bs_all"], 1), "peak": _gbps(b["peak_bps"]), "mean": _gbps(b["mean_bps"]),
             "gap": _pct(b["gap_change"]), "cov_c": _x(b["cov_concurrency"], 2, ""), "cov_t": _x(b["cov_throughput"], 2, "")}
            for b in doc["baseline"]]
    for c in doc["configs"]:
        rows.append({"od": f"{c['od_transfers_pct']:g} %", "bw": f"{c['od_bandwidth_pct']:g} %", "load": f"{c['load_ratio']:g}x",
                     "avg_od": _x(c["avg_bs_od"]), "avg_be": _x(c["avg_bs_be"]), "max_od": _x(c["max_bs_od"], 1),
                     "max_be": _x(c["max_bs_be"], 1), "peak": _gbps(c["peak_bps"]), "mean": _gbps(c["mean_bps"]),
                     "gap": _pct(c["gap_change"]), "cov_c": _x(c["cov_concurrency"], 2, ""),
                     "cov_t": _x(c["cov_throughput"], 2, "")})
    return rows


def trace_rows(doc: dict) -> list[tuple[str, str]]:
    t = doc["trace"]
    logged = t["logged"]
    rows = [("Sources", ", ".join(t["sources"]) or DASH), ("Starts", t["origin"] or DASH),
            ("Transfers planned", f"{t['transfers']:,}"),
            ("Failed transfers (counted, not planned)", f"{t['failed']:,}"),
            ("Malformed lines (reported below)", f"{t['malformed']:,}"),
            ("Span", f"{t['span_s'] / 3600:.2f} h"), ("Bytes", f"{t['bytes'] / 1e12:.3f} TB"),
            ("Peak / mean throughput (1-min bins)", f"{_gbps(logged['peak_bps'])} / {_gbps(logged['mean_bps'])}"),
            ("Mean / peak", f"{logged['mean_to_peak']:.2f} (paper's traces: "
                            + ", ".join(f"{v:.2f}" for v in ref.TRACE_MEAN_TO_PEAK.values()) + ")"),
            ("CoV concurrency / throughput", f"{_x(logged.get('cov_concurrency'), 2, '')} / {_x(logged.get('cov_throughput'), 2, '')}"),
            ("Capacity (netCap)", f"{_gbps(doc['capacity_bps'])} ({doc['capacity_from']})")]
    if t.get("generator"):
        rows.append(("Synthetic", ", ".join(f"{k}={v}" for k, v in t["generator"].items())))
    return rows


def _side(summary: dict | None) -> dict:
    summary = summary or {}
    return {"avg_od": _x(summary.get("avg_bs_od")), "avg_be": _x(summary.get("avg_bs_be")),
            "max_od": _x(summary.get("max_bs_od"), 1), "max_be": _x(summary.get("max_bs_be"), 1),
            "gap": _x(summary.get("mean_to_peak"), 2, "")}


def replay_context(replay: dict | None) -> dict | None:
    """The lab replay (its replay.json) beside the simulation of the same trace, leg by leg."""
    if not replay:
        return None
    lab, trace = replay["lab"], replay["trace"]
    gen = trace.get("generator") or {}
    description = (
        f"{trace['transfers']} transfers ({trace['name']}: one in {gen.get('keep_one_in', '?')}, times x "
        f"{gen.get('time_factor', 1):.3g}, rates x {gen.get('rate_factor', 1):.3g}) as {replay.get('tool') or 'iperf3'} "
        f"transfers S1 -> D1 through "
        f"a {lab['bottleneck_rate_mbps']:g} Mb/s, {lab['rtt_ms']:g} ms bottleneck on the {replay['backend']} backend "
        f"({replay['status']}); each flow paced at its requested rate; with classes, the aggregate BE rate capped "
        f"as section 7 does. Simulated: Listing 1 on the same trace and classes, netCap = the bottleneck's TCP "
        f"goodput ({_gbps(lab['capacity_bps'])}).")
    rows = []
    for leg in replay["legs"]:
        share = f"OD {leg['od_share'] * 100:g} % of the link" if leg["capped"] else "all BE"
        done = leg["summary"]
        rows.append({"load": f"{leg['load_ratio']:g}x", "classes": f"{share} ({done['finished']}/{done['transfers_total']} done)",
                     "lab": _side(done), "sim": _side(leg["simulated"])})
    unfaithful = unfaithful_legs(replay)
    warning = (f"Not faithful: this lab adds its own time to every transfer ({'; '.join(unfaithful)}). Slowdowns "
               "of short transfers here are the lab's latency, not the schedule's." if unfaithful else "")
    return {"description": description, "rows": rows, "warning": warning}


def context(doc: dict, replay: dict | None = None) -> dict:
    return {
        "doc": doc, "headline": headline(doc), "trace_rows": trace_rows(doc), "claims": claim_rows(doc),
        "configs": config_rows(doc), "problems": doc["trace"]["problems"][:SHOWN_PROBLEMS],
        "figures": [f for f in (figure(_demand_figure(doc), "The trace's aggregate throughput as logged (1-minute "
                                       "bins), its peak and mean (the paper's Figure 2)."),
                                figure(_grid_figure(doc, "avg"), "Average bounded slowdown: OD (top) and BE (bottom) "
                                       "per %-OD-transfers, a line per %-OD-bandwidth; shaded: the all-best-effort "
                                       "baseline (the paper's Figures 3-6)."),
                                figure(_grid_figure(doc, "max"), "Maximum bounded slowdown, as above (the paper's "
                                       "Figures 7-8).")) if f],
        "replay": replay_context(replay),
    }


def plan_html(doc: dict, replay: dict | None = None) -> str:
    """The plan's report as one HTML page (the file report, and the console's planning page)."""
    return render_document(TEMPLATE, context(doc, replay))


def write_plan_report(doc: dict, out_dir: Path, formats: tuple[str, ...] = ("html", "pdf"),
                      replay: dict | None = None) -> list[Path]:
    return write_document(plan_html(doc, replay), out_dir, "plan", formats)
