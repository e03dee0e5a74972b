"""A page per cell beside a sweep's report (report-cells/<cell>.html), for runs with more cells
than the report shows inline (render.MAX_CELL_SECTIONS): the cell's settings, verification,
results and one figure of its throughput per flow and probe RTT over every trial, linked from the
report's tables, none left out.

Drawing is what costs (matplotlib: about 0.1 s a figure), so each worker process keeps one figure
and redraws only its lines, keeping its legends while they say the same (making a legend is a
quarter of a figure's cost), and the cells are shared among the machine's cores; the whole set of
pages is the report's, replaced as one when written again."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.reports import plots, rows
from longhaul.reports.sections import figure
from longhaul.reports.templating import STYLESHEET, environment

CELL_PAGES = "report-cells"          # beside report.html
CHUNK = 16                           # cells a worker takes at once
TRIALS_NAMED = 4                     # the RTT legend names the first trials; the rest share their styles

_worker: _Pages | None = None


class _Pages:
    """One worker's store, template and reusable figure."""

    def __init__(self, run_dir: Path):
        self.store = load_store(run_dir)
        self.cells = {c.id: c for c in self.store.entries}
        self.template = environment().get_template("cell_page.html.j2")
        self.css = STYLESHEET.read_text(encoding="utf-8")
        with matplotlib.rc_context(plots.RC):
            self.fig = MplFigure(figsize=(plots.WIDTH_IN, 4.2))
            FigureCanvasAgg(self.fig)
            self.top, self.bottom = self.fig.subplots(2, 1, sharex=True)
            self.fig.subplots_adjust(left=0.085, right=0.80, bottom=0.11, top=0.93, hspace=0.25)
            for ax, xlabel, ylabel in ((self.top, "", "throughput (Mb/s)"),
                                       (self.bottom, "time since trial start (s)", "RTT (ms)")):
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.grid(True, alpha=0.3, lw=0.5)
                # a few ticks: drawing them is most of a page's cost, and 630 pages add up
                ax.xaxis.set_major_locator(MaxNLocator(6))
                ax.yaxis.set_major_locator(MaxNLocator(4))
        self.legend_key: tuple | None = None

    def write(self, cell_id: str, out: Path) -> Path:
        cell = self.cells[cell_id]
        series = rows.load_series(self.store, cell)
        drawn = self._draw(cell_id, series, plots.flow_colors(rows.flow_names(cell)), rows.idle_rtt(cell))
        section = rows.cell_section(cell, [], {})        # the cell's tables; its figure is drawn here
        html = self.template.render(css=self.css, run_id=self.store.run_id, cell=section,
                                    verification=rows.verification_row(cell), result=rows.result_row(cell),
                                    figure=figure(drawn, "Receiver throughput per flow (top; colour = flow, line "
                                                         "style = trial) and probe RTT (bottom, one line per trial; "
                                                         "dashed: idle RTT), 1 s intervals, every trial."))
        path = out / f"{cell_id}.html"
        path.write_text(html)
        return path

    def _draw(self, cell_id: str, series, colors: dict, idle: float | None) -> str | None:
        if not any(s.throughput or s.rtt is not None for _, s in series):
            return None
        flows = tuple(dict.fromkeys(f for _, s in series for f in s.throughput))
        trials = [trial for _, (trial, s) in zip(range(TRIALS_NAMED), series) if s.rtt is not None]
        with matplotlib.rc_context(plots.RC):
            for ax in (self.top, self.bottom):        # only the lines (and legends, when they change) change
                for line in list(ax.lines):
                    line.remove()
            for k, (trial, s) in enumerate(series):
                style = plots.TRIAL_STYLES[k % len(plots.TRIAL_STYLES)]
                for flow, (t, v) in s.throughput.items():
                    self.top.plot(t, v, style, color=colors.get(flow), lw=0.8)
                if s.rtt is not None:
                    self.bottom.plot(*s.rtt, style, color=plots.PALETTE[k % len(plots.PALETTE)], lw=0.8)
            if idle is not None:
                self.bottom.axhline(idle, ls="--", color="black", lw=0.8)
            self._legends(flows, colors, trials, idle is not None)
            for ax in (self.top, self.bottom):
                ax.relim()
                ax.autoscale_view()
            self.top.set_ylim(bottom=0)
            self.top.set_title(f"Throughput and RTT: {cell_id}")
            return plots.to_svg(self.fig, cell_id, f"Throughput and RTT of cell {cell_id}")

    def _legends(self, flows: tuple, colors: dict, trials: list[int], idle: bool) -> None:
        key = (tuple((f, colors.get(f)) for f in flows), tuple(trials), idle)
        if key == self.legend_key:
            return
        self.legend_key = key
        first = plots.TRIAL_STYLES[0]
        top = [Line2D([], [], ls=first, color=colors.get(f), lw=0.8, label=f) for f in flows]
        bottom = [Line2D([], [], ls=plots.TRIAL_STYLES[k % len(plots.TRIAL_STYLES)],
                         color=plots.PALETTE[k % len(plots.PALETTE)], lw=0.8, label=f"trial {trial}")
                  for k, trial in enumerate(trials)]
        if idle:
            bottom.append(Line2D([], [], ls="--", color="black", lw=0.8, label="idle RTT"))
        for ax, handles in ((self.top, top), (self.bottom, bottom)):
            if ax.legend_ is not None:
                ax.legend_.remove()
            if handles:
                ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _init(run_dir: str) -> None:
    global _worker
    _worker = _Pages(Path(run_dir))


def _write_chunk(cell_ids: list[str], out: str) -> int:
    assert _worker is not None
    for cell_id in cell_ids:
        _worker.write(cell_id, Path(out))
    return len(cell_ids)


class CellPages:
    """Every cell's page under run_dir/report-cells/, drawn by worker processes from the moment
    this is made; `result()` waits for them and puts the set in place whole (replacing an older one)."""

    def __init__(self, store: StoredRun, workers: int | None = None):
        run_dir = Path(store.run_dir)
        self.final, self.partial = run_dir / CELL_PAGES, run_dir / f"{CELL_PAGES}.partial"
        shutil.rmtree(self.partial, ignore_errors=True)
        self.partial.mkdir()
        self.ids = [c.id for c in store.entries if c.id]
        chunks = [self.ids[k:k + CHUNK] for k in range(0, len(self.ids), CHUNK)]
        workers = max(1, min(workers or os.cpu_count() or 1, len(chunks) or 1))
        self.pool = ProcessPoolExecutor(workers, initializer=_init, initargs=(str(run_dir),))
        self.futures = [self.pool.submit(_write_chunk, chunk, str(self.partial)) for chunk in chunks]

    def result(self) -> Path:
        written = sum(f.result() for f in self.futures)
        self.pool.shutdown()
        assert written == len(self.ids)
        shutil.rmtree(self.final, ignore_errors=True)
        self.partial.rename(self.final)
        return self.final

    def cancel(self) -> None:
        """Stop drawing (an error elsewhere in the report); a finished set stays."""
        self.pool.shutdown(cancel_futures=True)
        shutil.rmtree(self.partial, ignore_errors=True)

