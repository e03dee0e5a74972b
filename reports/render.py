"""Build report.html and report.pdf for one run directory, from the run store alone.

Everything the template shows is computed here into plain dicts and strings (numbers already
formatted), so the template stays declarative and a partial store can only ever show up as a "–"
or a note, never as a template error.
"""
from __future__ import annotations

import datetime as dt
import logging
import math
from pathlib import Path

import jinja2
from markupsafe import Markup

from longhaul.reports import plots
from longhaul.collectors.studies.ops import section as ops_section
from longhaul.collectors.studies.throughput_profile import section as profile_section
from longhaul.collectors.studies.stiff_udp import section as stiff_udp_section
from longhaul.collectors.store.reader import RunStore, TrialSeries, load_store

TEMPLATES = Path(__file__).parent / "templates"
EXTRA_SECTIONS = (profile_section, ops_section, stiff_udp_section)
# Beyond this many cells (a profile sweep has hundreds) per-cell time-series pages would swamp
# the report; the sweep's own section summarises them and the notes say what was left out.
MAX_CELL_SECTIONS = 40
FORMATS = ("html", "pdf")
DASH = "–"
# Seed 000 Table 2, in the paper's row order: (mode, role) -> row heading.
FAIRNESS_ROWS = (("dedicated", "background", "Dedicated", "Background"),
                 ("dedicated", "foreground", "Dedicated", "Foreground (iperf)"),
                 ("shared", "background", "Shared", "Background"),
                 ("shared", "foreground", "Shared", "Foreground (iperf)"))


def write_report(run_dir: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write report.html and/or report.pdf into run_dir; return the paths written."""
    run_dir = Path(run_dir)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {FORMATS}")
    html = render_html(run_dir)
    written = []
    if "html" in formats:
        path = run_dir / "report.html"
        path.write_text(html, encoding="utf-8")
        written.append(path)
    if "pdf" in formats:
        import weasyprint  # slow to import; only needed for PDF

        # WeasyPrint warns once per SVG style property it does not draw (text-anchor, fill, ...):
        # hundreds of lines per report that say nothing about the report's content
        logging.getLogger("weasyprint").setLevel(logging.ERROR)

        path = run_dir / "report.pdf"
        weasyprint.HTML(string=html, base_url=str(run_dir)).write_pdf(path)
        written.append(path)
    return written


def render_html(run_dir: Path) -> str:
    store = load_store(Path(run_dir))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    context = build_context(store)
    context["css"] = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    return env.get_template("report.html.j2").render(**context)


def build_context(store: RunStore) -> dict:
    cells = store.cells
    series = {c["id"]: _load_series(store, c) for c in cells[:MAX_CELL_SECTIONS]}
    colors = plots.flow_colors([n for c in cells for n in _flow_names(c)])
    notes = _notes(store, series)
    fairness = fairness_table(cells, notes)
    return {
        "header": _header(store),
        "verification": [_verification_row(c) for c in cells],
        "results": [_result_row(c) for c in cells],
        "fairness": fairness,
        "bars_svg": plots.throughput_bars(cells, colors),
        "cells": [_cell_section(c, series[c["id"]], colors) for c in cells[:MAX_CELL_SECTIONS]],
        "notes": notes,
        "extra_sections": _extra_sections(store),
    }


def _extra_sections(store: RunStore) -> list[Markup]:
    """Analyses with sections of their own (throughput profiles, OPS): each module's
    section(store) returns ready HTML, or None when the run has nothing for it."""
    out = []
    for module in EXTRA_SECTIONS:
        html = module.section(store)
        if html:
            out.append(Markup(html))
    return out


# ---- formatting ---------------------------------------------------------------------------------

def _num(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt_mbps(value) -> str:
    """Three significant figures like the paper's table (474, 75.6), never scientific notation."""
    v = _num(value)
    if v is None:
        return DASH
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def fmt_std(value) -> str:
    """A spread needs no more precision than its mean, and one decimal is plenty below 100."""
    v = _num(value)
    return DASH if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def fmt(value, digits: int = 1, unit: str = "") -> str:
    v = _num(value)
    return DASH if v is None else f"{v:.{digits}f}{unit}"


def _when(iso: str | None) -> str:
    return iso.replace("T", " ").replace("Z", " UTC") if iso else DASH


def _duration(start: str | None, end: str | None) -> str:
    try:
        secs = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return DASH
    return f"{int(secs // 60)} min {int(secs % 60)} s"


# ---- sections ------------------------------------------------------------------------------------

def _header(store: RunStore) -> dict:
    m = store.manifest
    lh, host, features = m.get("longhaul") or {}, m.get("host") or {}, m.get("features") or {}
    revision = lh.get("git_revision") or DASH
    if lh.get("git_dirty"):
        revision += " (uncommitted changes)"
    return {
        "run_id": m.get("run_id") or store.summary.get("run_id") or store.run_dir.name,
        "status": store.status, "complete": store.status == "complete",
        "started": _when(m.get("started")),
        "finished": _when(m.get("finished")) if m.get("finished") else "not recorded",
        "duration": _duration(m.get("started"), m.get("finished")),
        "host": " · ".join(str(host[k]) for k in ("hostname", "os") if host.get(k)) or DASH,
        "kernel": host.get("kernel") or DASH, "backend": m.get("backend") or DASH,
        "delay": features.get("delay") or DASH,
        "ccas": ", ".join(features.get("congestion_controls") or []) or DASH,
        "tools": sorted((m.get("tools") or {}).items()),
        "longhaul_version": lh.get("version") or DASH, "git_revision": revision,
        "config_path": m.get("config_path") or DASH,
        "profiles": [(n, (p or {}).get("description") or "") for n, p in (m.get("profiles") or {}).items()],
        "lab_kernels": _lab_kernels(features.get("kernels") or {}),
        "vm_lab": _vm_lab(features.get("vm_lab")),
    }


def _lab_kernels(kernels: dict) -> str:
    """ssh and qemu backends: the results came from these machines' kernels, not this one's."""
    by_kernel: dict[str, list[str]] = {}
    for host, kernel in kernels.items():
        by_kernel.setdefault(kernel, []).append(host)
    return "; ".join(f"{k} ({', '.join(hosts)})" for k, hosts in by_kernel.items())


def _vm_lab(vm: dict | None) -> str:
    if not vm:
        return ""
    image = vm.get("image") or {}
    boots = ", ".join(f"{n} {s:g} s" for n, s in (vm.get("boot_seconds") or {}).items())
    return (f"appliance image {image.get('revision') or DASH} (built {image.get('built') or DASH}, "
            f"Debian {image.get('suite') or DASH}, kernel {vm.get('kernel')}); {vm.get('accel')}: "
            f"{vm.get('accel_why')}; {vm.get('memory_mb')} MB per VM; booted in {boots or DASH}")


def _verification_row(cell: dict) -> dict:
    lab = cell.get("lab") or {}
    rtt, rate = lab.get("rtt_ms") or {}, lab.get("rate_mbps") or {}
    ok = lab.get("ok")
    return {"id": cell["id"],
            "rtt_conf": fmt(rtt.get("configured")), "rtt_meas": fmt(rtt.get("measured")),
            "rate_conf": fmt(rate.get("configured")), "rate_meas": fmt(rate.get("measured")),
            "queue": _fmt_bytes((lab.get("queue_bytes") or {}).get("configured")),
            "verdict": "ok" if ok is True else "not ok" if ok is False else "not verified",
            "ok": ok is True}


def _result_row(cell: dict) -> dict:
    stats = cell.get("stats") or {}
    flows = [{"name": n, "text": _mean_std(s.get("mean_mbps"), s.get("std_mbps"), s.get("n", 0),
                                           fmt_mbps, fmt_std),
              "n": s.get("n", 0)} for n, s in (stats.get("flows") or {}).items()]
    jain = stats.get("jain") or {}
    rtts = [t["rtt"] for t in _ok_trials(cell) if t.get("rtt")]
    return {"id": cell["id"], "scenario": cell.get("scenario") or DASH,
            "params": _params(cell), "flows": flows,
            "jain": _mean_std(jain.get("mean"), jain.get("std"), jain.get("n", 0), _fmt_jain,
                              _fmt_jain) if jain else DASH,
            "infl_median": fmt(_mean(r.get("inflation_median_ms") for r in rtts)),
            "infl_p95": fmt(_mean(r.get("inflation_p95_ms") for r in rtts)),
            "infl_max": fmt(max((v for r in rtts if (v := _num(r.get("inflation_max_ms"))) is not None),
                                default=None)),
            "trials": f"{len(_ok_trials(cell))}/{len(cell['trials'])}"}


def fairness_table(cells: list[dict], notes: list[str]) -> dict | None:
    """Seed 000 Table 2 layout: rows (mode, role) plus Jain, columns from labels.column."""
    placed = [c for c in cells
              if (c.get("labels") or {}).get("mode") in ("dedicated", "shared")
              and (c.get("labels") or {}).get("column")]
    if not placed:
        return None
    columns = list(dict.fromkeys(c["labels"]["column"] for c in placed))
    slots: dict[tuple, dict] = {}
    for cell in placed:
        mode, column = cell["labels"]["mode"], cell["labels"]["column"]
        refs = (cell.get("reference") or {}).get("values") or {}
        stats = cell.get("stats") or {}
        for name, role in _flow_roles(cell).items():
            s = (stats.get("flows") or {}).get(name) or {}
            _place(slots, (mode, role, column), _slot(cell, s.get("mean_mbps"), s.get("std_mbps"),
                                                     s.get("n", 0), refs.get(name), fmt_mbps, fmt_std),
                   notes)
        if mode == "shared":
            j = stats.get("jain") or {}
            _place(slots, ("jain", column), _slot(cell, j.get("mean"), j.get("std"), j.get("n", 0),
                                                  refs.get("jain"), _fmt_jain, _fmt_jain), notes)
    rows = [{"type": type_, "stream": stream, "first": role == "background",
             "cells": [slots.get((mode, role, c)) for c in columns]}
            for mode, role, type_, stream in FAIRNESS_ROWS]
    return {"columns": columns, "rows": rows,
            "jain": [slots.get(("jain", c)) for c in columns],
            "sources": sorted({(c.get("reference") or {}).get("source") or "reference"
                               for c in placed if c.get("reference")})}


def _mean_std(mean, std, n: int, fmt_mean, fmt_spread) -> str:
    # One trial has no spread: "± 0.0" would claim a precision nobody measured.
    if n and n > 1:
        return f"{fmt_mean(mean)} ± {fmt_spread(std)}"
    return fmt_mean(mean)


def _fmt_jain(value) -> str:
    return fmt(value, 2)


def _slot(cell: dict, mean, std, n: int, paper, formatter, std_formatter) -> dict:
    return {"cell": cell["id"], "ours": formatter(mean) if _num(mean) is not None else None,
            "std": std_formatter(std) if n and n > 1 else None, "n": n,
            "paper": formatter(paper) if _num(paper) is not None else None}


def _place(slots: dict, key: tuple, slot: dict, notes: list[str]) -> None:
    if key in slots:
        notes.append(f"Fairness table: cell {slot['cell']} maps to the same place as cell "
                     f"{slots[key]['cell']} ({' / '.join(key)}); only the first is shown.")
        return
    slots[key] = slot


def _cell_section(cell: dict, series: list[tuple[int, TrialSeries]], colors: dict) -> dict:
    cid = cell["id"]
    trials = cell["trials"]
    status = {t.get("trial"): t.get("status") for t in trials}
    shown = [f"{k}" if status.get(k) == "ok" else f"{k} ({status.get(k)})"
             for k, s in series if s.throughput]
    figures = []
    svg = plots.throughput_timeseries(cid, series, colors)
    if svg:
        figures.append((svg, f"Receiver throughput per flow (all streams of a flow summed), 1 s "
                             f"intervals. Colour = flow, line style = trial; trials shown: "
                             f"{', '.join(shown)}."))
    idle = _idle_rtt(cell)
    svg = plots.rtt_timeseries(cid, series, idle)
    if svg:
        figures.append((svg, "RTT probe rounds over time, one line per trial; dashed: idle RTT "
                             "(mean over trials, measured on the empty path)."))
    first = next(((k, s) for k, s in series if s.inflight), None)
    if first:
        svg = plots.inflight_timeseries(cid, first[0], first[1], colors, _bdp_bytes(cell))
        figures.append((svg, f"Bytes in flight per TCP flow from tcp_info at 10 Hz, summed over "
                             f"the flow's sockets, trial {first[0]}; dashed: bottleneck BDP."))
        svg = plots.flow_rtt_timeseries(cid, first[0], first[1], colors, idle)
        if svg:
            figures.append((svg, f"Smoothed RTT per TCP flow (the largest of its sockets'), trial {first[0]}: "
                                 f"what each flow's own packets saw, beside the probe's view."))
        svg = plots.flow_retrans_timeseries(cid, first[0], first[1], colors)
        if svg:
            figures.append((svg, f"Segments retransmitted per second per TCP flow, trial {first[0]} "
                                 f"(loss as the senders saw it)."))
    return {"id": cid, "scenario": cell.get("scenario") or DASH, "profile": cell.get("profile") or DASH,
            "params": _params(cell), "labels": cell.get("labels") or {},
            "flows": [_flow_desc(f) for f in cell["flows"]],
            "trials": [{"k": t.get("trial"), "status": t.get("status") or "unknown",
                        "duration": fmt(t.get("duration_s"), 1, " s"), "error": t.get("error") or ""}
                       for t in trials],
            "figures": figures}


def _notes(store: RunStore, series: dict[str, list[tuple[int, TrialSeries]]]) -> list[str]:
    notes = []
    if store.status != "complete":
        notes.append(f"Run status is “{store.status}”: results cover only the trials that "
                     f"finished; cells and trials that did not run are listed below.")
    notes += [f"Store: {p}." for p in store.problems]
    if len(store.cells) > MAX_CELL_SECTIONS:
        notes.append(f"Per-cell time series are shown for the first {MAX_CELL_SECTIONS} of {len(store.cells)} "
                     "cells; every cell's CSVs are in the run directory.")
    for cell in store.cells:
        if not cell["trials"]:
            notes.append(f"Cell {cell['id']}: no trials were run.")
        for t in cell["trials"]:
            if t.get("status") != "ok":
                error = f": {t['error']}" if t.get("error") else ""
                notes.append(f"Cell {cell['id']} trial {t.get('trial')}: "
                             f"{t.get('status') or 'unknown status'}{error}.")
        for k, s in series.get(cell["id"], []):
            notes += [f"Cell {cell['id']} trial {k}: {p}." for p in s.problems]
        if (cell.get("lab") or {}).get("ok") is False:
            notes.append(f"Cell {cell['id']}: lab verification failed; its results are suspect.")
    return notes


# ---- helpers -------------------------------------------------------------------------------------

def _load_series(store: RunStore, cell: dict) -> list[tuple[int, TrialSeries]]:
    # Failed trials usually wrote no CSVs; reading them would only add noise to the notes.
    return [(t["trial"], store.trial_series(cell["id"], t["trial"])) for t in cell["trials"]
            if t.get("status") != "failed" and isinstance(t.get("trial"), int)]


def _ok_trials(cell: dict) -> list[dict]:
    return [t for t in cell["trials"] if t.get("status") == "ok"]


def _flow_names(cell: dict) -> list[str]:
    return [f["name"] for f in cell["flows"] if f.get("name")] + \
        list(((cell.get("stats") or {}).get("flows") or {}))


def _flow_roles(cell: dict) -> dict[str, str]:
    """Flow name -> role, from the declared flows, else from what the trials recorded."""
    roles = {f.get("name"): f.get("role") for f in cell["flows"]}
    for trial in cell["trials"]:
        for f in trial.get("flows") or []:
            roles.setdefault(f.get("name"), f.get("role"))
    return {n: r for n, r in roles.items() if n and r in ("foreground", "background")}


def _params(cell: dict) -> list[str]:
    return [f"{k}={DASH if v is None else v}" for k, v in (cell.get("params") or {}).items()]


def _flow_desc(flow: dict) -> str:
    parts = [flow.get("tool"), flow.get("protocol"), flow.get("cca"),
             f"{flow['streams']} streams" if (flow.get("streams") or 1) > 1 else None,
             f"pair {flow['pair']}" if flow.get("pair") is not None else None]
    return f"{flow.get('name')} ({flow.get('role') or 'flow'}): " + ", ".join(str(p) for p in parts if p)


def _mean(values) -> float | None:
    nums = [v for v in map(_num, values) if v is not None]
    return sum(nums) / len(nums) if nums else None


def _idle_rtt(cell: dict) -> float | None:
    idle = _mean((t.get("rtt") or {}).get("idle_ms") for t in cell["trials"])
    if idle is None:
        idle = _num(((cell.get("lab") or {}).get("rtt_ms") or {}).get("measured"))
    return idle


def _bdp_bytes(cell: dict) -> float | None:
    topo = cell.get("topology") or {}
    rate, rtt = _num(topo.get("bottleneck_rate_mbps")), _num(topo.get("rtt_ms"))
    return rate * 1e6 / 8 * rtt / 1000 if rate and rtt else None


def _fmt_bytes(value) -> str:
    v = _num(value)
    return DASH if v is None else f"{v:,.0f}".replace(",", "\u202f")  # narrow no-break space
