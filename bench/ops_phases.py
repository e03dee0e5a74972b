"""Where in the active probing cycle the background mixtures differ: the evidence behind
docs/ops-results.md ("Probing that separates the mixtures").

    .venv/bin/python bench/ops_phases.py datasets/ops-overlay1-s4.csv datasets/ops-overlay1-s6-paced.csv

For each active recording: per class and per step of its probing profile, the mean RTT and the
bottleneck queue it implies ((RTT - base RTT) x bottleneck rate, in MB of the lab's queue), split
into the step's first 2 s (while a burst starts) and the rest (a burst at full size, or the
recovery after it); then, per second of the cycle, how far apart the class means are against the
spread inside a class (the one-way ANOVA F statistic over the classes' values at that second):
the seconds with a large F are the ones a classifier can use.
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import f_oneway

from longhaul.collectors.studies.ops import dataset as ds

EARLY_S = 2


def cycle_values(d: ds.Dataset) -> tuple[int, dict[str, list[np.ndarray]]]:
    """Cycle length in rounds, and per class the RTTs at each second of the cycle."""
    steps = d.lab["active_profile"]
    cycle = int(round(sum(float(s["seconds"]) for s in steps) / d.interval_s))
    per: dict[str, list[list[float]]] = {c: [[] for _ in range(cycle)] for c in d.classes}
    for run in d.runs:
        if run.probing != "active":
            continue
        rounds = np.floor(run.t_s / d.interval_s + ds.ROUND_SLACK).astype(int)
        for r, v in zip(rounds, run.rtt_ms):
            per[run.cls][r % cycle].append(float(v))
    return cycle, {c: [np.asarray(v) for v in vals] for c, vals in per.items()}


def step_label(step: dict) -> str:
    if step["cca"] == "none":
        return "pause"
    extra = [f"{step['pacing_mbps']:g} Mb/s" if step.get("pacing_mbps") else "full rate"]
    if step.get("streams", 1) != 1:
        extra.append(f"{step['streams']} streams")
    return f"{step['cca']} ({', '.join(extra)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="+")
    args = ap.parse_args()
    for path in args.datasets:
        d = ds.load(path)
        base = float(d.lab["topology"]["rtt_ms"])
        mb_per_ms = float(d.lab["topology"]["bottleneck_rate_mbps"]) / 8 / 1000  # MB per ms of queue
        queue_mb = float(d.lab["queue_bytes"]) / 1e6
        cycle, per = cycle_values(d)
        steps = d.lab["active_profile"]
        print(f"## {path}: cycle {cycle} s, base RTT {base:g} ms, queue {queue_mb:g} MB\n")
        print(f"Mean RTT in ms (queue in MB), first {EARLY_S} s of the step / the rest (a step of {EARLY_S} s "
              "or less: its first half / its second):\n")
        print("| class | " + " | ".join(step_label(s) for s in steps) + " |")
        print("|---|" + "---|" * len(steps))
        for cls, secs in per.items():
            cells, start = [], 0
            for s in steps:
                n = int(round(float(s["seconds"]) / d.interval_s))
                split = EARLY_S if n > EARLY_S else max(1, n // 2)
                parts = [np.concatenate(part) for part in (secs[start:start + split], secs[start + split:start + n])
                         if part]  # a 1 s step has no second part
                cells.append(" / ".join(f"{v.mean():.0f} ({(v.mean() - base) * mb_per_ms:.1f})" for v in parts))
                start += n
            print(f"| {cls} | " + " | ".join(cells) + " |")
        f = [f_oneway(*(per[c][i] for c in per)).statistic for i in range(cycle)]
        within = [np.mean([per[c][i].std() for c in per]) for i in range(cycle)]
        print("\nPer second of the cycle: F over the classes, and the mean within-class sd (ms):\n")
        print("| second | " + " | ".join(str(i) for i in range(cycle)) + " |")
        print("|---|" + "---|" * cycle)
        print("| F | " + " | ".join(f"{v:.0f}" for v in f) + " |")
        print("| sd | " + " | ".join(f"{v:.0f}" for v in within) + " |")
        print()


if __name__ == "__main__":
    main()
