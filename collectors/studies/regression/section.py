"""Report section "Regression": the suite's history up to this run, per cell and metric with the
change points marked, and the verdict of this run against the previous one (both kernels, the
fingerprint diff, the calibration cell beside the verdicts).

Shown for runs of a regression suite (a profile with a calibration cell). The history is read from
the other runs of the same suite in this run's parent directory, so a report written later still
shows only the runs up to this one.
"""
from __future__ import annotations

import logging
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from longhaul.collectors.store.fingerprint import diff_fingerprints, fingerprint_of, summarise
from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.studies.regression.compare import compare_runs
from longhaul.collectors.studies.regression.history import MetricSeries, build_history, suite_runs
from longhaul.collectors.studies.regression.samples import RunMetrics, is_calibration, scenario_label
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, to_svg
from longhaul.reports.sections import figure

log = logging.getLogger(__name__)
PANEL_H_IN = 1.7


class RegressionSection:
    name = "regression"
    template = Path(__file__).with_name("regression.html.j2")

    def __init__(self, run_metrics: RunMetrics | None = None):
        self.run_metrics = run_metrics or {}

    def applies(self, store: StoredRun) -> bool:
        return any(is_calibration(e) for e in store.entries)

    def context(self, store: StoredRun) -> dict:
        try:
            return {"error": None, **_context(store, self.run_metrics)}
        except Exception as exc:  # noqa: BLE001 - the report must survive a bug in one analysis
            log.exception("regression section failed")
            return {"error": f"The regression analysis failed: {exc}", "profile": "", "runs": 0, "verdict": None,
                    "figures": [], "skipped": []}


def _context(store: StoredRun, run_metrics: RunMetrics) -> dict:
    profile = next(e.profile for e in store.entries if is_calibration(e))
    runs, skipped = suite_runs(store.run_dir.parent, profile)
    started = store.manifest.started or ""
    runs = [r for r in runs if (r.manifest.started or "") <= started and r.run_id != store.run_id]
    runs = runs + [store] if store.status == "complete" else runs
    history = build_history(runs, profile, skipped=skipped, run_metrics=run_metrics)
    by_cell: dict[str, list[MetricSeries]] = {}
    for series in history.series:
        by_cell.setdefault(series.cell, []).append(series)
    figures = [figure(_plot(cell, series), _caption(series)) for cell, series in by_cell.items()]
    return {"profile": profile, "runs": len(runs), "verdict": _verdict(runs, store, run_metrics),
            "figures": [f for f in figures if f], "skipped": skipped}


def _verdict(runs: list[StoredRun], store: StoredRun, run_metrics: RunMetrics) -> dict | None:
    if len(runs) < 2 or runs[-1].run_id != store.run_id:
        return None
    base = runs[-2]
    comparison = compare_runs(base, store, run_metrics=run_metrics)
    rows = [{"cell": scenario_label(r.scenario, r.calibration), "metric": f"{r.metric} {r.unit}".strip(),
             "n": f"{r.n_base} + {r.n_new}", "base": f"{r.base_median:.4g}", "new": f"{r.new_median:.4g}",
             "shift": f"{r.shift:+.3g}" + (f" ({r.relative * 100:+.1f} %)" if r.relative is not None else ""),
             "ci": f"[{r.ci_low:+.3g}, {r.ci_high:+.3g}]", "p": "" if r.p is None else f"{r.p:.2g}",
             "verdict": r.verdict, "note": r.note} for r in comparison.rows]
    return {"baseline": base.run_id, "new": store.run_id, "kernels": comparison.kernels, "level": comparison.level,
            "tests": comparison.tests, "rows": rows,
            "status": comparison.status,
            "changes": summarise(diff_fingerprints(fingerprint_of(base.manifest), fingerprint_of(store.manifest))),
            "host_changed": [f"{r.metric} {r.relative * 100:+.1f} %" for r in comparison.host_changed if r.relative is not None]}


def _plot(cell: str, series: list[MetricSeries]) -> str | None:
    if not series or len(series[0].points) < 2:
        return None
    cols = 2
    rows = (len(series) + cols - 1) // cols
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, PANEL_H_IN * rows), layout="tight")
        FigureCanvasAgg(fig)
        for i, s in enumerate(series):
            ax = fig.add_subplot(rows, cols, i + 1)
            x = list(range(1, len(s.points) + 1))
            ax.plot(x, [p.value for p in s.points], "o-", color=PALETTE[0], ms=3, lw=1)
            for ch in s.changes:
                ax.axvline(ch.index + 0.5, color=PALETTE[1], ls="--", lw=1)
            ax.set_title(f"{s.metric}" + (f" ({s.unit})" if s.unit else ""), fontsize=8)
            ax.set_xticks(x)
            ax.grid(True, alpha=0.3, lw=0.5)
        title = f"{cell}: {scenario_label(series[0].scenario, series[0].calibration)}"
        try:
            return to_svg(fig, f"regression-{cell}", title)
        finally:
            fig.clear()


def _caption(series: list[MetricSeries]) -> str:
    s = series[0]
    marks = [f"{x.metric}: run {ch.index + 1} ({ch.run}) {ch.before:.4g} -> {ch.after:.4g}"
             + (f", changed: {'; '.join(ch.changed)}" if ch.changed else "") for x in series for ch in x.changes]
    kernels = " -> ".join(dict.fromkeys(p.kernel or "?" for p in s.points))
    return (f"{s.cell} ({scenario_label(s.scenario, s.calibration)}): median of each run's trials, "
            f"runs in start order (kernels {kernels}); dashed: change points. "
            + ("; ".join(marks) if marks else "No change point."))

