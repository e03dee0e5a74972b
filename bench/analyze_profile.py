"""Time `longhaul analyze profile` on a sweep the size of seed 001's: 6,300 trials, 100 s traces.

3 variants x 10 stream counts x 3 buffers x 7 RTTs x 10 repeats, each trial with a 100 s trace per
stream and aggregate in its own throughput.csv (as the run store keeps them), listed in one CSV of
trials. The generator follows section 3's model at the paper's 10 Gb/s: sustained throughput
limited by the window (streams x buffer / RTT) and by losses that grow with the RTT and shrink with
more streams, a slow-start ramp that lasts longer at long RTTs, AR(1) fluctuations that grow with
the RTT, per-stream shares that wander. Fixed seed: the same data every time.

Timed: the whole analysis the command runs (reading the table and every trace, profiles, box
statistics, sigmoid fits, Poincare/Lyapunov for every trace, the JSON), wall and CPU time.
Writes bench/RESULTS-analysis.md. No root needed; generation takes about a minute.

    .venv/bin/python bench/analyze_profile.py
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

import numpy as np
import scipy

from longhaul.appliance.cli.analyze import analyze_profile

OUT = Path(__file__).resolve().parent / "RESULTS-analysis.md"
CAPACITY = 10_000.0                       # Mb/s, seed 001's 10GigE
RTTS = (0.4, 11.8, 22.6, 45.6, 91.6, 183.0, 366.0)
CCAS = {"reno": 0.7, "cubic": 0.5, "bbr": 0.25}     # loss sensitivity of the sustained rate
BUFFERS = {"default": 250e3, "normal": 250e6, "large": 1e9}   # bytes allocated (section 2.1)
STREAMS = range(1, 11)
REPEATS = 10
DURATION = 100
SEED = 20170626                           # HPDC'17


def trial_trace(rng, cca: str, streams: int, buffer: str, rtt: float) -> np.ndarray:
    """Per-stream rates (streams x DURATION, Mb/s) of one trial."""
    window = streams * BUFFERS[buffer] * 8 / (rtt / 1e3) / 1e6
    loss = CCAS[cca] * (rtt / 366.0) ** 1.3 / np.sqrt(streams)
    sustained = min(0.95 * CAPACITY, window) * (1 - min(loss, 0.9))
    packets = max(2.0, min(CAPACITY, window) * 1e6 / 8 * rtt / 1e3 / 1448)
    ramp_s = max(rtt / 1e3 * np.log2(packets / 10), 1e-3)            # slow start: log2(BDP) RTTs
    t = np.arange(1, DURATION + 1, dtype=float)
    shape = 2.0 ** np.minimum((t - ramp_s) / max(ramp_s / 4, 0.05), 0.0)  # doubling up to the peak
    sigma = 0.02 + 0.3 * (rtt / 366.0) / np.sqrt(streams)
    noise = np.zeros(DURATION)
    shocks = rng.normal(0, sigma, DURATION)
    for i in range(1, DURATION):                                      # AR(1): losses recover slowly
        noise[i] = 0.7 * noise[i - 1] + shocks[i]
    aggregate = np.clip(sustained * shape * (1 + noise), 0, CAPACITY)
    shares = rng.dirichlet(np.full(streams, 6.0), DURATION).T         # streams x seconds
    return aggregate * shares


def generate(root: Path) -> Path:
    rng = np.random.default_rng(SEED)
    rows = ["cca,streams,buffer,rtt_ms,repeat,mbps,trace,capacity_mbps"]
    (root / "traces").mkdir()
    for k, (cca, n, buffer, rtt, rep) in enumerate(product(CCAS, STREAMS, BUFFERS, RTTS, range(1, REPEATS + 1))):
        per = trial_trace(rng, cca, n, buffer, rtt)
        agg = per.sum(axis=0)
        name = f"traces/{k:05d}.csv"
        lines = ["t_s,stream,mbps"]
        for i in range(DURATION):
            lines.append(f"{i + 1},all,{agg[i]:.3f}")
            lines.extend(f"{i + 1},{s},{per[s, i]:.3f}" for s in range(n))
        (root / name).write_text("\n".join(lines) + "\n")
        rows.append(f"{cca},{n},{buffer},{rtt},{rep},{agg.mean():.3f},{name},{CAPACITY:g}")
    path = root / "trials.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def phase_times(csv_path: Path) -> dict:
    """The same analysis again, step by step, to show where the time goes."""
    from longhaul.collectors.studies.throughput_profile.analysis import build_profiles, capacity_of, load_trials
    from longhaul.collectors.studies.throughput_profile.dynamics import analyse_traces
    from longhaul.collectors.studies.throughput_profile.transition_rtt import fit_profiles

    out, t = {}, time.perf_counter()

    def lap(name):
        nonlocal t
        now = time.perf_counter()
        out[name] = round(now - t, 2)
        t = now

    trials = load_trials(csv_path)
    lap("read table")
    profiles = build_profiles(trials)
    lap("profiles")
    fit_profiles(profiles, capacity_of(trials, profiles))
    lap("sigmoid fits")
    analyse_traces(trials)
    lap("traces: read + Poincare/Lyapunov")
    return out


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return {"cpu": model, "nproc": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "loadavg_1min_before": round(load[0], 2)}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="lh-bench-analysis-") as tmp:
        t0 = time.perf_counter()
        csv_path = generate(Path(tmp))
        gen_s = time.perf_counter() - t0
        rows = sum(1 for p in (Path(tmp) / "traces").iterdir() for _ in p.open()) - 6300
        info = machine()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = analyze_profile(csv_path)
        text = json.dumps(result)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        phases = phase_times(csv_path)
    summary = {"trials": result["trials"], "traces": result["dynamics"]["traces"], "trace_rows": rows,
               "profiles": len(result["profiles"]), "fits": len(result["transitions"]),
               "json_bytes": len(text), "generate_s": round(gen_s, 1), "analyze_wall_s": round(wall, 1),
               "analyze_cpu_s": round(cpu, 1), "phases_s": phases, "spearman": result["dynamics"]["throughput_vs_exponent"]["spearman"],
               "machine": info, "date": dt.date.today().isoformat()}
    write_results(summary, result)
    print(json.dumps(summary, indent=1))
    return 0


def write_results(s: dict, result: dict) -> None:
    m = s["machine"]
    kinds = {}
    for f in result["transitions"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    OUT.write_text(f"""# Benchmark: analysing a seed-001-sized throughput-profile sweep

Written by `bench/analyze_profile.py` on {s['date']}.

**{s['analyze_wall_s']} s wall ({s['analyze_cpu_s']} s CPU, one process) to analyse {s['trials']:,} trials
with 100 s traces** ({s['trace_rows']:,} trace rows in {s['traces']:,} files): reading the table and every
trace, {s['profiles']} profiles with box statistics, {s['fits']} sigmoid-pair fits (transition RTT), Poincaré/Lyapunov
estimates for every aggregate and per-stream trace, and the JSON that `longhaul analyze profile --json`
prints ({s['json_bytes'] / 1e6:.1f} MB). This is the size of seed 001's full sweep (3 variants x 10 stream counts
x 3 buffers x 7 RTTs x 10 repeats) and of the shipped `rao-throughput-profile`.

Where the time goes (a second, step-by-step pass): {', '.join(f'{k} {v} s' for k, v in s['phases_s'].items())}.

Machine: {m['cpu']}, {m['nproc']} cores (shared with a running lab experiment: the 1-minute load
average was {m['loadavg_1min_before']} before the timed run, so wall time is pessimistic), kernel {m['kernel']},
Python {m['python']}, numpy {m['numpy']}, scipy {m['scipy']}.

Data: synthetic, from the generator in the script (seed {SEED}): section 3's model at 10 Gb/s
(window-limited and loss-limited sustained rate, slow-start ramp, AR(1) fluctuations growing with
RTT, wandering per-stream shares). Generating and writing it took {s['generate_s']} s (not timed).
Transition kinds found: {', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}; Spearman rank correlation of
trace throughput and Lyapunov exponent: {s['spearman']:+.2f}.

Rerun: `.venv/bin/python bench/analyze_profile.py` (about {max(1, round((s['generate_s'] + s['analyze_wall_s']) / 60))} minutes here).

Raw: ```{json.dumps(s)}```
""")


if __name__ == "__main__":
    sys.exit(main())
