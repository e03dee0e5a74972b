"""Build report.html and report.pdf for one run directory, from the run store alone.

Everything the core template shows (header, lab verification, results, the Table 2 layout,
per-cell sections) is computed into plain dicts and strings (reports/rows.py, numbers already
formatted), so the template stays declarative and a partial store can only ever show up as a "–" or a note, never as
a template error. Studies add sections of their own through the Section contract
(reports/sections.py); the caller passes them in (longhaul.appliance.report passes every study's),
since this layer must not import the studies.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import jinja2
from jinja2.environment import TemplateModule

from longhaul.collectors.store.reader import StoredRun, TrialSeries, load_store
from longhaul.reports import plots, sweep
from longhaul.reports.cell_pages import CELL_PAGES, CellPages
from longhaul.reports.rows import (
    cell_section,
    fairness_table,
    flow_names,
    header,
    load_series,
    result_row,
    verification_row,
)
from longhaul.reports.sections import Section, figure
from longhaul.reports.templating import STYLESHEET, TEMPLATES, ReportEnvironment, environment

log = logging.getLogger(__name__)
# Beyond this many cells (a profile sweep has hundreds) per-cell time-series pages would swamp
# the report; the sweep's own section summarises them and the notes say what was left out.
MAX_CELL_SECTIONS = 40
FORMATS = ("html", "pdf")


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
    env = ReportEnvironment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                            trim_blocks=True, lstrip_blocks=True)
    css = STYLESHEET.read_text(encoding="utf-8")
    return env.get_template(Path(template).name).render(css=css, **context)


def render_html(run_dir: Path, sections: Sequence[Section] = ()) -> str:
    """The report of run_dir as one self-contained HTML page, with the sections that apply."""
    env, context = _report(load_store(Path(run_dir)), sections)
    return env.get_template("report.html.j2").render(**context, medium="screen")


def _report(store: StoredRun, sections: Sequence[Section]) -> tuple[jinja2.Environment, dict]:
    env = environment(sections)
    context = build_context(store)
    context["css"] = STYLESHEET.read_text(encoding="utf-8")
    context["sections"] = render_sections(env, store, sections, context["notes"])
    return env, context


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
