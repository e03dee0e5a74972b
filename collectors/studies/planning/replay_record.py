"""The replay's result: what each leg measured, its summary by the same functions the simulation's
goes through, and the JSON file that keeps it (REPLAY, documented here).

replay.json, format "longhaul-plan-replay/1":

    format, replay_id, started, finished, status ("complete" | "failed" | "interrupted"), error
    longhaul      {version, git_revision, git_dirty}           collectors/store/provenance.py
    host          the controller {hostname, kernel, os}
    backend       the config's lab backend; features: the session's (as in a run manifest)
    tool          what the transfers were: "gridftp" or "iperf3" (appliance/plan/tools.py);
    tools_passed_over  why each tool preferred to it could not run on the lab ("gridftp: D1: ...")
    lab_hosts     {S1: kernel, D1: kernel}: uname -r of the hosts the flows ran on
    tools         the controller's tool versions
    trace         {name, transfers, sources, generator}: generator records the compression
                  (collectors/studies/planning/compress.py: keep_one_in, time/rate factors, seed)
    lab           the lab asked for (bottleneck, RTT, queue, CCA, MTU), capacity_bps (the
                  bottleneck's TCP goodput: the simulation's netCap), goodput_factor, pacing_overhead
    legs[]        one per experiment, in the order run:
      name, load_ratio, od_share, capped (section 7's BE cap applied), headroom, interval_s, bin_s,
      ports {od: [base, size], be: [base, size]}, cap_changes, duration_s, errors[]
      transfers   per transfer, trace order, arrays: arrival_s (scheduled, from the leg's t0),
                  launched_s (its first launch), finish_s (client exit seen; null: did not
                  finish), all timed on S1 by the leg agent (drivers/agents/replay_leg.py), runtime_s
                  (finish - arrival), reference_s (trace runtime x load ratio), slowdown (bounded,
                  bound = interval_s), od, nbytes, requested_bps, received_bytes, attempts, port
                  (the server port the client named: GridFTP's control port)
      series      per interval from t0: t_s (end of the interval), od_bytes, be_bytes,
                  other_bytes (frame bytes the sender's shaper classes sent), bottleneck_bytes
                  (frame bytes R1's bottleneck tbf sent, read on R1 and placed by wall-clock
                  time against the agent's t0), delivered_bytes (bottleneck_bytes, or
                  the three classes' sum where the router has no tbf, x goodput_factor: payload),
                  be_cap_bps (null: uncapped), od_rate_bps (the agent's measure)
      summary     metrics.class_slowdowns + throughput_stats (bin_s) + cov_concurrency, finished,
                  launch_lag_median_s / _max_s (launched_s - arrival_s: the sender's own latency
                  in starting a client, and any wait for a free server), uncontended_excess_median_s
                  (runtime_s - reference_s over the transfers the simulation leaves uncontended:
                  what the lab adds to a transfer's start and finish)
      simulated   the same summary of simulate() on the same trace, classes, capacity and load
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longhaul.collectors.studies.planning.metrics import class_slowdowns, concurrency_cov, throughput_stats
from longhaul.collectors.studies.planning.sim import SimResult
from longhaul.core.documents import DocumentFormat

REPLAY = DocumentFormat("longhaul-plan-replay", 1, "a planning replay", legacy={"longhaul-plan-replay/1": 1})
# Above this median lag between a transfer's arrival and its launch, a leg measures the sender's
# own latency (a slow host, too few servers) more than the schedule.
FAITHFUL_LAUNCH_LAG_S = 0.25
# Above this median of (lab runtime - trace runtime) over the transfers the simulation leaves
# uncontended, the lab's own cost of starting and finishing a transfer (a tool's start, its
# handshakes; seconds on a VM under TCG) weighs in every slowdown. 0.15-0.3 s on the netns lab.
FAITHFUL_EXCESS_S = 0.5
REPLAY_JSON = "replay.json"
TRANSFER_KEYS = ("arrival_s", "launched_s", "finish_s", "runtime_s", "reference_s", "slowdown", "od", "nbytes",
                 "requested_bps", "received_bytes", "attempts", "port")
SERIES_KEYS = ("t_s", "od_bytes", "be_bytes", "other_bytes", "bottleneck_bytes", "delivered_bytes", "be_cap_bps",
               "od_rate_bps")


@dataclass
class LegResult:
    name: str
    load_ratio: float
    od_share: float
    capped: bool
    headroom: float
    interval_s: float
    bin_s: float
    transfers: dict[str, np.ndarray]           # TRANSFER_KEYS
    series: dict[str, np.ndarray]              # SERIES_KEYS
    ports: dict[str, list[int]] = field(default_factory=dict)
    cap_changes: int = 0
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    simulated: SimResult | None = None

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.transfers["finish_s"])

    def summary(self) -> dict:
        """The paper's metrics of what the lab did (finished transfers only; `finished` counts)."""
        t, done = self.transfers, self.finished
        out = class_slowdowns(t["slowdown"][done], t["od"][done])
        out.update(throughput_stats(self.series["delivered_bytes"], self.interval_s, self.bin_s))
        out["cov_concurrency"] = concurrency_cov(t["arrival_s"][done], t["finish_s"][done], self.bin_s)
        out["finished"], out["transfers_total"] = int(done.sum()), len(done)
        lag = t["launched_s"] - t["arrival_s"]
        lag = lag[np.isfinite(lag)]
        out["launch_lag_median_s"] = float(np.median(lag)) if len(lag) else None
        out["launch_lag_max_s"] = float(np.max(lag)) if len(lag) else None
        alone = done & (self.simulated.slowdown <= 1 + 1e-9) if self.simulated is not None else done[:0]
        excess = (t["runtime_s"] - t["reference_s"])[alone]
        out["uncontended_excess_median_s"] = float(np.median(excess)) if len(excess) else None
        return out

    def simulated_summary(self) -> dict | None:
        sim = self.simulated
        if sim is None:
            return None
        out = class_slowdowns(sim.slowdown, sim.od)
        out.update(throughput_stats(sim.delivered, sim.interval_s, self.bin_s))
        out["cov_concurrency"] = concurrency_cov(sim.arrival_s, sim.finish_s, self.bin_s)
        return out

    def to_dict(self) -> dict:
        return {"name": self.name, "load_ratio": self.load_ratio, "od_share": self.od_share, "capped": self.capped,
                "headroom": self.headroom, "interval_s": self.interval_s, "bin_s": self.bin_s, "ports": self.ports,
                "cap_changes": self.cap_changes, "duration_s": round(self.duration_s, 3), "errors": self.errors,
                "transfers": {k: _list(self.transfers[k]) for k in TRANSFER_KEYS},
                "series": {k: _list(self.series[k]) for k in SERIES_KEYS},
                "summary": self.summary(), "simulated": self.simulated_summary()}


@dataclass
class ReplayResult:
    path: Path                                 # replay.json
    header: dict                               # everything but the legs
    legs: list[LegResult] = field(default_factory=list)

    def leg(self, name: str) -> LegResult:
        return next(leg for leg in self.legs if leg.name == name)

    def to_dict(self) -> dict:
        return {**self.header, "legs": [leg.to_dict() for leg in self.legs]}


def write_replay(result: ReplayResult) -> Path:
    """replay.json, written whole through a temporary file (a reader never sees half of it)."""
    result.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = result.path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(result.to_dict()), indent=1, allow_nan=False) + "\n")
    tmp.replace(result.path)
    return result.path


def read_replay(path: Path) -> dict:
    """The file in the current version; refuses another format (DocumentVersionError, a ValueError)."""
    return REPLAY.read(json.loads(Path(path).read_text()), path)


def unfaithful_legs(doc: dict) -> list[str]:
    """Why each leg of a replay document measured the lab more than the schedule: its launches
    lagged their arrivals, or the transfers the simulation leaves uncontended took much longer
    than their runtime (what the lab adds to each transfer's start and finish)."""
    out = []
    for leg in doc["legs"]:
        summary = leg["summary"]
        lag, excess = summary.get("launch_lag_median_s") or 0, summary.get("uncontended_excess_median_s") or 0
        if lag > FAITHFUL_LAUNCH_LAG_S:
            out.append(f"{leg['name']}: launches {lag:.2f} s after their arrivals (median)")
        if excess > FAITHFUL_EXCESS_S:
            out.append(f"{leg['name']}: uncontended transfers {excess:.2f} s longer than their runtime (median)")
    return out


def _list(values) -> list:
    return [_scalar(v) for v in np.asarray(values).tolist()]


def _scalar(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _clean(obj):
    """NaN and infinity as null, numpy scalars as Python's, all the way down."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    return _scalar(obj)
