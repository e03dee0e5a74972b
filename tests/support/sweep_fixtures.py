"""A synthetic sweep store the size of seed 001's (3 congestion controls x 10 stream counts x 3
buffers x 7 RTTs = 630 cells, 10 trials each), in the documented format, for the report's and the
console's scale: one foreground flow per cell, its per-second throughput and probe RTT. The rate
follows section 3's shape (window-limited at long RTTs, more streams recover more), which is all
a heat map needs to show structure. Fixed seed; `axes` and `trials` shrink it for tests."""
from __future__ import annotations

from itertools import product
from pathlib import Path

import numpy as np
import report_fixtures as rf

SEED_001_AXES = {"flows.fg.cca": ("cubic", "htcp", "scalable"), "flows.fg.streams": tuple(range(1, 11)),
                 "tuning.buffer": ("default", "normal", "large"),
                 "topology.rtt_ms": (0.4, 11.8, 22.6, 45.6, 91.6, 183.0, 366.0)}
BUFFER_BYTES = {"default": 250e3, "normal": 256e6, "large": 1e9}
CAPACITY = 10_000.0
SECONDS = 20


def make_sweep_store(root: Path, axes: dict = SEED_001_AXES, trials: int = 10, seconds: int = SECONDS) -> Path:
    rng = np.random.default_rng(20170626)
    run_id = "20261127-120000-5eed01"
    run_dir = Path(root) / run_id
    run_dir.mkdir(parents=True)
    keys = list(axes)
    cells = [_cell(run_dir, k, dict(zip(keys, values)), trials, seconds, rng)
             for k, values in enumerate(product(*axes.values()))]
    manifest = rf._manifest(run_id, "complete", cells)
    manifest["profiles"] = {"seed001": {"path": "profiles/seed001.toml", "source": "",
                                        "description": "Seed 001 throughput profiles (synthetic)"}}
    rf._write_json(run_dir / "manifest.json", manifest)
    rf._write_json(run_dir / "summary.json", {"format": "longhaul-summary", "version": 1, "run_id": run_id,
                                              "status": "complete", "cells": cells})
    return run_dir


def _rate(params: dict) -> float:
    rtt = params.get("topology.rtt_ms", 45.6)
    streams = params.get("flows.fg.streams", 1)
    window = streams * BUFFER_BYTES[params.get("tuning.buffer", "large")] * 8 / (rtt / 1e3) / 1e6
    loss = {"cubic": 0.5, "htcp": 0.35, "scalable": 0.25}[params.get("flows.fg.cca", "cubic")]
    return min(0.95 * CAPACITY, window) * (1 - min(loss * (rtt / 366.0) ** 1.3 / np.sqrt(streams), 0.9))


def _cell(run_dir: Path, k: int, params: dict, trials: int, seconds: int, rng) -> dict:
    cell_id = f"seed001-{k:03d}"
    cell_dir = run_dir / "cells" / cell_id
    cell_dir.mkdir(parents=True)
    rtt_ms = params.get("topology.rtt_ms", 45.6)
    flow = {**rf.FG, "cca": params.get("flows.fg.cca", "cubic"), "streams": params.get("flows.fg.streams", 1)}
    lab = {"ok": True, "rtt_ms": {"configured": rtt_ms, "measured": round(rtt_ms + rng.uniform(0, 0.2), 2)},
           "rate_mbps": {"configured": CAPACITY, "measured": round(CAPACITY * rng.uniform(0.985, 0.999), 1)},
           "queue_bytes": {"configured": 100_000_000}}
    rf._write_json(cell_dir / "verification.json", lab)
    sustained = _rate(params)
    t = np.arange(1, seconds + 1, dtype=float)
    done = []
    for n in range(1, trials + 1):
        trial_dir = cell_dir / f"trial-{n}"
        trial_dir.mkdir()
        rate = np.clip(sustained * (1 - np.exp(-t / 2)) * (1 + rng.normal(0, 0.03, t.size)), 0, CAPACITY)
        rf._write_throughput(trial_dir, t, [flow], {"fg": rate}, cutoff=None)
        rtt_t = t - 0.5
        rtt = rtt_ms + np.abs(rng.normal(2 + rtt_ms * 0.05, 1, t.size))
        rf._write_rtt(trial_dir, rtt_t, rtt)
        trial = {"trial": n, "status": "ok", "started": "2026-11-27T12:00:00Z", "duration_s": seconds + 0.2,
                 "error": None, "flows": [rf._flow_result(flow, t, rate)], "jain": None,
                 "rtt": rf._rtt_summary(rtt_ms, rtt)}
        rf._write_json(trial_dir / "trial.json", trial)
        done.append(trial)
    return {"id": cell_id, "profile": "seed001", "scenario": "profile", "params": params, "status": "complete",
            "topology": {"pairs": 1, "access_rate_mbps": 40_000.0, "bottleneck_rate_mbps": CAPACITY,
                         "rtt_ms": rtt_ms, "queue_bytes": 100_000_000, "mtu": 9000},
            "labels": None, "reference": None, "lab": lab, "flows": [flow], "trials": done,
            "stats": rf._stats(done)}
