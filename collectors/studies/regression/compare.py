"""`longhaul compare BASELINE NEW`: per cell and metric, did the new run get worse?

For every metric of every cell both runs have: the Hodges-Lehmann shift with a bootstrap interval,
the Mann-Whitney p-value, and a verdict at the comparison's level:

- "regression" / "improvement": Holm's step-down rejects "no change" at family-wise `level` over all
  the comparison's tests (calibration cells aside), and the shift is at least the metric's practical
  floor, in the worse / better direction;
- "no significant change": otherwise ("below floor" in the note when the test rejected but the shift
  is smaller than anyone would act on);
- "too few repeats": the trials cannot reach the level whatever they measure; the note says how many
  a side would.

The calibration cell (no delay, no shaping below the access rate) is tested the same way but never
makes the verdict: it says whether the host itself changed, and stands beside the verdicts.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.studies.regression import stats
from longhaul.collectors.studies.regression.samples import (
    DEFAULT_LEVEL,
    RUN_CELL,
    CellSamples,
    RunMetrics,
    metric_of,
    run_kernel,
    run_level,
    run_profiles,
    run_samples,
)

REGRESSION, IMPROVEMENT, NO_CHANGE, TOO_FEW = "regression", "improvement", "no significant change", "too few repeats"
ONE_VALUE = "not tested"         # a run-level metric: one value a run, followed by history instead


class CompareError(ValueError):
    """The two runs cannot be compared (different profiles or cells): exit 2."""


@dataclass
class Row:
    cell: str
    scenario: str
    metric: str
    unit: str
    calibration: bool
    n_base: int
    n_new: int
    base_median: float
    new_median: float
    shift: float                     # Hodges-Lehmann, new - base, in the metric's unit
    relative: float | None           # shift / base median
    ci_low: float
    ci_high: float
    p: float | None
    floor: float
    higher_is_better: bool = True
    verdict: str = NO_CHANGE
    note: str = ""


@dataclass
class Comparison:
    baseline: str
    new: str
    profiles: list[str]
    level: float
    kernels: tuple[str | None, str | None]
    rows: list[Row] = field(default_factory=list)
    tests: int = 0                   # hypotheses in Holm's family
    needed: int = 0                  # trials a side that reach the first Holm threshold

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == REGRESSION and not r.calibration]

    @property
    def too_few(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == TOO_FEW and not r.calibration]

    @property
    def calibration(self) -> list[Row]:
        return [r for r in self.rows if r.calibration]

    @property
    def host_changed(self) -> list[Row]:
        """The calibration cell's shifts in what the host carries (its throughput)."""
        return [r for r in self.calibration if r.verdict in (REGRESSION, IMPROVEMENT) and metric_of(r.metric).host_check]

    def exit_status(self) -> int:
        """3: a regression; 2: nothing to test (no ok trials on both sides) or some metric could
        not be tested (too few repeats); 0: none. Silence is never a pass."""
        return 3 if self.regressions else 2 if self.too_few or not self.tests else 0

    @property
    def status(self) -> str:
        if self.regressions:
            return "regression"
        if not self.tests:
            return "nothing to compare: no cell under test has ok trials in both runs"
        return f"too few repeats: {self.needed} trials a side reach this level" if self.too_few else "no regression"

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def check_comparable(base: StoredRun, new: StoredRun, a: dict[str, CellSamples], b: dict[str, CellSamples]) -> None:
    """a, b: the runs' samples (run_samples), read once by the caller."""
    if run_profiles(base) != run_profiles(new):
        raise CompareError(f"the runs ran different profiles: {', '.join(run_profiles(base)) or 'none'} "
                           f"in {base.run_id}, {', '.join(run_profiles(new)) or 'none'} in {new.run_id}")
    if list(a) != list(b):
        raise CompareError(f"the runs have different cells: {', '.join(a) or 'none'} in {base.run_id}, "
                           f"{', '.join(b) or 'none'} in {new.run_id}")
    for cid in a:
        if a[cid].params != b[cid].params:
            raise CompareError(f"cell {cid} has different parameters: {a[cid].params} in {base.run_id}, "
                               f"{b[cid].params} in {new.run_id}")


def compare_runs(base: StoredRun, new: StoredRun, level: float = DEFAULT_LEVEL,
                 run_metrics: RunMetrics | None = None) -> Comparison:
    """The whole comparison (the floors are samples.METRICS'); `run_metrics` adds the studies'
    run-level metrics (shown, not tested: one value a run)."""
    if not 0 < level < 1:
        raise CompareError(f"level {level!r}: must be between 0 and 1")
    a, b = run_samples(base), run_samples(new)
    check_comparable(base, new, a, b)
    rows = [row for cid in a for row in _cell_rows(a[cid], b[cid])]
    rows += _run_rows(run_level(base, run_metrics or {}), run_level(new, run_metrics or {}))
    tested = [r for r in rows if r.p is not None and not r.calibration]
    comparison = Comparison(base.run_id, new.run_id, run_profiles(base), level, (run_kernel(base), run_kernel(new)),
                            rows, tests=len(tested))
    comparison.needed = stats.repeats_needed(level / max(1, len(tested)))
    first = level / max(1, len(tested))
    rejected = stats.holm_reject([r.p for r in tested], level)
    for row, reject in zip(tested, rejected):
        _judge(row, reject, first, comparison.needed)
    calibration = [r for r in rows if r.calibration and r.p is not None]
    for row, reject in zip(calibration, stats.holm_reject([r.p for r in calibration], level)):
        _judge(row, reject, level / max(1, len(calibration)), stats.repeats_needed(level / max(1, len(calibration))))
    return comparison


def _cell_rows(a: CellSamples, b: CellSamples) -> list[Row]:
    rows = []
    for name, metric in a.metrics.items():
        base, new = a.values.get(name, []), b.values.get(name, [])
        if not base or not new:
            continue
        floor = metric.floor
        base_median = statistics.median(base)
        shift = stats.hodges_lehmann(base, new)
        low, high = stats.bootstrap_ci(base, new)
        rows.append(Row(a.cell, a.scenario, name, metric.unit, a.calibration, len(base), len(new), base_median,
                        statistics.median(new), shift, shift / base_median if base_median else None, low, high,
                        stats.rank_p(base, new), floor.of(base_median), metric.higher_is_better))
    return rows


def _run_rows(a: dict[str, float], b: dict[str, float]) -> list[Row]:
    rows = []
    for name in (n for n in a if n in b):
        metric = metric_of(name)
        shift = b[name] - a[name]
        rows.append(Row(RUN_CELL, RUN_CELL, name, metric.unit, False, 1, 1, a[name], b[name], shift,
                        shift / a[name] if a[name] else None, shift, shift, None,
                        metric.floor.of(a[name]), metric.higher_is_better,
                        ONE_VALUE, "one value a run: `longhaul history` follows it"))
    return rows


def _judge(row: Row, reject: bool, first_threshold: float, needed: int) -> None:
    worse = (row.shift < 0) == row.higher_is_better
    if stats.min_p(row.n_base, row.n_new) > first_threshold:
        row.verdict = TOO_FEW
        row.note = f"{row.n_base} + {row.n_new} trials cannot reach p {first_threshold:.2g}: {needed} + {needed} would"
    elif reject and abs(row.shift) >= row.floor and row.shift != 0:
        row.verdict = REGRESSION if worse else IMPROVEMENT
        row.note = ""
    elif reject:
        row.verdict = NO_CHANGE
        row.note = f"below floor ({row.floor:.3g} {row.unit})".replace(" )", ")")
    else:
        row.verdict = NO_CHANGE
        row.note = ""
