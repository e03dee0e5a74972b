"""Where a sweep's time goes beyond its flows (issue 16 item 3): one `longhaul run` of CELLS cells x
REPEATS trials, each one CUBIC-family flow of FLOW_S seconds at 128 ms, on one lab (the cells differ
in congestion control only, as a sweep's cells mostly do), with the verification on; the manifest's
`phases` (appliance/run/phases.py) give the breakdown, the rest of the wall time is the process's
start, the run's store and its HTML report.

    sudo .venv/bin/python bench/overhead.py        # ~2 minutes; writes bench/RESULTS-overhead.md
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "RESULTS-overhead.md"
CCAS = ("cubic", "bbr", "reno", "cubic")
REPEATS, FLOW_S, RTT_MS, RATE = 2, 5, 128, 100

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
            "beyond_flows_per_trial_s": round((wall - flows) / len(trials), 2)}


def write(result: dict) -> str:
    cells, trials = result["cells"], result["trials"]
    phases = result["phases"]
    verification = sum(phases.get(p, {}).get("s", 0.0) for p in ("verify rtt", "verify rate"))
    per_trial = (result["wall_s"] - result["flow_s"] - verification) / trials
    lines = ["# Overhead of a run beyond its flows", "",
             f"Written by `bench/overhead.py` on {time.strftime('%Y-%m-%d', time.gmtime())}: {cells} cells x "
             f"{trials // cells} trials of one {FLOW_S} s flow at {RTT_MS} ms, {RATE} Mb/s, one lab, verification on. "
             f"`longhaul run` took {result['wall_s']} s for {result['flow_s']} s of flows: "
             f"**{verification / cells:.2f} s of verification per cell** and **{per_trial:.2f} s per trial beyond its "
             f"flows otherwise** (lab, servers, the flows' lead and exit, teardown, store, report; "
             f"{result['beyond_flows_per_trial_s']} s per trial with the verification shared out).", "",
             "| phase | total s | times | per time s | per trial s |", "|---|---|---|---|---|"]
    for name, p in result["phases"].items():
        lines.append(f"| {name} | {p['s']:.2f} | {p['n']} | {p['s'] / max(p['n'], 1):.2f} | {p['s'] / trials:.2f} |")
    lines += [f"| the rest (process start, store, report) | {result['untimed_s']:.2f} | 1 | | "
              f"{result['untimed_s'] / trials:.2f} |", "",
              "`flows` is the trial's clock: the configured flow time plus the lead before it (receivers' and "
              "clients' set-up) and the flows' exit after it. Raw: ```" + json.dumps(result) + "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    out = run()
    OUT.write_text(write(out))
    print(OUT.read_text())
