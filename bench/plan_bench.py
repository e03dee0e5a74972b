"""Facility planning (seed 003): how fast the 64 configurations of a day run, and the paper's
headline trends on synthetic days. Results and the command: bench/RESULTS-planning.md.

    .venv/bin/python bench/plan_bench.py [--seeds 10] [--json OUT]

Speed: the whole default plan (64 configurations + 4 baselines) of a paper-sized day on one core,
with the C loop; beside it, in the same run, one configuration with the C loop and with the Python
loop (the ratio, since this machine's speed drifts). Trends: per seed, the numbers of the paper's
statements (reference.py's CLAIMS) and whether each holds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from longhaul.collectors.studies.planning import synthetic
from longhaul.collectors.studies.planning.settings import SweepSection
from longhaul.collectors.studies.planning.sim import simulate, split_classes
from longhaul.collectors.studies.planning.sweep import baseline_at, find, run_plan


def speed(seed: int) -> dict:
    trace = synthetic.generate(seed)
    began = time.perf_counter()
    doc = run_plan(trace, SweepSection())
    whole = time.perf_counter() - began
    od = split_classes(len(trace.transfers), 0.3, 1)
    cap = doc["capacity_bps"]
    times = {}
    for backend in ("c", "python"):
        t = time.perf_counter()
        simulate(trace, od, cap, 0.4, 2.0, backend=backend)
        times[backend] = time.perf_counter() - t
    return {"transfers": len(trace.transfers), "configurations": len(doc["configs"]) + len(doc["baseline"]),
            "plan_s": round(whole, 3), "one_config_c_s": round(times["c"], 4),
            "one_config_python_s": round(times["python"], 3), "python_over_c": round(times["python"] / times["c"], 1),
            "simulator": doc["simulator"]}


def trends(seed: int) -> dict:
    doc = run_plan(synthetic.generate(seed), SweepSection())
    b2 = baseline_at(doc, 2.0)
    od50 = [find(doc, 50.0, bw, 2.0) for bw in (60.0, 70.0)]
    over = [c for c in doc["configs"] if 0 < c["od_bandwidth_pct"] - c["od_transfers_pct"] <= 20]
    t = doc["trace"]["logged"]
    return {
        "seed": seed, "transfers": doc["trace"]["transfers"], "mean_to_peak": round(t["mean_to_peak"], 3),
        "cov_concurrency": round(t["cov_concurrency"], 2), "cov_throughput": round(t["cov_throughput"], 2),
        "baseline_2x_avg": round(b2["avg_bs_all"], 3), "baseline_2x_max": round(b2["max_bs_all"], 2),
        "baseline_2x_gap_change_pct": round(b2["gap_change"] * 100, 1),
        "od50_2x_od": round(max(c["avg_bs_od"] for c in od50), 3),
        "od50_2x_be": round(max(c["avg_bs_be"] for c in od50), 3),
        "over_max_od": round(max(c["max_bs_od"] for c in over), 2),
        "over_max_be": round(max(c["max_bs_be"] for c in over), 2),
        "c30_40_2x": [round(find(doc, 30.0, 40.0, 2.0)[k], 3) for k in ("avg_bs_od", "avg_bs_be")],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})     # one core, as the issue states it
    out = {"speed": speed(1), "trends": [trends(s) for s in range(1, args.seeds + 1)]}
    print(json.dumps(out["speed"]))
    rows = out["trends"]
    for r in rows:
        print(json.dumps(r))
    keys = ("baseline_2x_avg", "baseline_2x_gap_change_pct", "baseline_2x_max", "od50_2x_od", "od50_2x_be",
            "over_max_od", "over_max_be", "mean_to_peak", "cov_concurrency", "cov_throughput")
    out["summary"] = {k: {"median": statistics.median(r[k] for r in rows), "min": min(r[k] for r in rows),
                          "max": max(r[k] for r in rows)} for k in keys}
    out["holds"] = {
        "baseline_2x_avg < 1.5": sum(r["baseline_2x_avg"] < 1.5 for r in rows),
        "gap shrinks at 2x": sum(r["baseline_2x_gap_change_pct"] < 0 for r in rows),
        "50 % OD at 2x: OD < 1.1 and BE < 2": sum(r["od50_2x_od"] < 1.1 and r["od50_2x_be"] < 2 for r in rows),
        "baseline_2x_max < 12": sum(r["baseline_2x_max"] < 12 for r in rows),
        "bw +10/20: max OD < 5, max BE < 18": sum(r["over_max_od"] < 5 and r["over_max_be"] < 18 for r in rows),
        "seeds": len(rows)}
    print(json.dumps(out["summary"], indent=1))
    print(json.dumps(out["holds"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
