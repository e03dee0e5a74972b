"""Does watching cost the trial? Twenty viewers on the console's live page during 10 Gb/s trials on
the embedded lab, beside the same trials unwatched, in one run (issue 28's load bench).

One `longhaul run` of one cell (one CUBIC flow, 10 Gb/s, 20 ms, 1-BDP queue, `large` buffers,
FLOW_S s) with REPEATS trials; odd trials run unwatched, even trials with VIEWERS clients on the live
page (`longhaul serve` on loopback, a process of its own): each loads the page as a browser does,
then holds the page's event stream open and reads every message, reconnecting if it drops. The
bench reads /proc (read only) at each trial's start and end: the machine's busy time and the
console's CPU. Throughput is the store's (each trial's mean and its seconds from STEADY_FROM_S).
The ratio watched / unwatched is what the console costs; this machine's speed drifts, so only the
ratio within one run means anything.

    sudo .venv/bin/python bench/console_load.py        # ~6 minutes; writes bench/RESULTS-console-load.md
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "RESULTS-console-load.md"
VIEWERS = 20
REPEATS = 8
FLOW_S = 25
STEADY_FROM_S = 5
RATE, RTT = 10000, 20
TICK = os.sysconf("SC_CLK_TCK")

PROFILE = f"""
[profile]
description = "console load: one CUBIC flow at {RATE} Mb/s, {RTT} ms, watched on even trials"
repeats = {REPEATS}
[topology]
pairs = 1
access_rate_mbps = 20000
bottleneck_rate_mbps = {RATE}
rtt_ms = {RTT}
queue = "1bdp"
[tuning]
buffer = "large"
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = {FLOW_S}
"""


def busy_jiffies() -> int:
    fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    return sum(fields) - fields[3] - fields[4]            # all but idle and iowait


def process_jiffies(pid: int) -> int:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


class Viewers:
    """VIEWERS clients of the live page, on an event loop of their own thread."""

    def __init__(self, port: int, run_id: str):
        self.port, self.run_id = port, run_id
        self.messages = [0] * VIEWERS
        self.pages_ms: list[float] = []
        self.reconnects = 0       # streams that ended (the server ends one only when the run has ended)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.tasks: list[asyncio.Future] = []

    def start(self) -> None:
        self.thread.start()
        self.tasks = [asyncio.run_coroutine_threadsafe(self.viewer(k), self.loop) for k in range(VIEWERS)]

    def stop(self) -> None:
        async def cancel_all():
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()
            await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def get(self, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAccept: */*\r\n\r\n".encode())
        await writer.drain()
        status = await reader.readline()
        assert b" 200 " in status, (path, status)
        while (await reader.readline()).strip():          # headers
            pass
        return reader, writer

    async def viewer(self, k: int) -> None:
        while True:
            t0 = time.monotonic()
            reader, writer = await self.get(f"/runs/{self.run_id}/live")
            await reader.read(1 << 16)                     # the page (one read is enough to time its first bytes)
            writer.close()
            self.pages_ms.append((time.monotonic() - t0) * 1000)
            reader, writer = await self.get(f"/runs/{self.run_id}/live/events")
            try:
                while line := await reader.readline():
                    if line.startswith(b"data:") or b"\r\ndata:" in line:
                        self.messages[k] += 1
            finally:
                writer.close()
            self.reconnects += 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trials(run_dir: Path) -> dict[int, bool]:
    """Each trial begun so far: k -> whether it has ended (its trial.json is written at its end)."""
    return {int(p.name.split("-")[1]): (p / "trial.json").exists() for p in run_dir.glob("cells/*/trial-*")}


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lh-console-load-"))
    (work / "profiles").mkdir()
    (work / "profiles" / "load.toml").write_text(PROFILE)
    (work / "runs").mkdir()
    (work / "config.toml").write_text('[store]\ndir = "runs"\n[run]\nprofiles = ["load"]\n[report]\nformats = []\n'
                                      '[verify]\nattempts = 1\nrtt_tolerance_ms = 1000\nrate_tolerance_pct = 100\n')
    port = free_port()
    cli = [sys.executable, "-m", "longhaul.appliance.cli"]
    console = subprocess.Popen([*cli, "serve", "--store", str(work / "runs"), "--listen", f"127.0.0.1:{port}"],
                               cwd=work, stderr=subprocess.DEVNULL)
    run = subprocess.Popen([*cli, "run", "--config", str(work / "config.toml")], cwd=work,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks: dict[int, dict] = {}
    viewers = None
    try:
        while run.poll() is None:
            run_dirs = list((work / "runs").iterdir())
            for k, ended in sorted(trials(run_dirs[0]).items()) if run_dirs else []:
                mark = marks.setdefault(k, {})
                if "start" not in mark and not ended:
                    mark["start"] = (time.monotonic(), busy_jiffies(), process_jiffies(console.pid))
                    if k % 2 == 0:
                        viewers = Viewers(port, run_dirs[0].name)
                        viewers.start()
                if ended and "start" in mark and "end" not in mark:
                    mark["end"] = (time.monotonic(), busy_jiffies(), process_jiffies(console.pid))
                    if viewers is not None:
                        mark["messages"] = list(viewers.messages)
                        mark["pages_ms"] = list(viewers.pages_ms)
                        mark["reconnects"] = viewers.reconnects
                        viewers.stop()
                        viewers = None
            time.sleep(0.05)
        out, err = run.communicate()
    finally:
        if viewers is not None:
            viewers.stop()
        if run.poll() is None:
            run.send_signal(2)
            run.wait(120)
        console.send_signal(2)
        console.wait(30)
    if run.returncode != 0:
        print(err[-2000:], file=sys.stderr)
        return 1
    status = write(Path(out.strip().splitlines()[-1]), marks)
    shutil.rmtree(work)
    return status


def steady_mean(trial_dir: Path) -> float | None:
    with open(trial_dir / "throughput.csv") as fh:
        rows = [float(r["mbps"]) for r in csv.DictReader(fh)
                if r["stream"] == "all" and STEADY_FROM_S <= float(r["t_s"]) <= FLOW_S and float(r["t_s"]).is_integer()]
    return statistics.fmean(rows) if rows else None


def write(run_dir: Path, marks: dict[int, dict]) -> int:
    cell = json.loads((run_dir / "summary.json").read_text())["cells"][0]
    rows = []
    for trial in cell["trials"]:
        k = trial["trial"]
        mark = marks.get(k, {})
        if "start" not in mark or "end" not in mark or trial.get("status") != "ok":
            continue
        (t0, busy0, con0), (t1, busy1, con1) = mark["start"], mark["end"]
        seconds = t1 - t0
        rows.append({"trial": k, "watched": k % 2 == 0, "mean_mbps": trial["flows"][0]["mean_mbps"],
                     "steady_mbps": steady_mean(run_dir / "cells" / cell["id"] / f"trial-{k}"),
                     "machine_cpu_pct": (busy1 - busy0) / TICK / seconds / os.cpu_count() * 100,
                     "console_cpu_pct": (con1 - con0) / TICK / seconds * 100,
                     "messages_per_viewer_s": (statistics.fmean(mark["messages"]) / seconds) if mark.get("messages") else None,
                     "page_ms_median": statistics.median(mark["pages_ms"]) if mark.get("pages_ms") else None,
                     "streams_ended": mark.get("reconnects"),
                     "seconds": seconds})
    quiet = [r for r in rows if not r["watched"]]
    watched = [r for r in rows if r["watched"]]
    if not quiet or not watched:
        print("not enough trials on record", rows, file=sys.stderr)
        return 1

    def m(group, key):
        values = [r[key] for r in group if r[key] is not None]
        return statistics.fmean(values) if values else float("nan")

    def sd(group, key):
        values = [r[key] for r in group if r[key] is not None]
        return statistics.stdev(values) if len(values) > 1 else 0.0

    lines = [
        "# The console under load: twenty viewers on the live page during 10 Gb/s trials",
        "",
        f"`sudo .venv/bin/python bench/console_load.py` on {time.strftime('%Y-%m-%d', time.gmtime())} "
        f"({os.cpu_count()} cores): one run, one cell (one CUBIC flow, {RATE} Mb/s, {RTT} ms, 1-BDP queue, `large` "
        f"buffers, {FLOW_S} s), {REPEATS} trials; odd trials unwatched, even trials with {VIEWERS} viewers on the "
        "live page (each loads the page, then holds its event stream open and reads every message). "
        "`longhaul serve` runs as its own process on loopback. CPU is over each trial, from /proc.",
        "",
        "| | trials | mean Mb/s | steady Mb/s (from 5 s) | machine CPU % (both cores) | console CPU % of a core | "
        "messages per viewer per s | live page, median ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, group in (("unwatched", quiet), (f"{VIEWERS} viewers", watched)):
        lines.append(f"| {name} | {len(group)} | {m(group, 'mean_mbps'):.1f} ± {sd(group, 'mean_mbps'):.1f} | "
                     f"{m(group, 'steady_mbps'):.1f} ± {sd(group, 'steady_mbps'):.1f} | "
                     f"{m(group, 'machine_cpu_pct'):.1f} | {m(group, 'console_cpu_pct'):.1f} | "
                     + (f"{m(group, 'messages_per_viewer_s'):.2f} | {m(group, 'page_ms_median'):.0f} |"
                        if group is watched else "– | – |"))
    ratio = m(watched, "mean_mbps") / m(quiet, "mean_mbps")
    steady = m(watched, "steady_mbps") / m(quiet, "steady_mbps")
    lines += [
        f"| watched / unwatched | | **{ratio:.4f}** | **{steady:.4f}** | "
        f"{m(watched, 'machine_cpu_pct') / m(quiet, 'machine_cpu_pct'):.3f} | | | |",
        "",
        "Per trial: " + ", ".join(f"{r['trial']}{'w' if r['watched'] else ''} {r['mean_mbps']:.0f}" for r in rows) + " Mb/s.",
        "",
        "Raw: ```" + json.dumps(rows) + "```",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
