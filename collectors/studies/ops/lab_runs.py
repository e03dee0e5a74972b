"""What the OPS experiments' stored runs hold, read back from the run store: the labelled RTT
recording (`ops record`) and the Figure 29 schemes (`ops run`). The runs are ordinary longhaul
runs of generated profiles (appliance/ops/plans.py); `ops/plan.json` in the run says which
scenario stands for which class or scheme."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from longhaul.collectors.metrics import jain
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.series import read_rows
from longhaul.collectors.studies.ops.paper import PAPER_FIG29
from longhaul.core.documents import DocumentFormat

PLAN_FILE = Path("ops") / "plan.json"
# ops/plan.json: which scenario stands for which class or scheme (runs before the stamp have none)
PLAN = DocumentFormat("longhaul-ops-plan", 1, "an OPS run's plan", legacy={None: 1})
FIG29_FILE = Path("ops") / "fig29.json"
FIG29 = DocumentFormat("longhaul-ops-fig29", 1, "Figure 29's results")

def write_plan(run_dir: Path, plan: dict) -> None:
    path = Path(run_dir) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**PLAN.stamp(), **plan}, indent=2) + "\n")


def read_plan(run_dir: Path) -> dict:
    path = Path(run_dir) / PLAN_FILE
    return PLAN.read(json.loads(path.read_text()), path)


def recording_rows(run_dir: Path) -> tuple[list[tuple], list[str]]:
    """Dataset rows (class, probing, run, t_s, rtt_ms) from every finished recording cell, t_s
    from the end of the warm-up; and the scenarios that gave none (refused, failed, not run)."""
    store, plan = load_store(run_dir), read_plan(run_dir)
    warm, length = plan["warmup_s"], plan["duration_s"]
    rows, missing = [], []
    for cell in store.entries:
        what = plan["scenarios"].get(cell.scenario)
        trials = cell.ok_trials
        if what is None:
            continue
        if not trials:
            missing.append(cell.scenario)
            continue
        t, rtt = store.trial_series(cell.id, trials[0].trial).rtt or (np.array([]), np.array([]))
        keep = (t >= warm) & (t < warm + length)
        run = f"{what['probing']}-{what['class']}"
        rows += [(what["class"], what["probing"], run, round(float(a - warm), 3), float(b))
                 for a, b in zip(t[keep], rtt[keep])]
    return rows, missing


def _mean_over(series, start: float, stop: float) -> float | None:
    if series is None:
        return None
    t, v = series
    keep = (t > start) & (t <= stop)
    return float(np.mean(v[keep])) if keep.any() else None


def fig29_entries(run_dir: Path) -> list[dict]:
    """One entry per scheme cell, in run order: the foreground's and the background's throughput
    over the foreground's span, Jain, and per cycle the class, OPS's choice, the CCA used, the
    probe's mean RTT and the transfer's Mb/s; `ops_right` the share of cycles whose probe led OPS
    to what the decision maps the true background to."""
    store, plan = load_store(run_dir), read_plan(run_dir)
    entries = []
    for cell in store.entries:
        what = plan["scenarios"].get(cell.scenario)
        trials = cell.ok_trials
        if what is None or not trials:
            continue
        trial = trials[0]
        trial_dir = store.trial_dir(cell.id, trial.trial)
        series = store.trial_series(cell.id, trial.trial)
        fg = trial.flow("fg")
        events = [e for e in read_rows(trial_dir / fmt.EVENTS_CSV, []) or [] if e["flow"] == "fg"]
        starts = [float(e["planned_start_s"]) for e in events]
        stops = [float(e["planned_stop_s"] or e["planned_start_s"]) for e in events]
        span = (min(starts), max(stops)) if starts else (0.0, 0.0)
        bg_mbps = _mean_over(series.throughput.get("bg"), *span)
        decisions = []
        for row in read_rows(trial_dir / fmt.DECISIONS_CSV, []) or []:
            if row["flow"] != "fg":
                continue
            note = json.loads(row["note"] or "{}")
            k = int(row["burst"])
            decisions.append({"t_s": float(row["t_s"]), "class": note.get("class"), "ops_cca": note.get("ops_cca"),
                              "cca": row["cca"], "probe_ms": note.get("probe_ms"),
                              "mbps": _mean_over(series.throughput.get("fg"), starts[k], stops[k])
                              if k < len(starts) else None})
        right = plan.get("right_cca", {}).get(what["background"])
        chosen = [d["ops_cca"] for d in decisions if d["ops_cca"]]
        fg_mbps = fg.mean_mbps if fg else None
        entries.append({
            "background": what["background"], "scheme": what["scheme"], "fg_mbps": fg_mbps, "bg_mbps": bg_mbps,
            "fg_bytes": fg.bytes if fg else None, "completion_s": round(span[1] - span[0], 3),
            "jain": jain([fg_mbps, bg_mbps]) if fg_mbps and bg_mbps else None,
            "decisions": decisions, "right_cca": right,
            "ops_right": sum(c == right for c in chosen) / len(chosen) if right and chosen else None,
            "paper": PAPER_FIG29.get((what["background"], what["scheme"]), {}), "cell": cell.id})
    return entries


def write_fig29(run_dir: Path, entries: list[dict]) -> Path:
    path = Path(run_dir) / FIG29_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**FIG29.stamp(), "schemes": entries}, indent=2) + "\n")
    return path
