"""Seed 001's profiles and transition RTTs from a run of `rao-throughput-profile-10g`, as Markdown
for bench/RESULTS-seed001.md: the profile means per (CCA, buffer, streams) at each RTT, and the
transition RTT tau_T beside the paper's where its text gives one (section 2.3, CUBIC).

    sudo .venv/bin/longhaul run --config CONFIG          # the profile; `--resume RUN_DIR` after a stop
    .venv/bin/python bench/seed001.py RUN_DIR

Everything is `longhaul analyze profile RUN_DIR --json` (collectors/studies/throughput_profile/);
this script only lays it out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from longhaul.collectors.studies.throughput_profile.paper import paper_tau_t

REPO = Path(__file__).resolve().parent.parent


def analysis(run: Path) -> dict:
    out = subprocess.run([str(REPO / ".venv" / "bin" / "longhaul"), "analyze", "profile", str(run), "--json",
                          "--no-dynamics"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def profiles_table(data: dict) -> list[str]:
    rtts = data["rtts_ms"]
    head = ["| cca | buffer | streams | " + " | ".join(f"{r:g} ms" for r in rtts) + " |",
            "|---|---|---|" + "---|" * len(rtts)]
    rows = []
    for p in data["profiles"]:
        at = {pt["rtt_ms"]: pt for pt in p["points"]}
        cells = [f"{at[r]['mean_mbps']:.0f} (n {at[r]['n']})" if r in at else "-" for r in rtts]
        rows.append(f"| {p['cca']} | {p['buffer']} | {p['streams']} | " + " | ".join(cells) + " |")
    return head + rows


def transitions_table(data: dict) -> list[str]:
    out = ["| cca | buffer | streams | tau_T ms (ours) | fit | paper tau_T ms |", "|---|---|---|---|---|---|"]
    for t in data["transitions"]:
        paper = paper_tau_t(t["cca"], t["buffer"], t["streams"])
        tau = "-" if t.get("tau_t_ms") is None else f"{t['tau_t_ms']:g}"
        out.append(f"| {t['cca']} | {t['buffer']} | {t['streams']} | {tau} | {t.get('kind') or '-'} | "
                   f"{'-' if paper is None else f'{paper:g}'} |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    data = analysis(Path(argv[0]))
    print(f"Run `{Path(argv[0]).name}`: {data['trials']} trials, capacity {data['capacity_mbps']:g} Mb/s "
          f"({data['capacity_source']}).\n")
    print("Profile means, Mb/s (trials averaged at each RTT):\n")
    print("\n".join(profiles_table(data)) + "\n")
    print("Transition RTTs (the sigmoid fits of section 3.2):\n")
    print("\n".join(transitions_table(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
