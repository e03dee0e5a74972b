"""What a report shows of a run, as plain dicts and strings with every number already formatted:
the header, a cell's verification and results rows, the Table 2 layout, a cell's section with its
figures. report.html, a sweep's cell pages and the web console all build from these, so a number
reads the same everywhere."""
from __future__ import annotations

import datetime as dt

from longhaul.collectors.store.format import CCA_STAND_INS
from longhaul.collectors.store.influx.spool import shipping_summary
from longhaul.collectors.store.reader import StoredRun, TrialSeries
from longhaul.collectors.store.records import (
    CellEntry,
    CellStats,
    FlowDecl,
    FlowStats,
    JainStats,
    Measure,
    Setting,
    Verification,
)
from longhaul.reports import plots
from longhaul.reports.fmt import DASH, fmt, fmt_mbps, fmt_std, mean, mean_std, num, spread
from longhaul.reports.sections import figure

# Seed 000 Table 2, in the paper's row order: (mode, role) -> row heading.
FAIRNESS_ROWS = (("dedicated", "background", "Dedicated", "Background"),
                 ("dedicated", "foreground", "Dedicated", "Foreground (iperf)"),
                 ("shared", "background", "Shared", "Background"),
                 ("shared", "foreground", "Shared", "Foreground (iperf)"))


# ---- formatting ---------------------------------------------------------------------------------

def _when(iso: str | None) -> str:
    return iso.replace("T", " ").replace("Z", " UTC") if iso else DASH


def _duration(start: str | None, end: str | None) -> str:
    try:
        secs = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return DASH
    return f"{int(secs // 60)} min {int(secs % 60)} s"


# ---- sections ------------------------------------------------------------------------------------

def header(store: StoredRun) -> dict:
    m = store.manifest
    lh, host, features = m.longhaul, m.host, m.features or {}
    revision = lh.git_revision or DASH
    if lh.git_dirty:
        revision += " (uncommitted changes)"
    return {
        "run_id": store.run_id,
        "status": store.status, "complete": store.status == "complete",
        "started": _when(m.started),
        "finished": _when(m.finished) if m.finished else "not recorded",
        "duration": _duration(m.started, m.finished),
        "host": " · ".join(str(v) for v in (host.hostname, host.os) if v) or DASH,
        "kernel": host.kernel or DASH, "backend": m.backend or DASH,
        "delay": features.get("delay") or DASH,
        "ccas": ", ".join(features.get("congestion_controls") or []) or DASH,
        "tools": sorted((m.tools or {}).items()),
        "longhaul_version": lh.version or DASH, "git_revision": revision,
        "config_path": m.config_path or DASH,
        "profiles": [(n, p.description or "") for n, p in m.profiles.items()],
        "lab_kernels": _lab_kernels(features.get("kernels") or {}),
        "vm_lab": _vm_lab(features.get("vm_lab")),
        "influx": shipping_summary(store.run_dir),
    }


def _lab_kernels(kernels: dict) -> str:
    """ssh and qemu backends: the results came from these machines' kernels, not this one's."""
    by_kernel: dict[str, list[str]] = {}
    for host, kernel in kernels.items():
        by_kernel.setdefault(kernel, []).append(host)
    return "; ".join(f"{k} ({', '.join(hosts)})" for k, hosts in by_kernel.items())


def _vm_lab(vm: dict | None) -> str:
    if not vm:
        return ""
    image = vm.get("image") or {}
    boots = ", ".join(f"{n} {s:g} s" for n, s in (vm.get("boot_seconds") or {}).items())
    return (f"appliance image {image.get('revision') or DASH} (built {image.get('built') or DASH}, "
            f"Debian {image.get('suite') or DASH}, kernel {vm.get('kernel')}); {vm.get('accel')}: "
            f"{vm.get('accel_why')}; {vm.get('memory_mb')} MB per VM; booted in {boots or DASH}")


def verification_row(cell: CellEntry) -> dict:
    lab = cell.lab or Verification()
    rtt, rate, queue = lab.rtt_ms or Measure(), lab.rate_mbps or Measure(), lab.queue_bytes or Setting()
    return {"id": cell.id,
            "rtt_conf": fmt(rtt.configured), "rtt_meas": fmt(rtt.measured),
            "rate_conf": fmt(rate.configured), "rate_meas": fmt(rate.measured),
            "queue": _fmt_bytes(queue.configured),
            "verdict": "ok" if lab.ok is True else "not ok" if lab.ok is False else "not verified",
            "ok": lab.ok is True}


def result_row(cell: CellEntry) -> dict:
    stats = cell.stats or CellStats()
    flows = [{"name": n, "text": mean_std(s.mean_mbps, s.std_mbps, s.n), "n": s.n} for n, s in stats.flows.items()]
    jain = stats.jain
    rtts = [t.rtt for t in cell.ok_trials if t.rtt]
    return {"id": cell.id, "scenario": cell.scenario or DASH,
            "params": _params(cell), "flows": flows,
            "jain": mean_std(jain.mean, jain.std, jain.n, _fmt_jain, _fmt_jain) if jain else DASH,
            "infl_median": fmt(mean(r.inflation_median_ms for r in rtts)),
            "infl_p95": fmt(mean(r.inflation_p95_ms for r in rtts)),
            "infl_max": fmt(max((v for r in rtts if (v := num(r.inflation_max_ms)) is not None), default=None)),
            "trials": f"{len(cell.ok_trials)}/{len(cell.trials)}"}


def fairness_table(cells: list[CellEntry], notes: list[str]) -> dict | None:
    """Seed 000 Table 2 layout: rows (mode, role) plus Jain, columns from labels.column."""
    placed = [c for c in cells
              if (c.labels or {}).get("mode") in ("dedicated", "shared") and (c.labels or {}).get("column")]
    if not placed:
        return None
    columns = list(dict.fromkeys(c.labels["column"] for c in placed))
    slots: dict[tuple, dict] = {}
    for cell in placed:
        mode, column = cell.labels["mode"], cell.labels["column"]
        refs = (cell.reference or {}).get("values") or {}
        stats = cell.stats or CellStats()
        for name, role in _flow_roles(cell).items():
            s = stats.flows.get(name) or FlowStats()
            _place(slots, (mode, role, column), _slot(cell, s.mean_mbps, s.std_mbps, s.n, refs.get(name),
                                                     fmt_mbps, fmt_std), notes)
        if mode == "shared":
            j = stats.jain or JainStats()
            _place(slots, ("jain", column), _slot(cell, j.mean, j.std, j.n, refs.get("jain"), _fmt_jain, _fmt_jain),
                   notes)
    rows = [{"type": type_, "stream": stream, "first": role == "background",
             "cells": [slots.get((mode, role, c)) for c in columns]}
            for mode, role, type_, stream in FAIRNESS_ROWS]
    return {"columns": columns, "rows": rows,
            "jain": [slots.get(("jain", c)) for c in columns],
            "sources": sorted({c.reference.get("source") or "reference" for c in placed if c.reference})}


def _fmt_jain(value) -> str:
    return fmt(value, 2)


def _slot(cell: CellEntry, mean, std, n: int, paper, formatter, std_formatter) -> dict:
    return {"cell": cell.id, "ours": formatter(mean) if num(mean) is not None else None,
            "std": spread(std, n, std_formatter), "n": n,
            "paper": formatter(paper) if num(paper) is not None else None}


def _place(slots: dict, key: tuple, slot: dict, notes: list[str]) -> None:
    if key in slots:
        notes.append(f"Fairness table: cell {slot['cell']} maps to the same place as cell "
                     f"{slots[key]['cell']} ({' / '.join(key)}); only the first is shown.")
        return
    slots[key] = slot


def cell_section(cell: CellEntry, series: list[tuple[int, TrialSeries]], colors: dict) -> dict:
    cid = cell.id
    trials = cell.trials
    status = {t.trial: t.status for t in trials}
    shown = [f"{k}" if status.get(k) == "ok" else f"{k} ({status.get(k)})"
             for k, s in series if s.throughput]
    idle = idle_rtt(cell)
    drawn = [(plots.throughput_timeseries(cid, series, colors),
              f"Receiver throughput per flow (all streams of a flow summed), 1 s intervals. Colour = "
              f"flow, line style = trial; trials shown: {', '.join(shown)}."),
             (plots.rtt_timeseries(cid, series, idle),
              "RTT probe rounds over time, one line per trial; dashed: idle RTT (mean over trials, "
              "measured on the empty path).")]
    first = next(((k, s) for k, s in series if s.inflight), None)
    if first:
        k, s = first
        drawn += [(plots.inflight_timeseries(cid, k, s, colors, _bdp_bytes(cell)),
                   f"Bytes in flight per TCP flow from tcp_info at 10 Hz, summed over the flow's "
                   f"sockets, trial {k}; dashed: bottleneck BDP."),
                  (plots.flow_rtt_timeseries(cid, k, s, colors, idle),
                   f"Smoothed RTT per TCP flow (the largest of its sockets'), trial {k}: what each "
                   f"flow's own packets saw, beside the probe's view."),
                  (plots.flow_retrans_timeseries(cid, k, s, colors),
                   f"Segments retransmitted per second per TCP flow, trial {k} (loss as the senders "
                   f"saw it).")]
    figures = [figure(svg, caption) for svg, caption in drawn if svg]
    return {"id": cid, "scenario": cell.scenario or DASH, "profile": cell.profile or DASH,
            "params": _params(cell), "labels": cell.labels or {},
            "flows": [_flow_desc(f) for f in cell.flows],
            "trials": [{"k": t.trial, "status": t.status or "unknown",
                        "duration": fmt(t.duration_s, 1, " s"), "error": t.error or ""} for t in trials],
            "figures": figures}


# ---- helpers -------------------------------------------------------------------------------------

def load_series(store: StoredRun, cell: CellEntry) -> list[tuple[int, TrialSeries]]:
    # Failed trials usually wrote no CSVs; reading them would only add noise to the notes.
    return [(t.trial, store.trial_series(cell.id, t.trial)) for t in cell.trials
            if t.status != "failed" and isinstance(t.trial, int)]


def flow_names(cell: CellEntry) -> list[str]:
    return [f.name for f in cell.flows if f.name] + list((cell.stats or CellStats()).flows)


def _flow_roles(cell: CellEntry) -> dict[str, str]:
    """Flow name -> role, from the declared flows, else from what the trials recorded."""
    roles = {f.name: f.role for f in cell.flows}
    for trial in cell.trials:
        for f in trial.flows:
            roles.setdefault(f.name, f.role)
    return {n: r for n, r in roles.items() if n and r in ("foreground", "background")}


def _params(cell: CellEntry) -> list[str]:
    shown = [f"{k}={DASH if v is None else v}" for k, v in (cell.params or {}).items()]
    stand_ins = (cell.labels or {}).get(CCA_STAND_INS) or {}
    return shown + [f"{asked} ran as {bpf} (BPF; cca_fallback = bpf)" for asked, bpf in stand_ins.items()]


def _flow_desc(flow: FlowDecl) -> str:
    parts = [flow.tool, flow.protocol, flow.cca, f"{flow.streams} streams" if (flow.streams or 1) > 1 else None,
             f"pair {flow.pair}" if flow.pair is not None else None]
    return f"{flow.name} ({flow.role or 'flow'}): " + ", ".join(str(p) for p in parts if p)


def idle_rtt(cell: CellEntry) -> float | None:
    idle = mean(t.rtt.idle_ms for t in cell.trials if t.rtt)
    if idle is None:
        idle = num(cell.lab.measured_rtt_ms if cell.lab else None)
    return idle


def _bdp_bytes(cell: CellEntry) -> float | None:
    rate, rtt = num(cell.topology.bottleneck_rate_mbps), num(cell.topology.rtt_ms)
    return rate * 1e6 / 8 * rtt / 1000 if rate and rtt else None


def _fmt_bytes(value) -> str:
    v = num(value)
    return DASH if v is None else f"{v:,.0f}".replace(",", "\u202f")  # narrow no-break space
