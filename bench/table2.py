"""Seed 000 Tables 2 and 3 at the paper's scale (issue 16 item 6, issue 26 item 4): the
`overlay1-table2` (Overlay-1) or `overlay2-table3` (Overlay-2) profile, every flow 300 s, 3 repeats,
through the product's own run path, and the table in the paper's layout with the paper's numbers
beside ours (the report's own fairness table, reports/render.py).

    sudo .venv/bin/python bench/table2.py                    # ~2 h 05 min; writes bench/RESULTS-table2.md
    sudo .venv/bin/python bench/table2.py --table 3 --work /work/lab-runs/table3
                                                             # ~2 h 10 min; writes bench/RESULTS-table3.md
    sudo .venv/bin/python bench/table2.py --table 3 --resume RUN_DIR   # finish an interrupted run
    sudo .venv/bin/python bench/table2.py --from RUN_DIR     # write it from a run already made
    sudo .venv/bin/python bench/table2.py --time-scale 0.2   # a quick look (not the paper's scale)

Besides the table: each trial's figures (so the spread behind a mean is visible), the host's CPU
steal, the seconds any flow read above the bottleneck's payload ceiling (should be 0), and the
verification's idle RTT and shaper rate per cell. Why the shared cells differ from the paper is in
docs/table2.md (and docs/table3.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from longhaul.collectors.live.acked_rate import CONTROL_BYTES
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.records import CellEntry
from longhaul.drivers.jsonlines import json_lines
from longhaul.reports.rows import FAIRNESS_ROWS, fairness_table

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PaperTable:
    number: int
    profile: str
    overlay: str          # the lab, as the results file describes it


TABLES = {
    2: PaperTable(2, "overlay1-table2", "Overlay-1: 500 Mb/s bottleneck, 128 ms RTT, 6 MB router queues (0.75 BDP), "
                                        "1 Gb/s access"),
    3: PaperTable(3, "overlay2-table3", "Overlay-2: 1 Gb/s bottleneck, 128 ms RTT, 6 MB router queues (0.375 BDP, "
                                        "the paper could not raise it), 10 Gb/s access"),
}


def run(table: PaperTable, time_scale: float, work: Path | None, resume: Path | None) -> Path:
    if work is None:        # kept: the report and docs/table{2,3}.md read a paper-scale run's trials again
        (REPO / "runs").mkdir(exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"bench-table{table.number}-", dir=REPO / "runs"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.toml").write_text(
        f'[store]\ndir = "runs"\n[run]\nprofiles = ["{table.profile}"]\nprofile_dir = "{REPO / "profiles"}"\n'
        '[report]\nformats = ["html"]\n')
    again = ["--resume", str(resume)] if resume else ["--time-scale", f"{time_scale:g}"]
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(work / "config.toml"),
                          *again], stdout=subprocess.PIPE, text=True, cwd=work)
    if res.returncode != 0:
        raise SystemExit(f"longhaul run exited {res.returncode}")
    return Path(res.stdout.strip().splitlines()[-1])


def _cell_text(slot: dict | None) -> str:
    if not slot or slot.get("ours") is None:
        return ""
    std = f" ± {slot['std']}" if slot.get("std") else ""
    paper = f" ({slot['paper']})" if slot.get("paper") is not None else ""
    return f"{slot['ours']}{std}{paper}"


def table(cells: list[CellEntry]) -> list[str]:
    notes: list[str] = []
    t = fairness_table(cells, notes)
    if t is None:
        return ["(no cell of the run carries the fairness table's labels)"]
    lines = ["| | | " + " | ".join(t["columns"]) + " |", "|---|---|" + "---|" * len(t["columns"])]
    for (mode, role, type_, stream), row in zip(FAIRNESS_ROWS, t["rows"]):
        lines.append(f"| {type_} | {stream} | " + " | ".join(_cell_text(s) for s in row["cells"]) + " |")
    lines.append("| Shared | Jain's index | " + " | ".join(_cell_text(s) for s in t["jain"]) + " |")
    return lines + [""] + [f"- {n}" for n in notes]


def trials(cells: list[dict]) -> list[str]:
    lines = ["| scenario | trial | status | flows (mean Mb/s) | Jain | retransmits | seconds above ceiling | "
             "CPU steal % |", "|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        for t in cell["trials"]:
            flows = ", ".join(f"{f['name']} {f['mean_mbps']:.1f}" for f in t.get("flows") or []
                              if f.get("mean_mbps") is not None)
            retrans = ", ".join(str(f.get("retransmits")) for f in t.get("flows") or [])
            jain = "" if t.get("jain") is None else f"{t['jain']:.3f}"
            above = (t.get("collector") or {}).get("seconds_above_ceiling")
            lines.append(f"| {cell['scenario']} | {t['trial']} | {t['status']} | {flows} | {jain} | {retrans} | "
                         f"{above} | {t.get('host_cpu_steal_pct')} |")
    return lines


WINDOWS = ((10, 60), (60, 150), (150, 300))      # seconds of the paper-scale trial (scaled with it)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path) as fh:
        return list(csv.DictReader(fh))


def evidence(run_dir: Path, cells: list[dict], scale: float) -> list[str]:
    """What each flow did over time: its mean Mb/s per window of the
    trial, and for TCP flows from tcp_info (10 Hz) the data sockets, their mean congestion window,
    how full the window was (bytes in flight / (cwnd x 1448): ~1 means cwnd-limited, well below
    means the application or the receive window held it back) and the smoothed RTT they saw."""
    heads = " | ".join(f"Mb/s {a * scale:g}-{b * scale:g} s" for a, b in WINDOWS)
    lines = [f"| scenario | trial | flow | {heads} | data sockets | mean cwnd (pkts/socket) | in flight / cwnd | "
             "srtt ms |", "|---|---|---|" + "---|" * len(WINDOWS) + "---|---|---|---|"]
    for cell in cells:
        for t in cell["trials"]:
            tdir = run_dir / "cells" / cell["id"] / f"trial-{t['trial']}"
            series = [r for r in _rows(tdir / "throughput.csv") if r["stream"] == "all"]
            sockets = _rows(tdir / "tcpinfo.csv")
            for flow in t.get("flows") or []:
                name = flow["name"]
                per = [(float(r["t_s"]), float(r["mbps"])) for r in series if r["flow"] == name]
                means = []
                for a, b in WINDOWS:
                    got = [m for ts, m in per if a * scale < ts <= b * scale]
                    means.append(f"{sum(got) / len(got):.1f}" if got else "")
                mine = [r for r in sockets if r["flow"] == name and int(r["bytes_acked"] or 0) > CONTROL_BYTES]
                if mine:
                    ports = {r["sport"] for r in mine}
                    cwnd = sum(int(r["cwnd"]) for r in mine) / len(mine)
                    full = [int(r["bytes_in_flight"]) / (int(r["cwnd"]) * 1448) for r in mine if int(r["cwnd"])]
                    srtt = sum(float(r["srtt_ms"]) for r in mine) / len(mine)
                    tcp = f"{len(ports)} | {cwnd:.0f} | {sum(full) / len(full):.2f} | {srtt:.0f}"
                else:
                    tcp = "- | - | - | -"
                lines.append(f"| {cell['scenario']} | {t['trial']} | {name} ({flow['tool']}) | "
                             + " | ".join(means) + f" | {tcp} |")
    return lines


def udt_evidence(run_dir: Path, cells: list[dict]) -> list[str]:
    """UDT's own view from its sender's UDT::perfmon seconds (raw/<flow>-b0.out): the rate it sent at,
    the share of packets it sent again, its RTT, and whether the flow window (the receiver's buffer)
    or the congestion window bounded what it had in flight."""
    lines = ["| scenario | trial | send rate Mb/s | retransmitted % | RTT ms | in flight (pkts) | flow window | "
             "congestion window | packet period µs |", "|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        udt = [f["name"] for f in cell["flows"] if f.get("tool") == "udt"]
        for t in cell["trials"]:
            for name in udt:
                raw = run_dir / "cells" / cell["id"] / f"trial-{t['trial']}" / "raw" / f"{name}-b0.out"
                ticks = [o for o in json_lines(raw.read_text()) if o.get("event") == "interval"] if raw.exists() else []
                if not ticks:
                    continue

                def mean(key, ticks=ticks):
                    return sum(float(o.get(key) or 0) for o in ticks) / len(ticks)
                sent = sum(int(o.get("pktSent") or 0) for o in ticks)
                again = sum(int(o.get("pktRetrans") or 0) for o in ticks)
                lines.append(f"| {cell['scenario']} | {t['trial']} | {mean('mbpsSendRate'):.1f} | "
                             f"{100 * again / max(sent, 1):.2f} | {mean('msRTT'):.0f} | {mean('pktFlightSize'):.0f} | "
                             f"{mean('pktFlowWindow'):.0f} | {mean('pktCongestionWindow'):.0f} | "
                             f"{mean('usPktSndPeriod'):.1f} |")
    return lines


def verification(run_dir: Path, cells: list[dict]) -> list[str]:
    lines = ["| scenario | idle RTT measured (ms) | shaper measured (Mb/s) | attempt |", "|---|---|---|---|"]
    for cell in cells:
        path = run_dir / "cells" / cell["id"] / "verification.json"
        if not path.exists():
            continue
        v = json.loads(path.read_text())
        lines.append(f"| {cell['scenario']} | {v['rtt_ms']['measured']} of {v['rtt_ms']['configured']} | "
                     f"{v['rate_mbps']['measured']} of {v['rate_mbps']['configured']} | {v.get('attempt')} |")
    return lines


def write(table_: PaperTable, run_dir: Path, wall_s: float | None) -> str:
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    cells = summary["cells"]
    scale = manifest.get("time_scale_override") or 1.0
    host = manifest["host"]
    lines = [
        f"# Seed 000 Table {table_.number} at the paper's scale", "",
        f"Written by `bench/table2.py --table {table_.number}` from run `{summary['run_id']}` ({manifest['started']} to "
        f"{manifest.get('finished')}{f', {wall_s / 60:.0f} min in its last sitting' if wall_s else ''}): longhaul "
        f"{manifest['longhaul']['git_revision'][:7]}, kernel {host['kernel']}, delay by {manifest['features'].get('delay')}, "
        f"time scale {scale:g} (1 = the paper's 300 s foreground), {len(cells[0]['trials']) if cells else 0} "
        "repeats per cell.", "",
        f"{table_.overlay}, `large` buffers; the "
        "foreground is one CUBIC iperf3 stream for 300 s, the background starts 10 s later (0 s when dedicated). "
        "Each entry: our mean ± standard deviation over the repeats, Mb/s (the paper's value in brackets). "
        "Per-second figures are what the receiver was delivered (sender tcp_info), so a mean is what crossed "
        "the bottleneck.", "",
        *table(load_store(run_dir).entries), "",
        "## Every trial", "", *trials(cells), "",
        "## Over time, per flow (the evidence docs/table2.md reads)", "", *evidence(run_dir, cells, scale), "",
        "## UDT's own view (its sender's perfmon, averaged over its seconds)", "", *udt_evidence(run_dir, cells), "",
        "## Verification per cell", "", *verification(run_dir, cells), "",
        f"Why the shared cells differ from the paper, with the evidence: docs/table{table_.number}.md.", "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=int, choices=sorted(TABLES), default=2)
    ap.add_argument("--from", dest="run_dir", type=Path, help="a finished run of the table's profile")
    ap.add_argument("--resume", type=Path, help="finish this interrupted run of the table's profile, then write")
    ap.add_argument("--work", type=Path, help="the run's folder (default: a new one under runs/, which git ignores)")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    table_ = TABLES[a.table]
    started = time.monotonic()
    run_dir = a.run_dir or run(table_, a.time_scale, a.work or (a.resume.parent.parent if a.resume else None), a.resume)
    wall = None if a.run_dir else time.monotonic() - started
    out = a.out or HERE / f"RESULTS-table{table_.number}.md"
    out.write_text(write(table_, run_dir, wall))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
