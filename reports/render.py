"""Build report.html and report.pdf for one run directory, from the run store alone.

Everything the core template shows (header, lab verification, results, the Table 2 layout,
per-cell pages) is computed here into plain dicts and strings (numbers already formatted), so the
template stays declarative and a partial store can only ever show up as a "–" or a note, never as
a template error. Studies add sections of their own through the Section contract
(reports/sections.py); the caller passes them in (longhaul.appliance.report passes every study's),
since this layer must not import the studies.
"""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Sequence

import jinja2
from jinja2.environment import TemplateModule

from longhaul.collectors.store.format import CCA_STAND_INS
from longhaul.collectors.store.influx.spool import shipping_summary
from longhaul.collectors.store.reader import StoredRun, TrialSeries, load_store
from longhaul.collectors.store.records import (
    CellEntry,
    CellStats,
    FlowDecl,
    FlowStats,
    JainStats,
    Measure,
    Setting,
    Verification,
)
from longhaul.reports import plots, sweep
from longhaul.reports.cell_pages import CELL_PAGES, CellPages
from longhaul.reports.fmt import DASH, fmt, fmt_mbps, fmt_std, mean, mean_std, num, spread
from longhaul.reports.sections import Section, figure

log = logging.getLogger(__name__)
TEMPLATES = Path(__file__).parent / "templates"
# Beyond this many cells (a profile sweep has hundreds) per-cell time-series pages would swamp
# the report; the sweep's own section summarises them and the notes say what was left out.
MAX_CELL_SECTIONS = 40
FORMATS = ("html", "pdf")
# Seed 000 Table 2, in the paper's row order: (mode, role) -> row heading.
FAIRNESS_ROWS = (("dedicated", "background", "Dedicated", "Background"),
                 ("dedicated", "foreground", "Dedicated", "Foreground (iperf)"),
                 ("shared", "background", "Shared", "Background"),
                 ("shared", "foreground", "Shared", "Foreground (iperf)"))


def write_report(run_dir: Path, formats: tuple[str, ...] = FORMATS,
                 sections: Sequence[Section] = ()) -> list[Path]:
    """Write report.html and/or report.pdf into run_dir; return the paths written (and a sweep's
    page-per-cell directory, drawn by worker processes while this one renders the overview).

    sections: the studies' sections, in report order (longhaul.collectors.studies.registry.SECTIONS).
    """
    run_dir = Path(run_dir)
    if unknown := [f for f in formats if f not in FORMATS]:   # before the (slow) rendering
        raise ValueError(f"unknown report format(s) {unknown}; choose from {FORMATS}")
    store = load_store(run_dir)
    pages = CellPages(store) if "html" in formats and len(store.entries) > MAX_CELL_SECTIONS else None
    try:
        env, context = _report(store, sections)
        template = env.get_template("report.html.j2")
        written = []
        if "html" in formats:
            written += write_document(template.render(**context, medium="screen"), run_dir, "report", ("html",))
        if "pdf" in formats:
            written += write_document(template.render(**context, medium="print"), run_dir, "report", ("pdf",))
        if pages is not None:
            written.append(pages.result())
        return written
    finally:
        if pages is not None:
            pages.cancel()               # after result(): nothing left to cancel


def write_document(html: str, out_dir: Path, stem: str, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write <stem>.html and/or <stem>.pdf of a rendered page into out_dir; return the paths."""
    if unknown := [f for f in formats if f not in FORMATS]:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {FORMATS}")
    written = []
    if "html" in formats:
        path = out_dir / f"{stem}.html"
        path.write_text(html, encoding="utf-8")
        written.append(path)
    if "pdf" in formats:
        import weasyprint  # slow to import; only needed for PDF

        # WeasyPrint warns once per SVG style property it does not draw (text-anchor, fill, ...):
        # hundreds of lines per report that say nothing about the report's content
        logging.getLogger("weasyprint").setLevel(logging.ERROR)

        path = out_dir / f"{stem}.pdf"
        weasyprint.HTML(string=html, base_url=str(out_dir)).write_pdf(path)
        written.append(path)
    return written


def render_document(template: Path, context: dict) -> str:
    """A page of its own (not a run's report, e.g. a facility plan): `template` rendered with the
    report's environment, stylesheet (`css`) and macros, from plain data."""
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(Path(template).parent), jinja2.FileSystemLoader(TEMPLATES)])
    env = _Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                       trim_blocks=True, lstrip_blocks=True)
    css = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    return env.get_template(Path(template).name).render(css=css, **context)


def render_html(run_dir: Path, sections: Sequence[Section] = ()) -> str:
    """The report of run_dir as one self-contained HTML page, with the sections that apply."""
    env, context = _report(load_store(Path(run_dir)), sections)
    return env.get_template("report.html.j2").render(**context, medium="screen")


def _report(store: StoredRun, sections: Sequence[Section]) -> tuple[jinja2.Environment, dict]:
    env = environment(sections)
    context = build_context(store)
    context["css"] = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    context["sections"] = render_sections(env, store, sections, context["notes"])
    return env, context


def environment(sections: Sequence[Section] = ()) -> jinja2.Environment:
    """The report's Jinja environment: reports/templates, and each section's template folder under
    the section's name (a PrefixLoader), so studies' templates can share a file name and can import
    reports/templates/macros.html.j2."""
    folders: dict[str, jinja2.BaseLoader] = {}
    for s in sections:
        if not s.name or "/" in s.name or s.name in folders:
            raise ValueError(f"section name {s.name!r} must be unique and must not contain '/'")
        folders[s.name] = jinja2.FileSystemLoader(Path(s.template).parent)
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(TEMPLATES), jinja2.PrefixLoader(folders)])
    return _Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                        trim_blocks=True, lstrip_blocks=True)


class _Environment(jinja2.Environment):
    """Contexts are plain dicts, so `row.values` must mean the key "values": Jinja's default looks
    up the attribute first and would print the bound dict method (values, items, clear, ...)."""

    def getattr(self, obj, attribute):
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


def render_section(section: Section, store: StoredRun, env: jinja2.Environment | None = None) -> str | None:
    """One section's HTML exactly as the report places it, or None when the run has nothing for it."""
    if not section.applies(store):
        return None
    return str(_section_module(env or environment([section]), section, store))


def _section_module(env: jinja2.Environment, section: Section, store: StoredRun) -> TemplateModule:
    # A template module is the template rendered with the section's context as its variables.
    # Jinja treats it as markup when it is placed in the report (TemplateModule.__html__): it is
    # already autoescaped template output, so nothing here marks a Python string as safe.
    name = f"{section.name}/{Path(section.template).name}"
    return env.get_template(name).make_module(section.context(store))


def render_sections(env: jinja2.Environment, store: StoredRun, sections: Sequence[Section],
                     notes: list[str]) -> list[TemplateModule]:
    """The sections that apply, rendered; one that fails is logged and becomes a note: a bug in
    one study must not cost the run its report."""
    out = []
    for section in sections:
        try:
            if section.applies(store):
                out.append(_section_module(env, section, store))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.exception("report section %s failed", section.name)
            notes.append(f"The {section.name} section could not be rendered: {exc}")
    return out


def build_context(store: StoredRun) -> dict:
    cells = store.entries
    paged = len(cells) > MAX_CELL_SECTIONS            # a sweep: heat maps here, a page per cell
    inline = [] if paged else cells
    series = {c.id: load_series(store, c) for c in inline}
    colors = plots.flow_colors([n for c in cells for n in flow_names(c)])
    notes = _notes(store, series)
    fairness = fairness_table(cells, notes)
    overview, why_not = sweep.heatmaps(cells) if paged else ([], None)
    notes += [why_not] if why_not else []
    return {
        "header": header(store),
        # a sweep lists only the cells whose lab did not verify (each cell's page has its own)
        "verification": [r for r in map(verification_row, cells) if not (paged and r["ok"])],
        "verified_ok": sum(c.lab is not None and c.lab.ok is True for c in cells),
        "results": [result_row(c) for c in cells],
        "fairness": fairness,
        "bars": None if paged else figure(plots.throughput_bars(cells, colors)),
        "sweep": overview,
        "cell_pages": CELL_PAGES if paged else None,
        "cells": [cell_section(c, series[c.id], colors) for c in inline],
        "notes": notes,
    }


# ---- formatting ---------------------------------------------------------------------------------

def _when(iso: str | None) -> str:
    return iso.replace("T", " ").replace("Z", " UTC") if iso else DASH


def _duration(start: str | None, end: str | None) -> str:
    try:
        secs = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return DASH
    return f"{int(secs // 60)} min {int(secs % 60)} s"


# ---- sections ------------------------------------------------------------------------------------

def header(store: StoredRun) -> dict:
    m = store.manifest
    lh, host, features = m.longhaul, m.host, m.features or {}
    revision = lh.git_revision or DASH
    if lh.git_dirty:
        revision += " (uncommitted changes)"
    return {
        "run_id": store.run_id,
        "status": store.status, "complete": store.status == "complete",
        "started": _when(m.started),
        "finished": _when(m.finished) if m.finished else "not recorded",
        "duration": _duration(m.started, m.finished),
        "host": " · ".join(str(v) for v in (host.hostname, host.os) if v) or DASH,
        "kernel": host.kernel or DASH, "backend": m.backend or DASH,
        "delay": features.get("delay") or DASH,
        "ccas": ", ".join(features.get("congestion_controls") or []) or DASH,
        "tools": sorted((m.tools or {}).items()),
        "longhaul_version": lh.version or DASH, "git_revision": revision,
        "config_path": m.config_path or DASH,
        "profiles": [(n, p.description or "") for n, p in m.profiles.items()],
        "lab_kernels": _lab_kernels(features.get("kernels") or {}),
        "vm_lab": _vm_lab(features.get("vm_lab")),
        "influx": shipping_summary(store.run_dir),
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


def verification_row(cell: CellEntry) -> dict:
    lab = cell.lab or Verification()
    rtt, rate, queue = lab.rtt_ms or Measure(), lab.rate_mbps or Measure(), lab.queue_bytes or Setting()
    return {"id": cell.id,
            "rtt_conf": fmt(rtt.configured), "rtt_meas": fmt(rtt.measured),
            "rate_conf": fmt(rate.configured), "rate_meas": fmt(rate.measured),
            "queue": _fmt_bytes(queue.configured),
            "verdict": "ok" if lab.ok is True else "not ok" if lab.ok is False else "not verified",
            "ok": lab.ok is True}


def result_row(cell: CellEntry) -> dict:
    stats = cell.stats or CellStats()
    flows = [{"name": n, "text": mean_std(s.mean_mbps, s.std_mbps, s.n), "n": s.n} for n, s in stats.flows.items()]
    jain = stats.jain
    rtts = [t.rtt for t in cell.ok_trials if t.rtt]
    return {"id": cell.id, "scenario": cell.scenario or DASH,
            "params": _params(cell), "flows": flows,
            "jain": mean_std(jain.mean, jain.std, jain.n, _fmt_jain, _fmt_jain) if jain else DASH,
            "infl_median": fmt(mean(r.inflation_median_ms for r in rtts)),
            "infl_p95": fmt(mean(r.inflation_p95_ms for r in rtts)),
            "infl_max": fmt(max((v for r in rtts if (v := num(r.inflation_max_ms)) is not None), default=None)),
            "trials": f"{len(cell.ok_trials)}/{len(cell.trials)}"}


def fairness_table(cells: list[CellEntry], notes: list[str]) -> dict | None:
    """Seed 000 Table 2 layout: rows (mode, role) plus Jain, columns from labels.column."""
    placed = [c for c in cells
              if (c.labels or {}).get("mode") in ("dedicated", "shared") and (c.labels or {}).get("column")]
    if not placed:
        return None
    columns = list(dict.fromkeys(c.labels["column"] for c in placed))
    slots: dict[tuple, dict] = {}
    for cell in placed:
        mode, column = cell.labels["mode"], cell.labels["column"]
        refs = (cell.reference or {}).get("values") or {}
        stats = cell.stats or CellStats()
        for name, role in _flow_roles(cell).items():
            s = stats.flows.get(name) or FlowStats()
            _place(slots, (mode, role, column), _slot(cell, s.mean_mbps, s.std_mbps, s.n, refs.get(name),
                                                     fmt_mbps, fmt_std), notes)
        if mode == "shared":
            j = stats.jain or JainStats()
            _place(slots, ("jain", column), _slot(cell, j.mean, j.std, j.n, refs.get("jain"), _fmt_jain, _fmt_jain),
                   notes)
    rows = [{"type": type_, "stream": stream, "first": role == "background",
             "cells": [slots.get((mode, role, c)) for c in columns]}
            for mode, role, type_, stream in FAIRNESS_ROWS]
    return {"columns": columns, "rows": rows,
            "jain": [slots.get(("jain", c)) for c in columns],
            "sources": sorted({c.reference.get("source") or "reference" for c in placed if c.reference})}


def _fmt_jain(value) -> str:
    return fmt(value, 2)


def _slot(cell: CellEntry, mean, std, n: int, paper, formatter, std_formatter) -> dict:
    return {"cell": cell.id, "ours": formatter(mean) if num(mean) is not None else None,
            "std": spread(std, n, std_formatter), "n": n,
            "paper": formatter(paper) if num(paper) is not None else None}


def _place(slots: dict, key: tuple, slot: dict, notes: list[str]) -> None:
    if key in slots:
        notes.append(f"Fairness table: cell {slot['cell']} maps to the same place as cell "
                     f"{slots[key]['cell']} ({' / '.join(key)}); only the first is shown.")
        return
    slots[key] = slot


def cell_section(cell: CellEntry, series: list[tuple[int, TrialSeries]], colors: dict) -> dict:
    cid = cell.id
    trials = cell.trials
    status = {t.trial: t.status for t in trials}
    shown = [f"{k}" if status.get(k) == "ok" else f"{k} ({status.get(k)})"
             for k, s in series if s.throughput]
    idle = idle_rtt(cell)
    drawn = [(plots.throughput_timeseries(cid, series, colors),
              f"Receiver throughput per flow (all streams of a flow summed), 1 s intervals. Colour = "
              f"flow, line style = trial; trials shown: {', '.join(shown)}."),
             (plots.rtt_timeseries(cid, series, idle),
              "RTT probe rounds over time, one line per trial; dashed: idle RTT (mean over trials, "
              "measured on the empty path).")]
    first = next(((k, s) for k, s in series if s.inflight), None)
    if first:
        k, s = first
        drawn += [(plots.inflight_timeseries(cid, k, s, colors, _bdp_bytes(cell)),
                   f"Bytes in flight per TCP flow from tcp_info at 10 Hz, summed over the flow's "
                   f"sockets, trial {k}; dashed: bottleneck BDP."),
                  (plots.flow_rtt_timeseries(cid, k, s, colors, idle),
                   f"Smoothed RTT per TCP flow (the largest of its sockets'), trial {k}: what each "
                   f"flow's own packets saw, beside the probe's view."),
                  (plots.flow_retrans_timeseries(cid, k, s, colors),
                   f"Segments retransmitted per second per TCP flow, trial {k} (loss as the senders "
                   f"saw it).")]
    figures = [figure(svg, caption) for svg, caption in drawn if svg]
    return {"id": cid, "scenario": cell.scenario or DASH, "profile": cell.profile or DASH,
            "params": _params(cell), "labels": cell.labels or {},
            "flows": [_flow_desc(f) for f in cell.flows],
            "trials": [{"k": t.trial, "status": t.status or "unknown",
                        "duration": fmt(t.duration_s, 1, " s"), "error": t.error or ""} for t in trials],
            "figures": figures}


def _notes(store: StoredRun, series: dict[str, list[tuple[int, TrialSeries]]]) -> list[str]:
    notes = []
    if store.status != "complete":
        notes.append(f"Run status is “{store.status}”: results cover only the trials that "
                     f"finished; cells and trials that did not run are listed below.")
    notes += [f"Store: {p}." for p in store.problems]
    if len(store.entries) > MAX_CELL_SECTIONS:
        notes.append(f"Each of the {len(store.entries)} cells has a page of its own beside the HTML report "
                     f"({CELL_PAGES}/, linked from the tables); this page maps the sweep instead.")
    for cell in store.entries:
        if not cell.trials:
            notes.append(f"Cell {cell.id}: no trials were run.")
        for t in cell.trials:
            if not t.ok:
                error = f": {t.error}" if t.error else ""
                notes.append(f"Cell {cell.id} trial {t.trial}: {t.status or 'unknown status'}{error}.")
        for k, s in series.get(cell.id, []):
            notes += [f"Cell {cell.id} trial {k}: {p}." for p in s.problems]
        if cell.lab is not None and cell.lab.ok is False:
            notes.append(f"Cell {cell.id}: lab verification failed; its results are suspect.")
    return notes


# ---- helpers -------------------------------------------------------------------------------------

def load_series(store: StoredRun, cell: CellEntry) -> list[tuple[int, TrialSeries]]:
    # Failed trials usually wrote no CSVs; reading them would only add noise to the notes.
    return [(t.trial, store.trial_series(cell.id, t.trial)) for t in cell.trials
            if t.status != "failed" and isinstance(t.trial, int)]


def flow_names(cell: CellEntry) -> list[str]:
    return [f.name for f in cell.flows if f.name] + list((cell.stats or CellStats()).flows)


def _flow_roles(cell: CellEntry) -> dict[str, str]:
    """Flow name -> role, from the declared flows, else from what the trials recorded."""
    roles = {f.name: f.role for f in cell.flows}
    for trial in cell.trials:
        for f in trial.flows:
            roles.setdefault(f.name, f.role)
    return {n: r for n, r in roles.items() if n and r in ("foreground", "background")}


def _params(cell: CellEntry) -> list[str]:
    shown = [f"{k}={DASH if v is None else v}" for k, v in (cell.params or {}).items()]
    stand_ins = (cell.labels or {}).get(CCA_STAND_INS) or {}
    return shown + [f"{asked} ran as {bpf} (BPF; cca_fallback = bpf)" for asked, bpf in stand_ins.items()]


def _flow_desc(flow: FlowDecl) -> str:
    parts = [flow.tool, flow.protocol, flow.cca, f"{flow.streams} streams" if (flow.streams or 1) > 1 else None,
             f"pair {flow.pair}" if flow.pair is not None else None]
    return f"{flow.name} ({flow.role or 'flow'}): " + ", ".join(str(p) for p in parts if p)


def idle_rtt(cell: CellEntry) -> float | None:
    idle = mean(t.rtt.idle_ms for t in cell.trials if t.rtt)
    if idle is None:
        idle = num(cell.lab.measured_rtt_ms if cell.lab else None)
    return idle


def _bdp_bytes(cell: CellEntry) -> float | None:
    rate, rtt = num(cell.topology.bottleneck_rate_mbps), num(cell.topology.rtt_ms)
    return rate * 1e6 / 8 * rtt / 1000 if rate and rtt else None


def _fmt_bytes(value) -> str:
    v = num(value)
    return DASH if v is None else f"{v:,.0f}".replace(",", "\u202f")  # narrow no-break space
