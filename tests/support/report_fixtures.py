"""A small synthetic run store, written exactly in the documented format (docs/results-format.md).

The cells mimic seed 000's Table 2 (Overlay-1): a foreground iperf TCP flow alone, then sharing the
bottleneck with a TCP and with a UDT background flow that starts 10 s later. Numbers are shaped so
that our means land near, but not on, the paper's, which is what a real reproduction looks like.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

DURATION_S = 60
BG_START_S = 10.0
IDLE_RTT_MS = 128.0
RATE_MBPS = 500.0
MSS = 1448

FG = {"name": "fg", "role": "foreground", "tool": "iperf3", "protocol": "tcp", "cca": "cubic",
      "pair": 1, "streams": 1, "pattern": "continuous"}
BG_IPERF = {"name": "bg", "role": "background", "tool": "iperf3", "protocol": "tcp", "cca": "cubic",
            "pair": 2, "streams": 1, "pattern": "continuous"}
BG_UDT = {"name": "bg", "role": "background", "tool": "udt", "protocol": "udp", "cca": None,
          "pair": 2, "streams": 1, "pattern": "continuous"}
BG_GFTP = {"name": "bg", "role": "background", "tool": "globus-url-copy", "protocol": "tcp",
           "cca": "cubic", "pair": 2, "streams": 16, "pattern": "continuous"}

# (id, scenario, column, mode, flows, steady-state Mb/s per flow once both run, queueing ms, reference)
CELLS = [
    ("table2-000", "fg-alone", "no_bg", "dedicated", [FG], {"fg": 470.0}, 25.0,
     {"fg": 474}),
    ("table2-001", "vs-iperf", "bg_iperf", "shared", [FG, BG_IPERF], {"fg": 215.0, "bg": 245.0}, 40.0,
     {"fg": 253, "bg": 238, "jain": 1.0}),
    ("table2-002", "vs-udt", "bg_udt", "shared", [FG, BG_UDT], {"fg": 22.0, "bg": 410.0}, 70.0,
     {"fg": 85.3, "bg": 398, "jain": 0.7}),
]
# Only in partial stores: declared in the sweep but the run stopped before it started.
NEVER_RUN = ("table2-003", "vs-gftp16", "bg_gftp16", "shared", [FG, BG_GFTP], {}, 0.0,
             {"fg": 75.6, "bg": 415, "jain": 0.68})


def make_store(tmp_path: Path, *, partial: bool = False) -> Path:
    """Write a run directory under tmp_path and return it.

    partial=True gives an interrupted run: one failed trial without time series, one interrupted
    trial with a truncated throughput.csv and no rtt.csv, and a cell that never ran.
    """
    rng = np.random.default_rng(20240611)
    run_id = "20240611-101500-a1b2c3"
    run_dir = Path(tmp_path) / run_id
    run_dir.mkdir(parents=True)
    status = "interrupted" if partial else "complete"
    specs = CELLS + ([NEVER_RUN] if partial else [])
    cells = [_write_cell(run_dir, spec, rng, partial) for spec in specs]
    _write_json(run_dir / "manifest.json", _manifest(run_id, status, cells))
    _write_json(run_dir / "summary.json", {"format": "longhaul-summary", "version": 1,
                                           "run_id": run_id, "status": status, "cells": cells})
    (run_dir / "run.log").write_text(f"{run_id} started\n{run_id} {status}\n")
    return run_dir


def _manifest(run_id: str, status: str, cells: list[dict]) -> dict:
    return {
        "format": "longhaul-run", "version": 1, "run_id": run_id,
        "started": "2024-06-11T10:15:00Z",
        "finished": None if status == "interrupted" else "2024-06-11T10:27:41Z",
        "status": status,
        "longhaul": {"version": "0.1.0", "git_revision": "3f2a9c1d8e7b", "git_dirty": False},
        "host": {"hostname": "lab-ctl", "kernel": "6.1.0-21-amd64", "os": "Debian GNU/Linux 12"},
        "backend": "netns",
        "features": {"netem": True, "tbf": True, "htb": True, "nfqueue": False,
                     "congestion_controls": ["reno", "cubic", "bbr"], "delay": "netem"},
        "tools": {"iperf3": "3.12", "fping": "5.1", "udt": "4.11", "globus-url-copy": "10.11"},
        "config": {"run": {"profiles": ["fixture"]}}, "config_path": "config.toml",
        "profiles": {"table2": {"path": "profiles/table2.toml", "source": "[topology]\nrtt_ms = 128\n",
                                "description": "Seed 000 Table 2, Overlay-1"}},
        "cells": [{"id": c["id"], "profile": c["profile"], "scenario": c["scenario"],
                   "params": c["params"]} for c in cells],
    }


def _write_cell(run_dir: Path, spec: tuple, rng: np.random.Generator, partial: bool) -> dict:
    cell_id, scenario, column, mode, flows, shares, queue_ms, ref = spec
    cell_dir = run_dir / "cells" / cell_id
    cell_dir.mkdir(parents=True)
    lab = {"ok": True, "tolerance": {"rtt_ms": 2.0, "rate_percent": 2.0},
           "rtt_ms": {"configured": IDLE_RTT_MS, "measured": round(IDLE_RTT_MS + rng.uniform(0, 0.6), 2)},
           "rate_mbps": {"configured": RATE_MBPS, "measured": round(RATE_MBPS - rng.uniform(1, 4), 1)},
           "queue_bytes": {"configured": 6_000_000}}
    if spec is NEVER_RUN:
        lab = None  # the run stopped before this cell's lab was built
    else:
        _write_json(cell_dir / "verification.json", lab)
    n_trials = 0 if spec is NEVER_RUN else 3
    trials = [_write_trial(cell_dir, k, flows, shares, queue_ms, rng, _fate(partial, cell_id, k))
              for k in range(1, n_trials + 1)]
    trials = [t for t in trials if t is not None]
    return {
        "id": cell_id, "profile": "table2", "scenario": scenario,
        "params": {"topology.rtt_ms": 128, "flows.bg.tool": flows[-1]["tool"] if len(flows) > 1 else None},
        "topology": {"pairs": 2, "access_rate_mbps": 1000.0, "bottleneck_rate_mbps": RATE_MBPS,
                     "rtt_ms": IDLE_RTT_MS, "queue_bytes": 6_000_000, "mtu": 1500},
        "labels": {"column": column, "mode": mode},
        "reference": {"source": "Table 2", "values": ref},
        "lab": lab, "flows": flows, "trials": trials, "stats": _stats(trials),
    }


def _fate(partial: bool, cell_id: str, k: int) -> str:
    """How a trial ends; only partial stores have failures."""
    if not partial:
        return "ok"
    return {("table2-001", 2): "failed", ("table2-002", 2): "interrupted",
            ("table2-002", 3): "absent"}.get((cell_id, k), "ok")


def _write_trial(cell_dir: Path, k: int, flows: list[dict], shares: dict, queue_ms: float,
                 rng: np.random.Generator, fate: str) -> dict | None:
    if fate == "absent":
        return None
    trial_dir = cell_dir / f"trial-{k}"
    (trial_dir / "raw").mkdir(parents=True)
    started = f"2024-06-11T10:{15 + k:02d}:05Z"
    if fate == "failed":
        trial = {"trial": k, "status": "failed", "started": started, "duration_s": 1.3,
                 "error": "iperf3 client exited with status 1: unable to connect to server",
                 "flows": [], "jain": None, "rtt": None}
        _write_json(trial_dir / "trial.json", trial)
        return trial
    t = np.arange(1, DURATION_S + 1, dtype=float)
    rates = _flow_rates(t, flows, shares, rng)
    rtt_t, rtt = _rtt_series(len(flows), queue_ms, rng)
    idle = IDLE_RTT_MS + rng.uniform(0.0, 0.5)
    _write_throughput(trial_dir, t, flows, rates, cutoff=23 if fate == "interrupted" else None)
    if fate != "interrupted":
        _write_rtt(trial_dir, rtt_t, rtt)
    _write_tcpinfo(trial_dir, flows, rates, rtt_t, rtt, rng)
    _write_events(trial_dir, flows, rng)
    trial = {"trial": k, "status": fate, "started": started,
             "duration_s": 23.4 if fate == "interrupted" else DURATION_S + 0.2,
             "error": "interrupted by SIGINT" if fate == "interrupted" else None,
             "flows": [_flow_result(f, t, rates[f["name"]]) for f in flows],
             "jain": _jain([rates[f["name"]][_on(t, f)].mean() for f in flows]),
             "rtt": _rtt_summary(idle, rtt)}
    _write_json(trial_dir / "trial.json", trial)
    return trial


def _on(t: np.ndarray, flow: dict) -> np.ndarray:
    """Seconds a flow was on: background flows start BG_START_S late, as in seed 000 section 6.5."""
    return t > BG_START_S if flow["role"] == "background" else t > 0


def _flow_rates(t: np.ndarray, flows: list[dict], shares: dict, rng) -> dict[str, np.ndarray]:
    alone = shares["fg"] if len(flows) == 1 else 470.0
    out = {}
    for f in flows:
        ramp = 1 - np.exp(-(t - (BG_START_S if f["role"] == "background" else 0)) / 1.5)
        if f["role"] == "foreground":
            # Alone until the background joins, then converging to its share within a few seconds.
            after = np.where(t > BG_START_S, np.exp(-(t - BG_START_S) / 3.0), 1.0)
            target = shares["fg"] + (alone - shares["fg"]) * after
        else:
            target = shares[f["name"]] * np.ones_like(t)
        r = target * np.clip(ramp, 0, 1) + rng.normal(0, 0.02 * target.mean(), t.size)
        out[f["name"]] = np.where(_on(t, f), np.clip(r, 0, None), 0.0)
    return out


def _rtt_series(n_flows: int, queue_ms: float, rng) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(0.5, DURATION_S, 1.0)
    # CUBIC keeps the queue oscillating: a sawtooth of queueing delay on top of the path RTT.
    saw = queue_ms * (0.5 + 0.5 * ((t / 7.0) % 1.0))
    joined = np.where(t > BG_START_S, 1.0, 0.6) if n_flows > 1 else 1.0
    return t, IDLE_RTT_MS + saw * joined + rng.normal(0, 1.5, t.size).clip(-1.5, None)


def _rtt_summary(idle: float, rtt: np.ndarray) -> dict:
    med, p95, mx = (float(np.median(rtt)), float(np.percentile(rtt, 95)), float(rtt.max()))
    return {"idle_ms": round(idle, 2), "median_ms": round(med, 2), "p95_ms": round(p95, 2),
            "max_ms": round(mx, 2), "inflation_median_ms": round(med - idle, 2),
            "inflation_p95_ms": round(p95 - idle, 2), "inflation_max_ms": round(mx - idle, 2)}


def _flow_result(flow: dict, t: np.ndarray, rate: np.ndarray) -> dict:
    on = _on(t, flow)
    mean = float(rate[on].mean())
    lost = None if flow["protocol"] == "tcp" else 0.4
    keys = ("name", "role", "tool", "protocol", "cca", "pair", "streams")
    return {**{k: flow[k] for k in keys}, "mean_mbps": round(mean, 2), "span_mean_mbps": round(mean, 2),
            "bytes": mean * 1e6 / 8 * on.sum(), "on_s": float(on.sum()),
            "retransmits": 120 if flow["protocol"] == "tcp" else None, "lost_percent": lost}


def _jain(x: list[float]) -> float | None:
    if len(x) < 2:
        return None
    x = np.asarray(x)
    return round(float(x.sum() ** 2 / (len(x) * (x ** 2).sum())), 4)


def _stats(trials: list[dict]) -> dict:
    ok = [t for t in trials if t["status"] == "ok"]
    flows: dict[str, list[float]] = {}
    for t in ok:
        for f in t["flows"]:
            flows.setdefault(f["name"], []).append(f["mean_mbps"])
    jains = [t["jain"] for t in ok if t["jain"] is not None]
    std = lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0  # noqa: E731
    return {"flows": {n: {"mean_mbps": float(np.mean(v)), "std_mbps": std(v), "n": len(v)}
                      for n, v in flows.items()},
            "jain": {"mean": float(np.mean(jains)), "std": std(jains), "n": len(jains)} if jains else None}


def _write_throughput(trial_dir, t, flows, rates, cutoff: int | None) -> None:
    rows = []
    for i, ti in enumerate(t):
        if cutoff is not None and ti > cutoff:
            break
        for f in flows:
            r = rates[f["name"]][i]
            rows.append((f"{ti:.1f}", f["name"], "all", f"{r:.3f}"))
            rows.append((f"{ti:.1f}", f["name"], "0", f"{r:.3f}"))
    _write_csv(trial_dir / "throughput.csv", ("t_s", "flow", "stream", "mbps"), rows)


def _write_rtt(trial_dir, t, rtt) -> None:
    rows = [(f"{a:.3f}", f"{b:.3f}", 10, 10, "burst") for a, b in zip(t, rtt)]
    _write_csv(trial_dir / "rtt.csv", ("t_s", "rtt_ms", "sent", "received", "mode"), rows)


def _write_tcpinfo(trial_dir, flows, rates, rtt_t, rtt, rng) -> None:
    cols = ("t_s", "flow", "src", "sport", "dst", "dport", "cwnd", "bytes_in_flight", "srtt_ms",
            "rttvar_ms", "retrans_total", "delivery_rate_mbps", "bytes_acked")
    t = np.round(np.arange(0.1, DURATION_S + 0.05, 0.1), 1)
    srtt = np.interp(t, rtt_t, rtt)
    rows = []
    for f in (f for f in flows if f["protocol"] == "tcp"):
        rate = np.interp(t, np.arange(1, DURATION_S + 1), rates[f["name"]])
        inflight = rate * 1e6 / 8 * srtt / 1000 * rng.uniform(0.97, 1.03, t.size)
        acked = np.cumsum(rate * 1e6 / 8 * 0.1)
        for i, ti in enumerate(t):
            if f["role"] == "background" and ti <= BG_START_S:
                continue
            segs = int(inflight[i] // MSS)
            rows.append((f"{ti:.1f}", f["name"], f"10.0.{f['pair']}.1", 40000 + f["pair"],
                         f"10.1.{f['pair']}.1", 5201, int(segs * 1.05) + 10, segs * MSS,
                         f"{srtt[i]:.2f}", "2.10", int(ti * 2), f"{rate[i]:.2f}", int(acked[i])))
    _write_csv(trial_dir / "tcpinfo.csv", cols, rows)


def _write_events(trial_dir, flows, rng) -> None:
    rows = []
    for f in flows:
        start = BG_START_S if f["role"] == "background" else 0.0
        rows.append((f["name"], 0, start, round(start + rng.uniform(0, 0.02), 3), float(DURATION_S),
                     round(DURATION_S + rng.uniform(0, 0.05), 3)))
    _write_csv(trial_dir / "events.csv", ("flow", "burst", "planned_start_s", "actual_start_s",
                                          "planned_stop_s", "actual_stop_s"), rows)


def _write_csv(path: Path, header: tuple, rows: list) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2))
