"""A plan: the trace as logged, the all-best-effort baseline at each load ratio, and seed 003's
configurations (section 5.3) simulated, with their metrics; one JSON document (PLAN),
which the planning report and `longhaul plan --json` read."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from longhaul.collectors.store.provenance import git_revision, host_info, now_iso
from longhaul.collectors.studies.planning import metrics
from longhaul.collectors.studies.planning.settings import SweepSection
from longhaul.collectors.studies.planning.sim import SimResult, load_library, simulate, split_classes
from longhaul.collectors.studies.planning.trace import OD, Trace
from longhaul.core.documents import DocumentFormat
from longhaul.core.paths import REPO

PLAN = DocumentFormat("longhaul-plan", 1, "a facility plan", legacy={"longhaul-plan/1": 1})
PLAN_JSON = "plan.json"          # in a plan's folder (plans/NAME-TIME/), beside its report
REPLAY_DIR = "replay"            # the lab replay's folder in it (its replay.json: replay_record.py)


def write_plan(doc: dict, out_dir: Path) -> Path:
    path = Path(out_dir) / PLAN_JSON
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def read_plan(out_dir: Path) -> dict:
    """A plan folder's document in the current version (DocumentVersionError, a ValueError, if not)."""
    path = Path(out_dir) / PLAN_JSON
    return PLAN.read(json.loads(path.read_text()), path)


def sim_metrics(res: SimResult, bin_s: float) -> dict:
    out = metrics.class_slowdowns(res.slowdown, res.od)
    out.update(metrics.throughput_stats(res.delivered, res.interval_s, bin_s))
    out["cov_concurrency"] = metrics.concurrency_cov(res.admit_s, res.finish_s, bin_s)
    return out


def trace_summary(trace: Trace, interval_s: float, bin_s: float) -> dict:
    start, seconds, nbytes = trace.arrays()
    logged = metrics.spread(start, start + seconds, nbytes, interval_s)
    stats = metrics.throughput_stats(logged, interval_s, bin_s)
    stats["cov_concurrency"] = metrics.concurrency_cov(start, start + seconds, bin_s)
    return {
        "name": trace.name, "sources": trace.sources, "origin": trace.origin.isoformat() if trace.origin else None,
        "transfers": len(trace.transfers), "bytes": float(nbytes.sum()), "span_s": trace.span_s(),
        "failed": trace.failed, "malformed": trace.malformed,
        "problems": [asdict(p) for p in trace.problems],
        "peak_demand_bps": float(logged.max(initial=0) * 8 / interval_s),
        "logged": stats, "logged_series_bps": (metrics.rebin(logged, interval_s, bin_s) * 8 / bin_s).round(1).tolist(),
        "labelled": trace.labelled(), "generator": trace.generator,
    }


def split_mode(trace: Trace, sweep: SweepSection) -> str:
    """"logged" or "random": auto takes the trace's own classes when every transfer has one."""
    if sweep.split == "auto":
        return "logged" if trace.labelled() else "random"
    return sweep.split


def od_mask(trace: Trace, sweep: SweepSection, od_pct: float) -> np.ndarray:
    if split_mode(trace, sweep) == "logged":
        return np.array([t.cls == OD for t in trace.transfers])
    return split_classes(len(trace.transfers), od_pct / 100, sweep.seed)


def run_plan(trace: Trace, sweep: SweepSection) -> dict:
    """Every configuration of the sweep over the trace (raises ValueError on a trace the sweep
    cannot use, e.g. a logged split of an unlabelled trace)."""
    if sweep.split == "logged" and not trace.labelled():
        raise ValueError("split = \"logged\" needs a class (od or be) on every transfer")
    began = time.perf_counter()
    summary = trace_summary(trace, sweep.interval_s, sweep.bin_s)
    # "the link as it is": the trace's busiest bin (its Figure-2 peak) unless the plan names the
    # link; the 1 s peak would be set by artefacts (a small file logged in a millisecond)
    capacity = sweep.capacity_gbps * 1e9 if sweep.capacity_gbps else summary["logged"]["peak_bps"]
    n = len(trace.transfers)
    baseline = {}
    for load in sorted(set(sweep.load_ratios) | {1.0}):
        res = simulate(trace, np.zeros(n, dtype=bool), capacity, 0.0, load, sweep.interval_s)
        baseline[load] = sim_metrics(res, sweep.bin_s)
    base_gap = baseline[1.0]["gap_bps"]
    for m in baseline.values():
        m["gap_change"] = metrics.gap_change(m["gap_bps"], base_gap)
    if split_mode(trace, sweep) == "logged":
        od_share = float(np.mean(od_mask(trace, sweep, 0)) * 100)
        configurations = sweep.configurations([round(od_share, 1)])
    else:
        configurations = sweep.configurations()
    configs = []
    for od_pct, bw_pct, load in configurations:
        res = simulate(trace, od_mask(trace, sweep, od_pct), capacity, bw_pct / 100, load, sweep.interval_s)
        m = sim_metrics(res, sweep.bin_s)
        m["gap_change"] = metrics.gap_change(m["gap_bps"], base_gap)
        configs.append({"od_transfers_pct": od_pct, "od_bandwidth_pct": bw_pct, "load_ratio": load, **m})
    return {
        **PLAN.stamp(), "created": now_iso(), "longhaul": git_revision(REPO).to_dict(), "host": host_info().to_dict(),
        "trace": summary, "sweep": sweep.model_dump(), "split": split_mode(trace, sweep), "capacity_bps": capacity,
        "capacity_from": "plan" if sweep.capacity_gbps else f"the trace's peak in {sweep.bin_s:g} s bins",
        "baseline": [{"load_ratio": load, **m} for load, m in sorted(baseline.items())],
        "configs": configs, "simulator": "c" if load_library() is not None else "python",
        "seconds": round(time.perf_counter() - began, 3),
    }


def find(doc: dict, od_pct: float, bw_pct: float, load: float) -> dict | None:
    for c in doc["configs"]:
        if (c["od_transfers_pct"], c["od_bandwidth_pct"], c["load_ratio"]) == (od_pct, bw_pct, load):
            return c
    return None


def baseline_at(doc: dict, load: float) -> dict | None:
    return next((b for b in doc["baseline"] if b["load_ratio"] == load), None)


def headline(doc: dict, load: float = 2.0, od_pct: float = 30.0, bw_pct: float = 40.0) -> list[str]:
    """The plain sentences a facility manager reads first."""
    out = []
    base = baseline_at(doc, load)
    if base:
        gap = base.get("gap_change")
        gap_text = (f"the gap between peak and mean throughput {'shrinks' if gap < 0 else 'grows'} by {abs(gap) * 100:.0f} %"
                    if gap is not None else "")
        out.append(f"At {load:g}x load on the same link, with every transfer best-effort, transfers slow by "
                   f"{base['avg_bs_all']:.2f}x on average (the slowest by {base['max_bs_all']:.1f}x); {gap_text}.")
    cfg = find(doc, od_pct, bw_pct, load)
    if cfg is None and doc["configs"]:
        cfg = max((c for c in doc["configs"] if c["load_ratio"] == load), default=None,
                  key=lambda c: (c["od_bandwidth_pct"] < 100, -abs(c["od_transfers_pct"] - od_pct)))
    if cfg and cfg["avg_bs_od"] is not None and cfg["avg_bs_be"] is not None:
        out.append(f"At {cfg['load_ratio']:g}x load with {cfg['od_transfers_pct']:g} % on-demand transfers and "
                   f"{cfg['od_bandwidth_pct']:g} % of the link reserved for them, on-demand transfers slow by "
                   f"{cfg['avg_bs_od']:.2f}x and best-effort by {cfg['avg_bs_be']:.2f}x on average "
                   f"(the slowest: {cfg['max_bs_od']:.1f}x and {cfg['max_bs_be']:.1f}x).")
    return out
