"""Fidelity and overhead of the embedded lab, through the product's own run path.

For 100 Mb/s, 500 Mb/s and 1 Gb/s at 128 ms RTT with a 1-BDP queue: the lab verification's
configured vs measured idle RTT and bottleneck rate, the maximum queueing delay seen by a 10 ms
interval RTT probe under one CUBIC flow (expected: queue bytes / rate), and that flow's goodput as
a fraction of the bottleneck. Overhead: the run's wall time beyond the flows' configured durations,
per cell (lab set-up, verification, server start, teardown).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATES = (100, 500, 1000)
DURATION_S = 30

PROFILE = """
[profile]
description = "fidelity bench"
repeats = 1
[topology]
pairs = 1
access_rate_mbps = {access}
bottleneck_rate_mbps = {rate}
rtt_ms = 128
queue = "1bdp"
[probe]
mode = "interval"
interval_ms = 10
[[flows]]
name = "cubic"
role = "foreground"
cca = "cubic"
duration_s = {duration}
"""


def run(rates=RATES, duration_s=DURATION_S) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lh-bench-"))
    (tmp / "profiles").mkdir()
    names = []
    for rate in rates:
        name = f"fid{rate}"
        (tmp / "profiles" / f"{name}.toml").write_text(
            PROFILE.format(rate=rate, access=max(1000, rate * 2), duration=duration_s))
        names.append(name)
    (tmp / "config.toml").write_text(f'[store]\ndir = "runs"\n[run]\nprofiles = {json.dumps(names)}\n'
                                     '[report]\nformats = ["html"]\n[verify]\nattempts = 3\n')
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(tmp / "config.toml")],
                         capture_output=True, text=True, cwd=tmp)
    wall = time.monotonic() - started
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = []
    for cell in summary["cells"]:
        lab, topo = cell["lab"], cell["topology"]
        trial = cell["trials"][0] if cell["trials"] else None
        flow = trial["flows"][0] if trial else {}
        expected_q = topo["queue_bytes"] * 8 / (topo["bottleneck_rate_mbps"] * 1e6) * 1e3
        rows.append({
            "rate_mbps": topo["bottleneck_rate_mbps"],
            "rtt_configured_ms": lab["rtt_ms"]["configured"], "rtt_measured_ms": lab["rtt_ms"]["measured"],
            "rate_measured_mbps": lab["rate_mbps"]["measured"], "verification_ok": lab["ok"],
            "max_queueing_delay_ms": trial["rtt"]["inflation_max_ms"] if trial else None,
            "expected_max_queueing_delay_ms": round(expected_q, 1),
            "cubic_goodput_mbps": flow.get("mean_mbps"),
            "cubic_fraction": (flow["mean_mbps"] / topo["bottleneck_rate_mbps"]) if flow.get("mean_mbps") else None,
        })
    planned = duration_s * len(rates)
    return {"run_dir": str(run_dir), "exit": res.returncode, "rows": rows, "wall_s": round(wall, 1),
            "overhead_per_cell_s": round((wall - planned) / len(rates), 1)}


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
