"""How fast the InfluxDB mirror spools and ships, against what a 16-flow run at 100 Hz produces,
and whether it slows the runner's thread (docs/telemetry.md).

    .venv/bin/python bench/influx_spool.py [--seconds 60] [--out bench/RESULTS-telemetry.md]

One synthetic trial: 16 flows, tcp_info at 100 Hz (1,600 socket rows a second), per-second
throughput per flow, RTT rounds at 10 Hz, `--seconds` long. Measured, on a real influxd (Debian's
1.6.7) on loopback started here:
- spool: the trial's points turned into line protocol and appended to the spool (points/s);
- ship: the spool sent to influxd in batches of 5000 (points/s);
- the runner's thread: a busy loop standing in for the runner (the socket sampler parses JSON at
  100 Hz) timed alone and while the mirror spools and ships the same trial, side by side, as a
  ratio (this machine's speed drifts; a ratio in one run does not).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

from influxd import InfluxServer  # noqa: E402  (the tests' server runner)

from longhaul.collectors.store import format as fmt  # noqa: E402
from longhaul.collectors.store.influx import points  # noqa: E402
from longhaul.collectors.store.influx.mirror import InfluxMirror, preflight  # noqa: E402
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings  # noqa: E402
from longhaul.collectors.store.influx.shipper import Shipper  # noqa: E402
from longhaul.collectors.store.influx.spool import Spool, spool_dir  # noqa: E402
from longhaul.collectors.store.records import CellEntry, FlowDecl, TrialSummary  # noqa: E402

FLOWS, HZ = 16, 100
PRODUCED_PER_S = FLOWS * HZ + FLOWS * 2 + 10      # tcp_info rows + throughput (flow, "all") + RTT rounds


def synthetic_trial(run_dir: Path, seconds: int) -> tuple[dict, CellEntry, TrialSummary]:
    manifest = {"run_id": run_dir.name, "started": "2026-11-24T00:00:00Z", "backend": "netns",
                "host": {"kernel": "bench"}}
    entry = CellEntry(id="bench-001", profile="bench", scenario="s",
                      flows=[FlowDecl(name=f"f{i}", tool="iperf3", cca="cubic", role="foreground") for i in range(FLOWS)])
    trial = TrialSummary(trial=1, status="ok", started="2026-11-24T00:00:10Z", duration_s=float(seconds))
    tdir = fmt.trial_dir(run_dir, entry.id, 1)
    tdir.mkdir(parents=True)
    with (tdir / fmt.TCPINFO_CSV).open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(fmt.TCPINFO_COLUMNS)
        for tick in range(seconds * HZ):
            for i in range(FLOWS):
                out.writerow([round(tick / HZ, 3), f"f{i}", "10.1.1.2", 40000 + i, "10.2.1.2", 5201 + i, 100 + tick % 50,
                              144800, 20.5 + (tick % 7) / 10, 1.2, tick // 100, 61.3, tick * 1448])
    with (tdir / fmt.THROUGHPUT_CSV).open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(fmt.THROUGHPUT_COLUMNS)
        for second in range(1, seconds + 1):
            for i in range(FLOWS):
                out.writerow([float(second), f"f{i}", "all", 61.5])
                out.writerow([float(second), f"f{i}", "0", 61.5])
    with (tdir / fmt.RTT_CSV).open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(fmt.RTT_COLUMNS)
        for k in range(seconds * 10):
            out.writerow([k / 10, 21.0, 1, 1, "burst"])
    return manifest, entry, trial


def busy_loop(seconds: float) -> int:
    """What the runner's thread does during a trial, roughly: parse JSON lines (the sampler)."""
    line = json.dumps({"t": 1.0, "s": [[f"10.1.1.{i}", 40000, "10.2.1.2", 5201, "cubic", 10, 1448, 3, 20500, 1200,
                                        0, 7_000_000, 1, 0, 0, 0, 0] for i in range(16)]})
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        json.loads(line)
        count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "RESULTS-telemetry.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lh-bench-influx-"))
    (work / "db").mkdir()
    server = InfluxServer(work / "db").start()
    try:
        server.create_db("longhaul")
        settings = InfluxSettings(url=server.url, database="longhaul", drain_s=600)
        run_dir = work / "runs" / "20261124-000000-bench0"
        manifest, entry, trial = synthetic_trial(run_dir, args.seconds)

        began = time.perf_counter()
        problems: list[str] = []
        spool = Spool(spool_dir(run_dir))
        spool.append(points.trial_lines(manifest, entry, trial, fmt.trial_dir(run_dir, entry.id, 1), problems))
        spool.flush()
        spool_s = time.perf_counter() - began
        lines = spool.written

        target = preflight(settings, Credential(None, "-"))
        began = time.perf_counter()
        shipper = Shipper(target, spool_dir(run_dir), settings.batch_lines)
        shipper.ship_available()
        ship_s = time.perf_counter() - began

        alone = busy_loop(5.0)
        run2 = work / "runs" / "20261124-000000-bench1"
        manifest2, entry2, trial2 = synthetic_trial(run2, args.seconds)
        manifest2["run_id"] = run2.name
        mirror = InfluxMirror(settings, Credential(None, "-"), run2)
        mirror.write_manifest(manifest2)
        began = time.perf_counter()
        mirror.record_trial(entry2, trial2)
        call_s = time.perf_counter() - began
        beside = busy_loop(5.0)
        started = time.perf_counter()
        mirror.close(600)                  # finish() without its manifest and summary re-read
        finished_s = time.perf_counter() - started
        target.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    result = {"seconds": args.seconds, "flows": FLOWS, "hz": HZ, "lines": lines, "produced_per_s": PRODUCED_PER_S,
              "spool_points_per_s": round(lines / spool_s), "ship_points_per_s": round(lines / ship_s),
              "record_trial_call_ms": round(call_s * 1000, 3),
              "runner_loop_ratio_with_mirror": round(beside / alone, 3), "mirror_tail_s": round(finished_s, 2)}
    text = f"""# InfluxDB mirror: spool and ship rates (bench/influx_spool.py)

Written by `.venv/bin/python bench/influx_spool.py --seconds {args.seconds}` on {time.strftime('%Y-%m-%d')}:
{platform.node()}, kernel {platform.release()}, 2 cores, Debian's influxd 1.6.7 on loopback.

A synthetic {args.seconds} s trial of {FLOWS} flows with tcp_info at {HZ} Hz produces about
**{PRODUCED_PER_S} points a second** ({FLOWS} x {HZ} tcp_info rows, per-second throughput per flow and
stream, 10 RTT rounds): {lines} lines with the trial's summary and documents.

| stage | points/s | x what the run produces |
|---|---|---|
| spool (line protocol via influxdb-client's Point, appended) | {result['spool_points_per_s']} | {result['spool_points_per_s'] / PRODUCED_PER_S:.1f} |
| ship (batches of 5000 to influxd on loopback) | {result['ship_points_per_s']} | {result['ship_points_per_s'] / PRODUCED_PER_S:.1f} |

The runner's thread: `record_trial` returned in {result['record_trial_call_ms']} ms (it only queues
the event for the worker process); a JSON-parsing loop standing in for the runner's sampler ran at
**{result['runner_loop_ratio_with_mirror']:.2f}x** its speed alone while the mirror spooled and shipped
the whole trial in its own niced process beside it (2 cores: influxd and the worker share the other). The mirror
then needed {result['mirror_tail_s']} s more to finish shipping.

Raw: ```{json.dumps(result)}```
"""
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
