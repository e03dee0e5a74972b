"""Where a sweep's time goes beyond its flows (issue 16 item 3): one `longhaul run` of CELLS cells x
REPEATS trials, each one CUBIC-family flow of FLOW_S seconds at 128 ms, on one lab (the cells differ
in congestion control only, as a sweep's cells mostly do), with the verification on.

The manifest's `phases` (appliance/run/phases.py) give the breakdown; the rest of the wall time is
the process's start and the run's HTML report, once a run. A trial's `flows` phase is its clock:
the flow time plus iperf3's own lead before it and exit after it, which this bench reads from the
store (events.csv: launched and exited; tcpinfo.csv: the data socket's first byte in flight).
Then the store at seed 001's scale (630 cells x 10 trials): recording one more trial with
summary.json written a changed cell at a time, beside encoding it whole as before, in one sitting.

    sudo .venv/bin/python bench/overhead.py        # ~2 minutes; writes bench/RESULTS-overhead.md
"""

from __future__ import annotations

import copy
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.writer import FileRunWriter, summary_doc
from longhaul.core.tables import write_json

OUT = Path(__file__).resolve().parent / "RESULTS-overhead.md"
CCAS = ("cubic", "bbr", "reno", "cubic")
REPEATS, FLOW_S, RTT_MS, RATE = 2, 5, 128, 100
SWEEP_CELLS, SWEEP_REPEATS = 630, 10        # seed 001's throughput profiles (profiles/rao-throughput-profile.toml)
PER_RUN = ("session", "lab build", "fingerprint", "lab teardown")
PER_CELL = ("verify rtt", "verify rate")
PER_TRIAL = ("trial set-up", "flows", "trial wind-down", "trial store")

PROFILE = f"""
[profile]
description = "overhead: {len(CCAS)} cells x {REPEATS} trials of {FLOW_S} s at {RTT_MS} ms"
repeats = {REPEATS}
[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = {RATE}
rtt_ms = {RTT_MS}
queue = "1bdp"
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = {FLOW_S}
""" + "".join(f'[[scenarios]]\nname = "{cca}-{k}"\nset = {{ "flows.fg.cca" = "{cca}" }}\n' for k, cca in enumerate(CCAS))

CONFIG = """
[store]
dir = "runs"
[run]
profiles = ["overhead"]
[report]
formats = ["html"]
"""


def run() -> dict:
    work = Path(tempfile.mkdtemp(prefix="lh-overhead-"))
    (work / "profiles").mkdir()
    (work / "profiles" / "overhead.toml").write_text(PROFILE)
    (work / "config.toml").write_text(CONFIG)
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(work / "config.toml")],
                         cwd=work, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    trials = [t for c in summary["cells"] for t in c["trials"]]
    phases = manifest["phases"]
    timed = sum(p["s"] for p in phases.values())
    flows = len(trials) * FLOW_S
    return {"run_dir": str(run_dir), "wall_s": round(wall, 1), "cells": len(summary["cells"]), "trials": len(trials),
            "flow_s": flows, "phases": phases, "untimed_s": round(wall - timed, 1),
            "refused": [c["id"] for c in summary["cells"] if c["status"] == "refused"],
            "verify_attempts": [c["lab"]["attempt"] for c in summary["cells"] if c.get("lab")],
            "beyond_flows_per_trial_s": round((wall - flows) / len(trials), 2),
            "tool": tool_times(run_dir), "store_at_scale": store_at_scale(run_dir)}


def tool_times(run_dir: Path) -> dict:
    """iperf3's own share of each trial's clock: launch to its first data byte in flight (its
    set-up), the first byte against the declared start, and the declared end to its exit (its
    end exchange), medians over the run's trials."""
    lead, late, exit_ = [], [], []
    for trial_dir in sorted(run_dir.glob("cells/*/trial-*")):
        with open(trial_dir / fmt.EVENTS_CSV) as fh:
            (event,) = list(csv.DictReader(fh))
        with open(trial_dir / fmt.TCPINFO_CSV) as fh:
            first = min(float(r["t_s"]) for r in csv.DictReader(fh) if int(r["bytes_in_flight"] or 0) > 0)
        lead.append(first - float(event["launched_s"]))
        late.append(first - float(event["planned_start_s"]))
        exit_.append(float(event["exited_s"]) - float(event["planned_stop_s"]))
    return {name: round(statistics.median(values), 3) for name, values in
            (("lead_s", lead), ("first_byte_late_s", late), ("exit_s", exit_))}


def store_at_scale(run_dir: Path) -> dict:
    """Recording one trial into a run of SWEEP_CELLS x SWEEP_REPEATS trials copied from this run's
    first cell: summary.json a changed cell at a time (the writer) and the whole document encoded
    as before (write_json of summary_doc), one after the other."""
    cell = load_store(run_dir).entries[0]
    writer = FileRunWriter.create(Path(tempfile.mkdtemp(prefix="lh-store-scale-")), "scale")
    writer.manifest = {"status": "running"}
    for k in range(SWEEP_CELLS):
        entry = copy.deepcopy(cell)
        entry.id, entry.trials = f"{cell.id}-{k:04d}", []
        for j in range(SWEEP_REPEATS):
            entry.add_trial(_renumbered(cell.trials[0], j + 1))
        writer.cells.append(entry)
    writer.write_summary()
    last, extra = writer.cells[-1], _renumbered(cell.trials[0], SWEEP_REPEATS + 1)
    start = time.perf_counter()
    writer.record_trial(last, extra)
    by_cell = time.perf_counter() - start
    start = time.perf_counter()
    write_json(writer.dir / "whole.json", summary_doc(writer.run_id, "running", writer.cells))
    whole = time.perf_counter() - start
    same = (writer.dir / fmt.SUMMARY).read_text() == (writer.dir / "whole.json").read_text()
    return {"trials": SWEEP_CELLS * SWEEP_REPEATS, "summary_mb": round((writer.dir / fmt.SUMMARY).stat().st_size / 1e6, 1),
            "record_trial_s": round(by_cell, 3), "whole_summary_s": round(whole, 3), "same_bytes": same}


def _renumbered(trial, number: int):
    out = copy.deepcopy(trial)
    out.trial = number
    return out


def write(result: dict) -> str:
    cells, trials, phases = result["cells"], result["trials"], result["phases"]

    def total(names) -> float:
        return sum(phases.get(p, {}).get("s", 0.0) for p in names)

    verification = total(PER_CELL) / cells
    per_trial = (total(PER_TRIAL) - result["flow_s"]) / trials
    tool, scale = result["tool"], result["store_at_scale"]
    own = per_trial - tool["lead_s"] - tool["exit_s"]
    lines = ["# Overhead of a run beyond its flows", "",
             f"Written by `sudo .venv/bin/python bench/overhead.py` on {time.strftime('%Y-%m-%d', time.gmtime())}: "
             f"{cells} cells x {trials // cells} trials of one {FLOW_S} s iperf3 flow at {RTT_MS} ms, {RATE} Mb/s, one "
             f"lab, verification on. `longhaul run` took {result['wall_s']} s for {result['flow_s']} s of flows.", "",
             f"- **Verification: {verification:.2f} s per cell** (idle RTT and the shaper's rate; a cell is verified "
             "once, before its first trial).",
             f"- **Per trial beyond its flow: {per_trial:.2f} s** (set-up, the flow's clock beyond its {FLOW_S} s, "
             f"wind-down, store). Of it, iperf3's own protocol: {tool['lead_s']:.2f} s from its launch to its first data "
             f"byte (4 round trips besides the stream's connect: connect, cookie, parameters, test start) and "
             f"{tool['exit_s']:.2f} s from the declared end to its exit (its end exchange, behind a full 1-BDP queue); "
             f"longhaul's own part is **{own:.2f} s**. The first data byte left {tool['first_byte_late_s']:+.2f} s "
             "from the declared start (the trial launches a burst its tool's set-up time early).",
             f"- **Per run: {total(PER_RUN) + result['untimed_s']:.1f} s** once (session, lab build, fingerprint, "
             "teardown, the process's start and the report): nothing per trial in a sweep.",
             f"- **The store at seed 001's scale** ({scale['trials']:,} trials, summary.json {scale['summary_mb']} MB): "
             f"recording a trial takes {scale['record_trial_s']} s with summary.json written a changed cell at a time; "
             f"encoding it whole after every event, as before, took {scale['whole_summary_s']} s "
             f"(same bytes: {scale['same_bytes']}), 13 times a 10-trial cell.", "",
             "| phase | total s | times | per time s | per trial s |", "|---|---|---|---|---|"]
    for name, p in phases.items():
        lines.append(f"| {name} | {p['s']:.2f} | {p['n']} | {p['s'] / max(p['n'], 1):.2f} | {p['s'] / trials:.2f} |")
    lines += [f"| the rest (process start, report) | {result['untimed_s']:.2f} | 1 | | {result['untimed_s'] / trials:.2f} |",
              "", "`flows` is the trial's clock: the configured flow time plus the lead before it (receivers' and "
              "clients' set-up) and the flows' exit after it. Raw: ```" + json.dumps(result) + "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    out = run()
    OUT.write_text(write(out))
    print(OUT.read_text())
