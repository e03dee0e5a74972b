"""Synthetic regression-suite runs, written through the real run writer (FileRunWriter), so compare,
history and the report read exactly what a suite run stores.

A suite here is two cells like profiles/regression-nightly.toml's transport cells plus the
calibration cell; each trial's numbers are drawn around a cell's means with a given coefficient of
variation, and a planted shift multiplies one metric of the "new" runs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.collectors.store.manifest import ProfileSource
from longhaul.collectors.store.provenance import run_manifest
from longhaul.collectors.store.records import CellEntry, FlowDecl, FlowResult, RttStats, Topology, TrialSummary
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.core.paths import REPO

PROFILE = "regression-synthetic"
FG = FlowDecl(name="fg", role="foreground", tool="iperf3", protocol="tcp", cca="cubic", pair=1, streams=1,
              pattern="continuous")
BG = FlowDecl(name="bg", role="background", tool="iperf3", protocol="tcp", cca="bbr", pair=2, streams=1,
              pattern="continuous")
# scenario -> (flows, calibration, mean Mb/s per flow, RTT inflation ms, retransmits per flow)
CELLS = {
    "calibration": ([FG], True, {"fg": 900.0}, 0.2, {"fg": 10}),
    "cubic-alone": ([FG], False, {"fg": 470.0}, 30.0, {"fg": 400}),
    "cubic-vs-bbr": ([FG, BG], False, {"fg": 180.0, "bg": 290.0}, 45.0, {"fg": 900, "bg": 1500}),
}


def fingerprint(kernel: str, rmem: str = "4096 131072 1073741824", cca: str = "cubic") -> dict:
    host = {"format": "longhaul-fingerprint", "version": 1,
            "kernel": {"release": kernel, "version": "#1 SMP Debian", "cmdline": "ro quiet"},
            "sysctl": {"net.ipv4.tcp_rmem": rmem, "net.ipv4.tcp_congestion_control": cca},
            "cpu": {"model": "Synthetic CPU", "count": 2, "governors": []}}
    return {"controller": host, "hosts": {name: host for name in ("S1", "S2", "R1", "R2", "D1", "D2")},
            "taken": "2026-11-24T00:00:00Z", "lab": "lab-1"}


def write_suite_run(root: Path, run_id: str, started: str, *, repeats: int = 8, cv: float = 0.02,
                    seed: int = 0, kernel: str = "6.1.0-50-amd64", shift: dict | None = None,
                    fp: dict | None = None, profile: str = PROFILE, status: str = "complete") -> Path:
    """One suite run below root. `shift`: {(scenario, metric): factor}, metric one of throughput.fg,
    throughput.bg, rtt_inflation, retransmits.fg ...: that metric's mean is multiplied by factor."""
    rng = np.random.default_rng(seed)
    shift = shift or {}
    store = FileRunWriter.create(Path(root), run_id)
    manifest = run_manifest(run_id, repo=REPO, backend="netns", profiles={profile: ProfileSource(repeats=repeats)},
                            fingerprint=fp or fingerprint(kernel))
    store.write_manifest(dataclasses.replace(manifest, started=started))
    for number, (scenario, (flows, calibration, means, inflation, retrans)) in enumerate(CELLS.items(), start=1):
        entry = store.begin_cell(CellEntry(
            id=f"{profile}-{number:03d}", profile=profile, scenario=scenario, params={"scenario": scenario},
            topology=Topology(pairs=2, access_rate_mbps=1000, bottleneck_rate_mbps=1000 if calibration else 500,
                              rtt_ms=0 if calibration else 64, queue_bytes=4_000_000, mtu=1500),
            labels={CALIBRATION_LABEL: True} if calibration else {}, status="running", flows=list(flows)))
        for k in range(1, repeats + 1):
            results = []
            for f in flows:
                mbps = means[f.name] * shift.get((scenario, f"throughput.{f.name}"), 1.0) * (1 + cv * rng.standard_normal())
                rt = retrans[f.name] * shift.get((scenario, f"retransmits.{f.name}"), 1.0) * (1 + 5 * cv * rng.standard_normal())
                results.append(FlowResult(**{**f.to_dict(), "mean_mbps": round(mbps, 3), "retransmits": max(0, int(rt)),
                                             "bytes": mbps * 1e6 / 8 * 30, "on_s": 30.0}))
            rates = [r.mean_mbps for r in results]
            jain = sum(rates) ** 2 / (len(rates) * sum(x * x for x in rates))
            infl = inflation * shift.get((scenario, "rtt_inflation"), 1.0) * (1 + 3 * cv * rng.standard_normal())
            store.record_trial(entry, TrialSummary(trial=k, status="ok", duration_s=30.0, flows=results,
                                                   jain=round(jain, 4), rtt=RttStats(idle_ms=64.0, inflation_median_ms=round(infl, 3))))
        store.end_cell(entry, "complete")
    store.finish(status)
    return store.dir
