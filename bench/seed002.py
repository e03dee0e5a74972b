"""Seed 002's tables as the report computes them (collectors/studies/stiff_udp/section.py), written
as Markdown for bench/RESULTS-seed002.md: ours beside the paper's, from runs already made.

    .venv/bin/python bench/seed002.py RUN_DIR [RUN_DIR ...]

The runs (each takes the profile with `repeats` and `--time-scale` as RESULTS-seed002.md says):

    sudo .venv/bin/longhaul run --config CONFIG --time-scale 0.25    # parallel-tcp-stiff-udp
    sudo .venv/bin/longhaul run --config CONFIG --time-scale 0.25    # seed002-table1-window

Besides the tables, each run's cells: the lab's verified RTT and rate, and the seconds any flow
read above the bottleneck's payload ceiling or an RTT below the path's (both should be 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies.stiff_udp.section import SECTION

HEADERS = {
    "effectiveness": ("TCP method", "Mb/s", "paper", "MB", "paper", "T MB (ours)", "achieved %", "paper", "n"),
    "fairness": ("TCP method", "median RTT ms", "paper", "sqrt(p)", "paper", "UDP loss %", "n"),
    "appropriation": ("TCP method", "Mb/s", "paper", "MB", "paper", "cross Mb/s", "paper", "appropriation %",
                      "paper", "N/(N+k) %", "n"),
}


def table(title: str, header: tuple[str, ...], rows: list[dict]) -> list[str]:
    out = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [c["text"] for c in row["cells"]]
        out.append("| " + " | ".join([row["name"], *cells]) + " |")
    return out + [""]


def lab_lines(store) -> list[str]:
    out = ["| cell | scenario | verified RTT ms | rate Mb/s | trials ok | s above ceiling | rounds below the path |",
           "|---|---|---|---|---|---|---|"]
    for cell in store.entries:
        lab = cell.lab
        rtt = lab.rtt_ms.measured if lab and lab.rtt_ms else None
        rate = lab.rate_mbps.measured if lab and lab.rate_mbps else None
        above = sum(t.collector.seconds_above_ceiling or 0 for t in cell.trials if t.collector)
        below = sum(t.collector.rtt_rounds_below_floor or 0 for t in cell.trials if t.collector)
        out.append(f"| {cell.id} | {cell.scenario} | {rtt if rtt is not None else '-'} | "
                   f"{rate if rate is not None else '-'} | {len(cell.ok_trials)}/{len(cell.trials)} | {above} | {below} |")
    return out + [""]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for run in argv:
        store = load_store(Path(run))
        ctx = SECTION.context(store)
        print(f"### Run {store.run_id}\n")
        if ctx.get("error"):
            print(ctx["error"] + "\n")
        for kind in ("effectiveness", "fairness"):
            for t in ctx[kind]:
                print("\n".join(table(t["title"], HEADERS[kind], t["rows"])))
        if ctx.get("appropriation"):
            t = ctx["appropriation"]
            print("\n".join(table(t["title"], HEADERS["appropriation"], t["rows"])))
        for note in ctx.get("notes") or []:
            print(f"- {note}")
        print("\n" + "\n".join(lab_lines(store)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
