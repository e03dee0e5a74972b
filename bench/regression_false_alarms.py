"""False alarms of `longhaul compare` on real runs: N runs of the same suite on the embedded lab,
under the same conditions, then every pair compared (N = 7 gives 21 comparisons). Every
"regression" verdict is a false alarm; the share of comparisons with one must stay at or below the
level. Also prints each metric's trial-to-trial coefficient of variation (the median over runs),
which bench/regression_power.py takes as --cv.

    flock /tmp/lh/lab.lock .venv/bin/python bench/regression_false_alarms.py --runs 7 --out /tmp/lh/fa
    .venv/bin/python bench/regression_false_alarms.py --out /tmp/lh/fa --compare-only

The suite is bench/regression-bench.toml: profiles/regression-nightly.toml's three cells with
shorter transfers (calibration 5 s, the transport cells 10 s) and 7 repeats.
"""
from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from longhaul.collectors.studies.regression.compare import compare_runs
from longhaul.collectors.studies.regression.history import suite_runs
from longhaul.collectors.studies.regression.samples import DEFAULT_LEVEL, run_samples

HERE = Path(__file__).resolve().parent
PROFILE = "regression-bench"
CONFIG = """[lab]
backend = "netns"
[store]
dir = "runs"
[run]
profiles = ["regression-bench"]
profile_dir = "profiles"
[report]
formats = []
"""


def run_suite(out: Path, runs: int) -> None:
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / f"{PROFILE}.toml", out / "profiles" / f"{PROFILE}.toml")
    (out / "config.toml").write_text(CONFIG)
    longhaul = Path(sys.executable).with_name("longhaul")
    for k in range(runs):
        started = time.monotonic()
        res = subprocess.run([str(longhaul), "run", "--config", str(out / "config.toml")], capture_output=True, text=True)
        print(f"run {k + 1}/{runs}: exit {res.returncode} in {time.monotonic() - started:.0f} s: "
              f"{res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-300:]}", flush=True)


def summarise(out: Path, level: float) -> dict:
    runs, skipped = suite_runs(out / "runs", PROFILE)
    comparisons = []
    for a, b in itertools.combinations(runs, 2):
        c = compare_runs(a, b, level)
        comparisons.append({"baseline": a.run_id, "new": b.run_id, "tests": c.tests, "status": c.exit_status(),
                            "regressions": [f"{r.scenario} {r.metric} {r.relative * 100:+.1f} % p {r.p:.2g}"
                                            for r in c.regressions],
                            "significant_below_floor": sum(1 for r in c.rows if r.note.startswith("below floor")),
                            # what a per-metric test at the level, without Holm and floors, would say
                            "naive": [f"{r.scenario} {r.metric}" for r in c.rows if not r.calibration and r.p is not None
                                      and r.p < level and (r.shift < 0) == r.higher_is_better]})
    cvs: dict[str, list[float]] = {}
    for run in runs:
        for cell in run_samples(run).values():
            for metric, values in cell.values.items():
                mean = statistics.fmean(values)
                if len(values) > 1 and mean:
                    cvs.setdefault(f"{cell.scenario} {metric}", []).append(statistics.stdev(values) / abs(mean))
    alarms = sum(1 for c in comparisons if c["regressions"])
    naive = sum(1 for c in comparisons if c["naive"])
    return {"runs": [r.run_id for r in runs], "skipped": skipped, "level": level, "comparisons": len(comparisons),
            "false_alarms": alarms, "false_alarm_share": alarms / len(comparisons) if comparisons else None,
            "naive_false_alarms": naive,
            "median_cv": {k: round(statistics.median(v), 4) for k, v in sorted(cvs.items())}, "detail": comparisons}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    parser.add_argument("--compare-only", action="store_true", help="only compare the runs already in --out")
    args = parser.parse_args()
    if not args.compare_only:
        run_suite(args.out, args.runs)
    result = summarise(args.out, args.level)
    for c in result["detail"]:
        print(f"{c['baseline']} vs {c['new']}: {'REGRESSION ' + '; '.join(c['regressions']) if c['regressions'] else 'no regression'}"
              f" ({c['significant_below_floor']} significant below floor)")
    print(f"false alarms: {result['false_alarms']} of {result['comparisons']} comparisons at level {args.level} "
          f"(per-metric tests without Holm or floors: {result['naive_false_alarms']})")
    print(json.dumps({k: v for k, v in result.items() if k != "detail"}, indent=1))
    (args.out / "false_alarms.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
