"""Recording OPS datasets and running the fixed-vs-adaptive comparison of seed 000 Figure 29."""

from __future__ import annotations

import logging
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longhaul.appliance.ops.lab import OpsLab, OpsLabFile, active_plan
from longhaul.collectors.metrics import jain, mbps
from longhaul.collectors.store.writer import now_iso, tool_versions
from longhaul.core.errors import RunError
from longhaul.core.tables import write_csv, write_json
from longhaul.drivers import iperf3

log = logging.getLogger(__name__)
DATASET_COLUMNS = ["class", "probing", "run", "t_s", "rtt_ms"]


def lab_conditions(spec: OpsLabFile, ops: OpsLab) -> dict:
    return {"topology": spec.topology.model_dump(), "queue_bytes": spec.topology.queue_bytes,
            "roles": spec.roles.model_dump(), "active_profile": [s.model_dump() for s in spec.active_profile],
            "kernel": platform.release(), "features": ops.features.as_dict(), "tools": tool_versions(),
            "backend": "netns", "delay": ops.features.delay}


def record_dataset(spec: OpsLabFile, ops: OpsLab, classes: dict[str, list[str]], modes: list[str],
                   out_csv: Path, say=print) -> Path:
    """For every probing mode and background class: start the class's background streams, let them
    leave slow start, record the probe's RTT series for record.duration_s. Rows are written after
    every class, so an interrupted recording keeps what it has."""
    rows: list[list] = []
    raw = out_csv.parent / f"{out_csv.stem}-raw"
    raw.mkdir(parents=True, exist_ok=True)
    sidecar = {"format": "longhaul-ops-dataset", "version": 1, "recorded": now_iso(),
               "classes": classes, "modes": modes, "duration_s": spec.record.duration_s,
               "warmup_s": spec.record.warmup_s, "lab": lab_conditions(spec, ops), "complete": False,
               # bursts start on an absolute schedule from the first probe round (t_s = 0)
               "active_cycle_s": active_plan(spec.active_profile)[0], "active_aligned": True}
    for mode in modes:
        for name, ccas in classes.items():
            run = f"{mode}-{name}"
            say(f"recording {run}: background {ccas or 'none'} for {spec.record.duration_s:g} s")
            run_raw = raw / run            # each run's own: bg-1-cubic.json would repeat across classes
            run_raw.mkdir(exist_ok=True)
            clients = ops.start_background(ccas, spec.record.warmup_s + spec.record.duration_s + 10, run_raw) if ccas else []
            try:
                time.sleep(spec.record.warmup_s)
                samples = ops.probe(spec.record.duration_s, active=(mode == "active"))
            finally:
                for client in clients:
                    client.stop()
            rows += [[name, mode, run, s.t_s, s.rtt_ms] for s in samples if s.rtt_ms is not None]
            if mode == "active":
                write_json(run_raw / "bursts.json", {"columns": ["scheduled_s", "started_s", "cca"],
                                                     "bursts": ops.last_bursts})
            write_csv(out_csv, DATASET_COLUMNS, rows)
            write_json(out_csv.with_suffix(".json"), sidecar)
    sidecar["complete"] = True
    write_json(out_csv.with_suffix(".json"), sidecar)
    return out_csv


@dataclass
class SchemeResult:
    background: str
    scheme: str
    fg_bytes: int = 0
    fg_on_s: float = 0.0
    decisions: list[dict] = field(default_factory=list)
    bg_mbps: float | None = None
    completion_s: float | None = None   # from the first transfer's start to the last one's end, probes included

    @property
    def fg_mbps(self) -> float | None:
        return mbps(self.fg_bytes, self.fg_on_s)


MAX_FAILED_TRANSFERS = 3


def run_scheme(ops: OpsLab, background: str, scheme: str, total_s: float | None, raw: Path, *,
               total_bytes: int | None = None, classify=None, decide=None, w: int = 10, period_s: float = 30.0,
               active: bool = False, cycled: bool = True, settle_s: float = 0.0, say=print) -> SchemeResult:
    """One bar group of Figure 29: a background stream of `background` and a foreground scheme,
    until total_s seconds of transfer or, with total_bytes, until the transfer completes.

    Seed 000 §6.7 runs every scheme as the same cycle, repeated until the transfer completes:
    probe w s, classify, decide, transfer a period. Fixed:CUBIC and Fixed:BBR differ from Adaptive
    (OPS) only in ignoring the decision, which is still logged (what OPS would have chosen). With
    cycled=False a fixed scheme is one continuous transfer instead (no probe gaps, one slow start).
    settle_s pauses between a transfer's end and the next probe (the paper probes at once).
    The background's throughput is averaged over the foreground's span."""
    if (total_s is None) == (total_bytes is None):
        raise ValueError("give exactly one of total_s or total_bytes")
    fixed = scheme.split(":")[1].lower() if scheme.startswith("Fixed:") else None
    if fixed is None and (classify is None or decide is None):
        raise ValueError("the adaptive scheme needs classify and decide")
    result = SchemeResult(background, scheme)
    warm = ops.spec.record.warmup_s
    clients = ops.start_background([background], background_seconds(
        ops.seconds_for(total_s, total_bytes), warm, period_s if cycled or not fixed else None, w, settle_s), raw)
    bg_raw = raw / f"bg-{ops.spec.roles.background_pairs[0]}-{background}.json"
    try:
        time.sleep(warm)
        start = time.monotonic()
        if fixed and not cycled:
            _add(result, ops.transfer(fixed, total_s, raw / f"fg-{scheme}.json", total_bytes))
        else:
            _cycles(ops, result, start, fixed, total_s, total_bytes, raw, classify, decide, w, period_s, active,
                    settle_s, say)
        result.completion_s = round(time.monotonic() - start, 3)
        span = (start - warm, time.monotonic())
    finally:
        for client in clients:
            client.stop()
    result.bg_mbps = _bg_over(bg_raw, span, warm)
    return result


def background_seconds(transfer_s: float, warm_s: float, period_s: float | None, w: int, settle_s: float) -> float:
    """How long the background must run to outlast the foreground: its warm-up, the transfer and,
    when the scheme cycles, every cycle's probe (up to twice w + 1 s when rounds are lost) and
    pause, plus a minute of slack. A background that ended first would hand the foreground an
    empty link and leave the last cycles without one."""
    cycles = math.ceil(transfer_s / period_s) if period_s else 0
    return warm_s + transfer_s + cycles * (2 * (w + 1) + settle_s) + 60


def _cycles(ops, result: SchemeResult, start: float, fixed: str | None, total_s, total_bytes, raw: Path,
            classify, decide, w: int, period_s: float, active: bool, settle_s: float, say) -> None:
    """Probe -> classify -> decide -> transfer, until the transfer is complete; a fixed scheme
    transfers with its own CCA whatever the decision."""
    step = failed = 0
    while not _complete(result, total_s, total_bytes):
        if step and settle_s:
            # an experimental pause, not a readiness wait: the background re-grows into the
            # capacity the foreground left (BBR's bandwidth filter needs a few probe cycles)
            time.sleep(settle_s)
        rtts = _probe_window(ops, w, active)
        label = classify(rtts) if classify else None
        chosen = decide(label) if label is not None and decide else None
        cca = fixed or chosen
        seconds, size = _chunk(result, total_s, total_bytes, period_s)
        out = raw / f"fg-{'fixed' if fixed else 'adaptive'}-{step}.json"
        res = ops.transfer(cca, seconds, out, size)
        _add(result, res)
        failed = failed + 1 if res is None else 0
        if failed >= MAX_FAILED_TRANSFERS:
            raise RunError(f"{failed} foreground transfers in a row gave no iperf3 result (see {out})")
        result.decisions.append({"t_s": round(time.monotonic() - start, 1), "class": label, "ops_cca": chosen,
                                 "cca": cca, "probe_ms": round(float(np.mean(rtts)), 1),
                                 "mbps": None if res is None else mbps(res.bytes_received, res.seconds)})
        say(f"  cycle {step}: background looks like {label!r} (mean {np.mean(rtts):.0f} ms) -> OPS: {chosen}; "
            f"transfer with {cca}")
        step += 1


def _complete(result: SchemeResult, total_s: float | None, total_bytes: int | None) -> bool:
    if total_bytes is not None:
        return result.fg_bytes >= total_bytes
    return result.fg_on_s >= total_s - 1


def _chunk(result: SchemeResult, total_s: float | None, total_bytes: int | None,
           period_s: float) -> tuple[float | None, int | None]:
    """The next adaptive transfer: (seconds, None) for a period, or (None, bytes) for the rest of a
    sized transfer once the rate so far says it fits in a period."""
    if total_bytes is None:
        return min(period_s, total_s - result.fg_on_s), None
    rest = total_bytes - result.fg_bytes
    rate = result.fg_bytes / result.fg_on_s if result.fg_on_s > 0 else 0.0
    if rate > 0 and rest / rate <= period_s:
        return None, rest
    return period_s, None


def _probe_window(ops: OpsLab, w: int, active: bool) -> list[float]:
    """w RTT values for the classifier: rounds 0 .. w-1 of one probe, the phases the model's
    windows had (with active probing the cycle starts at round 0). A probe round can be lost (every
    ping of a second dropped under congestion); then the probe runs on, up to twice the window,
    and the last w values are used."""
    rtts = [s.rtt_ms for s in ops.probe(w + 1, active=active) if s.rtt_ms is not None]
    if len(rtts) > w:
        return rtts[:w]
    rtts += [s.rtt_ms for s in ops.probe(w - len(rtts) + 1, active=active) if s.rtt_ms is not None]
    if len(rtts) >= w:
        return rtts[-w:]
    raise RunError(f"the probe got only {len(rtts)} of {w} RTT values in {2 * w} s")


def _add(result: SchemeResult, res: iperf3.Result | None) -> None:
    if res is not None:
        result.fg_bytes += res.bytes_received
        result.fg_on_s += res.seconds


def _bg_over(path: Path, span: tuple[float, float], warm: float) -> float | None:
    """Mean background throughput over the foreground's span, from its receiver intervals (the
    background started `warm` seconds before the foreground)."""
    try:
        result = iperf3.parse(path.read_text())
    except (OSError, ValueError):
        return None
    length = span[1] - span[0]
    chosen = [iv for iv in result.intervals if warm <= iv.end_s <= length]
    seconds = sum(iv.seconds for iv in chosen)
    return mbps(sum(iv.bytes for iv in chosen), seconds) if seconds else None


def fig29_entry(res: SchemeResult, paper: dict, right_cca: str | None = None) -> dict:
    """right_cca: what the decision model maps the true background to; `ops_right` is the share of
    cycles whose probe led OPS to it (in a fixed scheme, to what OPS would have chosen)."""
    chosen = [d.get("ops_cca") for d in res.decisions if d.get("ops_cca")]
    return {"background": res.background, "scheme": res.scheme, "fg_mbps": res.fg_mbps, "bg_mbps": res.bg_mbps,
            "fg_bytes": res.fg_bytes, "completion_s": res.completion_s,
            "jain": jain([res.fg_mbps, res.bg_mbps]) if res.fg_mbps and res.bg_mbps else None,
            "decisions": res.decisions, "right_cca": right_cca,
            "ops_right": sum(c == right_cca for c in chosen) / len(chosen) if right_cca and chosen else None,
            "paper": paper}


# Seed 000 section 6.7: the Jain indices the text gives; the bar heights are only in the image.
PAPER_FIG29 = {
    ("cubic", "Fixed:CUBIC"): {"fg_mbps": None, "bg_mbps": None, "jain": None},
    ("cubic", "Fixed:BBR"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.62},
    ("cubic", "Adaptive"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.99},
    ("bbr", "Fixed:CUBIC"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.60},
    ("bbr", "Fixed:BBR"): {"fg_mbps": None, "bg_mbps": None, "jain": None},
    ("bbr", "Adaptive"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.96},
}


def write_fig29(out_dir: Path, entries: list[dict]) -> Path:
    path = out_dir / "ops" / "fig29.json"
    write_json(path, {"format": "longhaul-ops-fig29", "version": 1, "schemes": entries})
    return path

