"""How close one CUBIC flow gets to the bottleneck's payload ceiling at paper scale (issue 16
item 2), and where this machine's cycles go: each rate at 20 and 128 ms through the delay line,
beside the same path with no delay (the machine's own limit), in one sitting.

One `longhaul run` per cell (one CUBIC flow, FLOW_S s, 1-BDP queue (the no-delay path: the 20 ms
BDP), `large` buffers, access 20 Gb/s; the verification measures the idle RTT and the shaper's rate
but refuses nothing: this measures the path, not the check);
while it runs the bench reads /proc (read only): the machine's user, system and softirq time and
the CPU of the delay-line and iperf3 processes.

    sudo .venv/bin/python bench/rate_ceiling.py            # ~8 minutes; writes bench/RESULTS-rate-ceiling.md
    sudo .venv/bin/python bench/rate_ceiling.py 10000      # one rate only
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "RESULTS-rate-ceiling.md"
RATES = (1000, 2500, 5000, 10000)
RTTS = (0, 20, 128)
FLOW_S = 25
STEADY_FROM_S = 10      # after slow start and its recovery, even at 10 Gb/s and 128 ms
MTU = 1500
CEILING = (MTU - 52) / (MTU + 14)
INITIAL_WINDOW = 10     # segments: Linux's initial congestion window (RFC 6928)


def slow_start_fraction(rate_mbps: float, rtt_ms: float, flow_s: float, iw: int = INITIAL_WINDOW) -> float:
    """The share of the payload ceiling one TCP flow can carry in flow_s on an ideal path: slow start
    from iw segments doubles what it delivers each round trip (iw, 2 iw, 4 iw, ...) until a round
    carries the path's BDP, and every round after carries the BDP; no loss, no recovery. A measured
    flow may pass it by a little: iperf3's receiver also counts what was in flight when the sender's
    timer ended (up to a BDP and a queue, 1 % of 25 s at 128 ms)."""
    if rtt_ms <= 0:
        return 1.0
    bdp = rate_mbps * 1e6 * rtt_ms / 1e3 / 8 / (MTU + 14)      # packets in flight at the ceiling
    rounds = flow_s * 1e3 / rtt_ms
    delivered, k = 0.0, 0
    while k < rounds and iw * 2 ** k < bdp:
        delivered += iw * 2 ** k
        k += 1
    delivered += (rounds - k) * bdp
    return delivered / (rounds * bdp)
WATCHED = {"longhaul-delayl": "delay line", "iperf3": "iperf3"}
TICK = os.sysconf("SC_CLK_TCK")


def profile(rate: int, rtt: int) -> str:
    queue = int(rate * 1e6 / 8 * max(rtt, 20) / 1e3)      # 1 BDP; the no-delay path gets the 20 ms one
    return f"""
[profile]
description = "rate ceiling {rate} Mb/s, {rtt} ms"
repeats = 1
[topology]
pairs = 1
access_rate_mbps = 20000
bottleneck_rate_mbps = {rate}
rtt_ms = {rtt}
queue = "{queue}B"
mtu = {MTU}
[tuning]
buffer = "large"
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = {FLOW_S}
"""


def _machine() -> list[int]:
    """user, system, softirq jiffies of the whole machine."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return [user + nice, system + irq, softirq]


def _watched() -> dict[int, tuple[str, float]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm in WATCHED:
            rest = stat.rsplit(")", 1)[1].split()
            out[int(entry.name)] = (WATCHED[comm], (int(rest[11]) + int(rest[12])) / TICK)
    return out


def cell(rate: int, rtt: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="lh-ceiling-"))
    (work / "profiles").mkdir()
    (work / "profiles" / "c.toml").write_text(profile(rate, rtt))
    (work / "config.toml").write_text('[store]\ndir = "runs"\n[run]\nprofiles = ["c"]\n[report]\nformats = []\n'
                                      '[verify]\nattempts = 1\nrtt_tolerance_ms = 1000\nrate_tolerance_pct = 100\n')
    seen: dict[int, tuple[str, float]] = {}
    done = threading.Event()

    def watch():
        while not done.wait(0.5):
            seen.update(_watched())

    before = _machine()
    watcher = threading.Thread(target=watch, daemon=True)
    start = time.monotonic()
    watcher.start()
    res = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(work / "config.toml")],
                         cwd=work, capture_output=True, text=True, timeout=600)
    done.set()
    watcher.join()
    wall = time.monotonic() - start
    after = _machine()
    if res.returncode != 0:
        return {"rate_mbps": rate, "rtt_ms": rtt, "error": res.stderr[-500:]}
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    stored = json.loads((run_dir / "summary.json").read_text())["cells"][0]
    trial, lab = stored["trials"][0], stored["lab"]
    flow = trial["flows"][0]
    cpu = {name: round(sum(s for n, s in seen.values() if n == name) / wall * 100, 1) for name in WATCHED.values()}
    with open(run_dir / "cells" / stored["id"] / "trial-1" / "throughput.csv") as fh:
        steady = [float(r["mbps"]) for r in csv.DictReader(fh)
                  if r["stream"] == "all" and STEADY_FROM_S <= float(r["t_s"]) <= FLOW_S and float(r["t_s"]).is_integer()]
    jiffies = [(b - a) / TICK / wall * 100 for a, b in zip(before, after)]
    return {"rate_mbps": rate, "rtt_ms": rtt, "goodput_mbps": round(flow["mean_mbps"], 1),
            "fraction_of_ceiling": round(flow["mean_mbps"] / (rate * CEILING), 3),
            "slow_start_fraction": round(slow_start_fraction(rate, rtt, FLOW_S), 3),
            "steady_fraction": round(sum(steady) / len(steady) / (rate * CEILING), 3) if steady else None,
            "retransmits": flow["retransmits"], "idle_rtt_ms": _round(lab["rtt_ms"]["measured"], 3),
            "shaper_mbps": lab["rate_mbps"]["measured"],
            "rtt_median_ms": _round(trial["rtt"]["median_ms"], 2),
            "seconds_above_ceiling": trial["collector"].get("seconds_above_ceiling"),
            "cpu_percent": {"user": round(jiffies[0], 1), "system": round(jiffies[1], 1),
                            "softirq": round(jiffies[2], 1), **cpu},
            "run_dir": str(run_dir)}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def write(rows: list[dict]) -> str:
    lines = ["# Rate ceiling: one CUBIC flow against the bottleneck's payload ceiling", "",
             f"Written by `bench/rate_ceiling.py` on {time.strftime('%Y-%m-%d', time.gmtime())} ({os.cpu_count()} "
             f"cores): one CUBIC flow, {FLOW_S} s, 1-BDP queue, `large` buffers, access 20 Gb/s; goodput against "
             f"the payload ceiling rate x {MTU - 52}/{MTU + 14}. RTT 0 is the same path with no delay line (its "
             "queue the 20 ms BDP): the machine's own limit. CPU is % of one core over the run (the machine's "
             "user/system/softirq over both cores; the delay line's and iperf3's processes).", "",
             f"'from {STEADY_FROM_S} s' is the mean of the seconds after slow start and its recovery. 'TCP's "
             f"limit' is what an ideal slow start from {INITIAL_WINDOW} segments can carry in {FLOW_S} s "
             "(bench/rate_ceiling.py: slow_start_fraction): it doubles each round trip until a round carries "
             "the BDP, so a flow spends log2(BDP / 10) round trips, 14 at 10 Gb/s and 128 ms (1.8 s), well "
             "below the ceiling, on any path. A whole flow's 'of ceiling' is to be compared with it (iperf3's "
             "receiver also counts what was in flight at the sender's last second, so it may pass it by a "
             "little); the lab's own shortfall is what it falls short of it.", "",
             f"| bottleneck | RTT | idle RTT ms | shaper Mb/s | goodput Mb/s | of ceiling | TCP's limit | "
             f"from {STEADY_FROM_S} s | retransmits | seconds above ceiling | user | system | softirq | delay line | "
             "iperf3 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['rate_mbps']} | {r['rtt_ms']} ms | failed: {r['error'][-120:]!r} |||||||||||||")
            continue
        c = r["cpu_percent"]
        lines.append(f"| {r['rate_mbps']} Mb/s | {r['rtt_ms']} ms | {r['idle_rtt_ms']} | {r['shaper_mbps']} | "
                     f"{r['goodput_mbps']} | {r['fraction_of_ceiling']} | "
                     f"{r['slow_start_fraction']} | "
                     f"{r['steady_fraction']} | "
                     f"{r['retransmits']} | {r['seconds_above_ceiling']} | {c['user']} | {c['system']} | "
                     f"{c['softirq']} | {c['delay line']} | {c['iperf3']} |")
    lines += ["", "The idle RTT is verification's: 3 rounds of 10 ICMP echoes timed to the microsecond "
              "(bench/RESULTS-idle-rtt.md has it at every RTT).", "",
              "Raw: ```" + json.dumps(rows) + "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    rates = [int(a) for a in sys.argv[1:]] or list(RATES)
    results = [cell(rate, rtt) for rate in rates for rtt in RTTS]
    OUT.write_text(write(results))
    print(OUT.read_text())
