"""Figure 29 with repeats: the runs of `longhaul ops run` (one repeat each, its `ops/fig29.json`)
summed up per background and scheme as means with 95 % confidence intervals (Student's t over the
runs), beside the paper's Jain indices; the table of bench/RESULTS-fig29.md.

    .venv/bin/python bench/fig29_repeats.py RUN_DIR RUN_DIR RUN_DIR ...
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from scipy import stats

from longhaul.collectors.studies.ops.lab_runs import FIG29, FIG29_FILE
from longhaul.collectors.studies.ops.paper import PAPER_FIG29, SCHEMES


def mean_ci(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:.3g} (one run)"
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return f"{m:.3g} ± {half:.2g}"


def load(run_dir: str) -> list[dict]:
    path = Path(run_dir) / FIG29_FILE
    doc = json.loads(path.read_text())
    FIG29.check(doc, path)
    return doc["schemes"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    by: dict[tuple[str, str], list[dict]] = {}
    for run in args.runs:
        for entry in load(run):
            by.setdefault((entry["background"], entry["scheme"]), []).append(entry)
    print(f"{len(args.runs)} runs; mean ± half-width of the 95 % interval over the runs\n")
    print("| background | scheme | runs | FG Mb/s | BG Mb/s | Jain | paper Jain | cycles OPS read right |")
    print("|---|---|---|---|---|---|---|---|")
    for background in ("bbr", "cubic"):
        for scheme in SCHEMES:
            entries = by.get((background, scheme), [])
            if not entries:
                continue
            right = [e["ops_right"] for e in entries if e.get("ops_right") is not None]
            cycles = sum(len(e["decisions"]) for e in entries)
            paper = PAPER_FIG29.get((background, scheme), {}).get("jain")
            print(f"| {background.upper()} | {scheme} | {len(entries)} | {mean_ci([e['fg_mbps'] for e in entries])} | "
                  f"{mean_ci([e['bg_mbps'] for e in entries])} | {mean_ci([e['jain'] for e in entries])} | "
                  f"{paper if paper is not None else '–'} | "
                  f"{f'{statistics.fmean(right):.2f} of {cycles}' if right else '–'} |")
    # the paper's "four times": what Adaptive reclaims against the wrong fixed choice, the
    # foreground's Mb/s against a BBR background, the CUBIC background's own against a CUBIC one
    for background, wrong, who in (("bbr", "Fixed:CUBIC", "fg_mbps"), ("cubic", "Fixed:BBR", "bg_mbps")):
        adaptive, fixed = ([e[who] for e in by.get((background, scheme), [])] for scheme in ("Adaptive", wrong))
        if adaptive and fixed:
            print(f"\n{background.upper()} background, {who[:2].upper()} Mb/s under Adaptive over under {wrong}, "
                  "per run: " + ", ".join(f"{a / b:.2f}" for a, b in zip(adaptive, fixed)) + " (the paper: four times)")


if __name__ == "__main__":
    main()
