"""One NFS copy at 128 ms (issue 16 item 7): seed 000's baseline is a 1 GB copy to an NFS mount in
~20 s, 410 Mb/s, on Overlay-1 with no background. The writer's window against nfs-cp's one WRITE
per round trip (`window = 1048576`), each alone on the lab, in one sitting.

One `longhaul run` of two cells (Overlay-1: 500 Mb/s bottleneck, 128 ms, 6 MB queue, 1 Gb/s access,
`large` buffers; one client copying 1 GB files for DURATION_S s, CUBIC by the shim):

    sudo .venv/bin/python bench/nfs_copy.py          # ~3 minutes; writes bench/RESULTS-nfs.md
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from longhaul.drivers import nfs

OUT = Path(__file__).resolve().parent / "RESULTS-nfs.md"
DURATION_S = 60
WINDOWS = {"nfs-cp's loop (window 1 MB)": 1 << 20, "the writer's default window (64 MB)": None}

PROFILE = """
[profile]
description = "one NFS copy at 128 ms"
repeats = 1
[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 500
rtt_ms = 128
queue = "6MB"
[tuning]
cca = "cubic"
buffer = "large"
[[flows]]
name = "nfs"
role = "foreground"
tool = "nfs"
pair = 1
cca = "cubic"
clients = 1
file_bytes = 1000000000
duration_s = {duration}
"""


def scenario(window: int | None) -> str:
    opts = "" if window is None else f'set = {{ "flows.nfs.options" = {{ window = {window} }} }}\n'
    return f'[[scenarios]]\nname = "w{window or 0}"\n{opts}'


def run() -> Path:
    work = Path(tempfile.mkdtemp(prefix="lh-nfs-"))
    (work / "profiles").mkdir()
    (work / "profiles" / "nfs1.toml").write_text(
        PROFILE.format(duration=DURATION_S) + "".join(scenario(v) for v in WINDOWS.values()))
    (work / "config.toml").write_text('[store]\ndir = "runs"\n[run]\nprofiles = ["nfs1"]\n[report]\nformats = []\n')
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(work / "config.toml")],
                         stdout=subprocess.PIPE, text=True, cwd=work)
    if res.returncode != 0:
        raise SystemExit(f"longhaul run exited {res.returncode}")
    return Path(res.stdout.strip().splitlines()[-1])


def rows(run_dir: Path) -> list[dict]:
    out = []
    summary = json.loads((run_dir / "summary.json").read_text())
    for cell, label in zip(summary["cells"], WINDOWS):
        trial = cell["trials"][0]
        raw = run_dir / "cells" / cell["id"] / "trial-1" / "raw" / "nfs-b0.out"
        result = nfs.parse(raw.read_text())
        copies = [c for c in result.extra["copies"] if c["complete"]]
        out.append({"window": label, "status": trial["status"], "mean_mbps": trial["flows"][0]["mean_mbps"],
                    "copies": [c["mbps"] for c in copies], "copy_seconds": [round(c["seconds"], 1) for c in copies],
                    "seconds_above_ceiling": trial["collector"].get("seconds_above_ceiling"),
                    "run_dir": str(run_dir)})
    return out


def write(results: list[dict]) -> str:
    lines = ["# One NFS copy at 128 ms against seed 000's 410 Mb/s", "",
             f"Written by `bench/nfs_copy.py`: Overlay-1 (500 Mb/s, 128 ms, 6 MB queue, `large` buffers), one "
             f"client copying 1 GB files for {DURATION_S} s from memory to ganesha, CUBIC. 'mean' is the flow's "
             "delivered Mb/s over the trial (sender tcp_info, so it includes the gaps between copies); 'per "
             "copy' is each complete copy's 1 GB over its own duration, the paper's figure (1 GB in ~20 s, "
             "410 Mb/s).", "",
             "| client | mean Mb/s | per copy Mb/s | copy seconds | seconds above ceiling |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['window']} | {r['mean_mbps']:.1f} | {', '.join(f'{m:.0f}' for m in r['copies']) or '-'} | "
                     f"{', '.join(map(str, r['copy_seconds'])) or '-'} | {r['seconds_above_ceiling']} |")
    lines += ["", f"Raw: ```{json.dumps(results)}```", ""]
    return "\n".join(lines)


def main() -> int:
    OUT.write_text(write(rows(run())))
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
