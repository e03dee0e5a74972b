"""Detection power and false alarms of `longhaul compare` on synthetic suite runs.

Each simulation writes a baseline and a new run of the synthetic suite (tests/support/regression_fixtures.py:
a calibration cell, a flow alone, two flows sharing) through the real run writer, with every
trial's numbers drawn around the cell's means with coefficient of variation --cv, plants a shift
of the foreground's throughput in the "flow alone" cell of the new run, and asks compare_runs at
the default level. Power = the share of simulations where that metric is a regression; the
false-alarm share counts simulations with any regression verdict when nothing was planted.

    .venv/bin/python bench/regression_power.py [--sims 200] [--repeats 8] [--cv 0.02]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from regression_fixtures import write_suite_run  # noqa: E402

from longhaul.collectors.store.reader import load_store  # noqa: E402
from longhaul.collectors.studies.regression.compare import REGRESSION, compare_runs  # noqa: E402
from longhaul.collectors.studies.regression.samples import DEFAULT_LEVEL  # noqa: E402

SHIFTS = (0.0, 0.02, 0.05, 0.10)
TARGET = ("cubic-alone", "throughput.fg")


def simulate(shift: float, sims: int, repeats: int, cv: float, level: float) -> dict:
    detected = any_alarm = 0
    for k in range(sims):
        with tempfile.TemporaryDirectory() as tmp:
            a = write_suite_run(Path(tmp), f"a{k}", "2026-01-01T00:00:00Z", repeats=repeats, cv=cv, seed=2 * k + 1)
            b = write_suite_run(Path(tmp), f"b{k}", "2026-01-02T00:00:00Z", repeats=repeats, cv=cv, seed=2 * k + 2,
                                shift={TARGET: 1 - shift})
            c = compare_runs(load_store(a), load_store(b), level)
        row = next(r for r in c.rows if (r.scenario, r.metric) == TARGET)
        detected += row.verdict == REGRESSION
        any_alarm += bool(c.regressions)
    return {"shift": shift, "sims": sims, "target_detected": detected / sims, "any_regression": any_alarm / sims}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=8, help="trials a run (the shipped suite's repeats)")
    parser.add_argument("--cv", type=float, default=0.02, help="trial-to-trial coefficient of variation")
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    args = parser.parse_args()
    started = time.monotonic()
    results = [simulate(s, args.sims, args.repeats, args.cv, args.level) for s in SHIFTS]
    for r in results:
        print(f"shift {r['shift'] * 100:4.0f} %: {TARGET[1]} of {TARGET[0]} found in {r['target_detected'] * 100:5.1f} % "
              f"of {r['sims']} comparisons; any regression verdict in {r['any_regression'] * 100:5.1f} %")
    print(json.dumps({"repeats": args.repeats, "cv": args.cv, "level": args.level, "results": results,
                      "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
