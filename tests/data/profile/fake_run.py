"""A synthetic throughput-profile run store, in the documented format (docs/results-format.md).

Cells sweep topology.rtt_ms, flows.tcp.cca, flows.tcp.streams and tuning.buffer like the shipped
rao-throughput-profile-quick profile; numbers follow seed 001's qualitative model (section 3): a
window-limited default buffer gives a convex profile, large buffers and more streams stay near the
bottleneck rate longer, ramp-up costs more at long RTTs, and traces get noisier with RTT.
"""
from __future__ import annotations

import csv
import json
from itertools import product
from pathlib import Path

import numpy as np

RATE = 1000.0
RTTS = (0.4, 11.8, 45.6, 183.0)
CCAS = ("cubic", "bbr")
STREAMS = (1, 4)
BUFFERS = ("default", "large")
BUFFER_BYTES = {"default": 1.5e6, "normal": 256 * 2**20, "large": 2**30}
DURATION = 10


def mean_rate(cca: str, streams: int, buffer: str, rtt: float) -> float:
    window = streams * BUFFER_BYTES[buffer] * 8 / (rtt / 1e3) / 1e6
    penalty = (0.5 if cca == "cubic" else 0.25) * (rtt / 183.0) ** 1.5 / np.sqrt(streams)
    sustained = min(0.95 * RATE, window) * (1 - min(penalty, 0.8))
    ramp = min(0.9, rtt / 1e3 * 12 / DURATION)  # f_R: ~12 RTTs of slow start
    return sustained * (1 - ramp / 2)


def trace(rate: float, streams: int, rtt: float, rng) -> np.ndarray:
    """Per-stream 1 s rates (streams x DURATION) whose aggregate averages to `rate`."""
    t = np.arange(1, DURATION + 1)
    shape = 1 - np.exp(-t / max(0.3, rtt / 40))
    noise = rng.normal(0, 0.02 + 0.1 * rtt / 183, (streams, t.size))
    share = rng.dirichlet(np.full(streams, 8.0))[:, None]
    per = np.clip(share * shape * (1 + noise), 0, None)
    return per * rate * t.size / per.sum()


def make_run(root: Path, *, buffer_swept: bool = True, failed: bool = True, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    run_id = "20261122-120000-abcdef"
    run_dir = Path(root) / run_id
    run_dir.mkdir(parents=True)
    cells, declared = [], []
    buffers = BUFFERS if buffer_swept else ("normal",)
    for k, (rtt, cca, streams, buffer) in enumerate(product(RTTS, CCAS, STREAMS, buffers)):
        cid = f"rao-quick-{k + 1:03d}"
        params = {"scenario": "base", "topology.rtt_ms": rtt, "flows.tcp.cca": cca, "flows.tcp.streams": streams}
        if buffer_swept:
            params["tuning.buffer"] = buffer
        trials = [_trial(run_dir / "cells" / cid, j, cca, streams, buffer, rtt, rng,
                         fail=failed and k == 0 and j == 2) for j in (1, 2)]
        flows = [{"name": "tcp", "role": "foreground", "tool": "iperf3", "protocol": "tcp", "cca": cca,
                  "pair": 1, "streams": streams, "pattern": "constant"}]
        cells.append({"id": cid, "profile": "rao-quick", "scenario": "base", "params": params,
                      "topology": {"pairs": 1, "access_rate_mbps": 10000.0, "bottleneck_rate_mbps": RATE,
                                   "rtt_ms": rtt, "queue_bytes": int(RATE * 1e6 / 8 * rtt / 1e3), "mtu": 1500},
                      "labels": {}, "reference": None, "lab": None, "flows": flows, "trials": trials})
        declared.append({"id": cid, "profile": "rao-quick", "scenario": "base", "params": params,
                         "cell": {"topology": {"rtt_ms": rtt}, "tuning": {"cca": "cubic", "buffer": buffer},
                                  "flows": [{"name": "tcp", "cca": cca, "streams": streams, "buffer": None}]}})
    manifest = {"format": "longhaul-run", "version": 1, "run_id": run_id, "status": "complete",
                "started": "2026-11-22T12:00:00Z", "finished": "2026-11-22T12:09:00Z",
                "host": {"hostname": "lab", "kernel": "6.1", "os": "Debian 12"},
                "features": {"congestion_controls": list(CCAS)}, "profiles": {}, "cells": declared}
    _json(run_dir / "manifest.json", manifest)
    _json(run_dir / "summary.json", {"format": "longhaul-summary", "version": 1, "run_id": run_id,
                                     "status": "complete", "cells": cells})
    return run_dir


def _trial(cell_dir: Path, k: int, cca, streams, buffer, rtt, rng, fail: bool) -> dict:
    if fail:
        return {"trial": k, "status": "failed", "error": "iperf3 exited 1", "flows": []}
    rate = mean_rate(cca, streams, buffer, rtt) * rng.normal(1, 0.02)
    per = trace(rate, streams, rtt, rng)
    trial_dir = cell_dir / f"trial-{k}"
    trial_dir.mkdir(parents=True)
    with (trial_dir / "throughput.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("t_s", "flow", "stream", "mbps"))
        for i in range(DURATION):
            w.writerow((f"{i + 1.001:.3f}", "tcp", "all", f"{per[:, i].sum():.3f}"))
            for s in range(streams):
                w.writerow((f"{i + 1.001:.3f}", "tcp", s, f"{per[s, i]:.3f}"))
    mean = float(per.sum(axis=0).mean())
    return {"trial": k, "status": "ok", "error": None, "duration_s": DURATION + 0.3,
            "flows": [{"name": "tcp", "role": "foreground", "tool": "iperf3", "protocol": "tcp", "cca": cca,
                       "pair": 1, "streams": streams, "mean_mbps": round(mean, 3)}], "jain": None, "rtt": None}


def _json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1))
