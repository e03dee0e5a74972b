"""`longhaul history RUNS_DIR --profile NAME`: a suite's runs as series, with their change points.

Each cell and metric is a series of one point a run (the median of its ok trials), in the order the
runs started. Change points are found in two steps, as Apache Otava does (E-divisive, then a
Student t-test of each candidate), with a maintained library instead of our own E-divisive:

1. candidates: ruptures' Pelt with a least-squares cost on the series, penalised by
   2 sigma^2 log(n) (sigma from the median absolute successive difference, so one step does not
   inflate it), down to segments of one run so the newest run can be a change;
2. each candidate is kept only if Welch's t-test of the trials on either side (the adjacent
   segments) gives p < level and the mean moved by at least the metric's practical floor.

Each change point is attributed to what the fingerprints of the run before it and the run at it
say changed (`collectors/store/fingerprint.py`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import ruptures
from scipy.stats import ttest_ind

from longhaul.collectors.store.fingerprint import diff_fingerprints, fingerprint_of, summarise
from longhaul.collectors.store.format import MANIFEST, StoreError
from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.collectors.studies.regression.samples import (
    DEFAULT_LEVEL,
    RUN_CELL,
    Metric,
    RunMetrics,
    metric_of,
    run_kernel,
    run_level,
    run_profiles,
    run_samples,
)


@dataclass
class Point:
    run: str
    started: str | None
    kernel: str | None
    value: float                     # median of the run's trials
    trials: list[float]


@dataclass
class ChangePoint:
    index: int                       # the first point of the new segment
    run: str
    before: float                    # mean of the trials of the segment before / after
    after: float
    relative: float | None
    p: float
    changed: list[str]               # the fingerprint's summarised differences at this run


@dataclass
class MetricSeries:
    cell: str
    scenario: str
    calibration: bool
    metric: str
    unit: str
    points: list[Point] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)


@dataclass
class History:
    profile: str
    runs: list[str]
    skipped: list[str]               # run directories that are not usable, with why
    series: list[MetricSeries]


def suite_runs(runs_dir: Path, profile: str) -> tuple[list[StoredRun], list[str]]:
    """The complete runs of `profile` below runs_dir, oldest first; and what was skipped, with why."""
    runs, skipped = [], []
    for path in sorted(p for p in Path(runs_dir).iterdir() if (p / MANIFEST).is_file()):
        try:
            run = load_store(path)
        except StoreError as exc:
            skipped.append(f"{path.name}: {exc}")
            continue
        if profile not in run_profiles(run):
            continue
        if run.status != "complete":
            skipped.append(f"{path.name}: {run.status}")
            continue
        runs.append(run)
    runs.sort(key=lambda r: (r.manifest.started or "", r.run_id))
    return runs, skipped


def build_history(runs: list[StoredRun], profile: str, level: float = DEFAULT_LEVEL,
                  skipped: list[str] | None = None, run_metrics: RunMetrics | None = None) -> History:
    """The series of every cell's metrics, then of the studies' run-level metrics (`run_metrics`)."""
    table: dict[tuple[str, str], MetricSeries] = {}
    metrics: dict[tuple[str, str], Metric] = {}
    for run in runs:
        for name, value in run_level(run, run_metrics or {}).items():
            key = (RUN_CELL, name)
            if key not in table:
                metrics[key] = metric_of(name)
                table[key] = MetricSeries(RUN_CELL, RUN_CELL, False, name, metrics[key].unit)
            table[key].points.append(Point(run.run_id, run.manifest.started, run_kernel(run), value, [value]))
        for cid, cell in run_samples(run).items():
            if not cid.startswith(f"{profile}-"):
                continue
            for name, values in cell.values.items():
                key = (cid, name)
                if key not in table:
                    metrics[key] = cell.metrics[name]
                    table[key] = MetricSeries(cid, cell.scenario, cell.calibration, name, cell.metrics[name].unit)
                table[key].points.append(Point(run.run_id, run.manifest.started, run_kernel(run),
                                               statistics.median(values), list(values)))
    by_id = {r.run_id: r for r in runs}
    for key, series in table.items():
        series.changes = change_points(series.points, metrics[key], level)
        for change in series.changes:
            before = by_id[series.points[change.index - 1].run].manifest
            after = by_id[change.run].manifest
            change.changed = summarise(diff_fingerprints(fingerprint_of(before), fingerprint_of(after)))
    return History(profile, [r.run_id for r in runs], list(skipped or []), list(table.values()))


def change_points(points: list[Point], metric: Metric, level: float = DEFAULT_LEVEL) -> list[ChangePoint]:
    """The validated change points of one series (see the module's docstring)."""
    if len(points) < 3:
        return []
    y = np.array([p.value for p in points], float)
    candidates = _candidates(y)
    bounds = [0, *candidates, len(points)]
    kept = []
    for i, cut in enumerate(candidates, start=1):
        left = [v for p in points[bounds[i - 1]:cut] for v in p.trials]
        right = [v for p in points[cut:bounds[i + 1]] for v in p.trials]
        if len(left) < 2 or len(right) < 2:
            continue
        before, after = float(np.mean(left)), float(np.mean(right))
        p = _welch_p(left, right)
        if p < level and abs(after - before) >= metric.floor.of(before):
            kept.append(ChangePoint(cut, points[cut].run, before, after,
                                    (after - before) / before if before else None, p, []))
    return kept


def _candidates(y: np.ndarray) -> list[int]:
    diffs = np.abs(np.diff(y))
    sigma = 1.4826 * float(np.median(diffs)) / np.sqrt(2) if len(diffs) else 0.0
    sigma = max(sigma, 1e-3 * max(1.0, float(np.max(np.abs(y)))))   # a flat series still has a scale
    penalty = 2 * sigma ** 2 * np.log(len(y))
    ends = ruptures.Pelt(model="l2", min_size=1, jump=1).fit(y.reshape(-1, 1)).predict(pen=penalty)
    return [int(e) for e in ends[:-1]]          # the last "end" is len(y)


def _welch_p(a: list[float], b: list[float]) -> float:
    if np.var(a) == 0 and np.var(b) == 0:
        return 0.0 if np.mean(a) != np.mean(b) else 1.0
    return float(ttest_ind(a, b, equal_var=False).pvalue)
