"""What a regression suite compares: per cell and metric, one value per ok trial, read from the store.

A metric is a name, the direction that is better, the practical floor under which a shift is never a
regression, and how to read one trial's value. The floors are the smallest change a facility would
act on, and larger than what two runs of the same lab differ by (bench/RESULTS-regression.md has the
measurements behind them):

| metric | per trial | better | floor |
|---|---|---|---|
| throughput.<flow> | the flow's mean Mb/s while on | higher | 2 % of the baseline |
| aggregate | sum of the flows' Mb/s (several flows) | higher | 2 % |
| jain | Jain's index of the flows (several flows) | higher | 0.02 |
| rtt_inflation | median RTT above idle, ms | lower | 1 ms and 10 % |
| retransmits.<flow> | segments retransmitted (TCP) | lower | 50 and 25 % |
| loss.<flow> | % of datagrams lost (UDP) | lower | 0.5 points |
| transition_rtt.<config> | a sweep's transition RTT (seed 001), one value a run | higher | 10 % |

A floor with an absolute and a relative part takes the larger of the two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from longhaul.collectors.store.fingerprint import CONTROLLER, HOSTS, fingerprint_of
from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.store.records import CellEntry, TrialSummary

log = logging.getLogger(__name__)
DEFAULT_LEVEL = 0.01                  # family-wise false-alarm level of a comparison, and of history's tests


@dataclass(frozen=True)
class Floor:
    absolute: float = 0.0
    relative: float = 0.0             # a fraction of the baseline's median

    def of(self, baseline: float) -> float:
        return max(self.absolute, self.relative * abs(baseline))


@dataclass(frozen=True)
class Metric:
    kind: str                          # throughput, aggregate, jain, rtt_inflation, retransmits, loss
    higher_is_better: bool
    floor: Floor
    unit: str
    per_flow: bool
    # in the calibration cell, a shift of this metric says the host changed (what it carries);
    # queueing and retransmissions there follow the transport under test too
    host_check: bool = False


METRICS: dict[str, Metric] = {
    "throughput": Metric("throughput", True, Floor(relative=0.02), "Mb/s", True, host_check=True),
    "aggregate": Metric("aggregate", True, Floor(relative=0.02), "Mb/s", False, host_check=True),
    "jain": Metric("jain", True, Floor(absolute=0.02), "", False),
    "rtt_inflation": Metric("rtt_inflation", False, Floor(absolute=1.0, relative=0.10), "ms", False),
    "retransmits": Metric("retransmits", False, Floor(absolute=50, relative=0.25), "segments", True),
    "loss": Metric("loss", False, Floor(absolute=0.5), "%", True),
    # a run-level metric: one value a run, from a study (RunMetrics below)
    "transition_rtt": Metric("transition_rtt", True, Floor(relative=0.10), "ms", False),
}
RUN_CELL = "(run)"                  # where run-level metrics stand in tables

# Run-level metrics a study computes from a whole run ({"transition_rtt.cubic / 1 / large": ms}),
# handed in by the registry (collectors/studies/registry.py: RUN_METRICS) because studies do not
# import each other. The key before the first dot names the METRICS entry.
RunMetrics = Mapping[str, Callable[[StoredRun], dict[str, float]]]


def run_level(run: StoredRun, run_metrics: RunMetrics) -> dict[str, float]:
    """Every run-level metric of a run; a study that fails on it gives none (logged)."""
    out: dict[str, float] = {}
    for name, compute in run_metrics.items():
        try:
            out.update(compute(run))
        except Exception:  # noqa: BLE001 - another study's bug must not stop a verdict
            log.exception("run-level metric %s failed on %s", name, run.run_id)
    return out


def metric_of(name: str) -> Metric:
    return METRICS[name.split(".", 1)[0]]


def _flow_value(trial: TrialSummary, flow: str, attr: str) -> float | None:
    result = trial.flow(flow)
    value = getattr(result, attr) if result else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _aggregate(trial: TrialSummary) -> float | None:
    values = [f.mean_mbps for f in trial.flows]
    return float(sum(values)) if values and all(isinstance(v, (int, float)) for v in values) else None


def _readers(entry: CellEntry) -> dict[str, tuple[Metric, Callable[[TrialSummary], float | None]]]:
    """The metrics this cell has, by name (`throughput.fg`, `jain`, ...), with their readers."""
    out: dict[str, tuple[Metric, Callable]] = {}
    flows = entry.flows
    for f in flows:
        out[f"throughput.{f.name}"] = (METRICS["throughput"], lambda t, n=f.name: _flow_value(t, n, "mean_mbps"))
    if len(flows) > 1:
        out["aggregate"] = (METRICS["aggregate"], _aggregate)
        out["jain"] = (METRICS["jain"], lambda t: float(t.jain) if t.jain is not None else None)
    out["rtt_inflation"] = (METRICS["rtt_inflation"],
                            lambda t: t.rtt.inflation_median_ms if t.rtt and t.rtt.inflation_median_ms is not None else None)
    for f in flows:
        if f.protocol == "tcp":
            out[f"retransmits.{f.name}"] = (METRICS["retransmits"], lambda t, n=f.name: _flow_value(t, n, "retransmits"))
        elif f.protocol == "udp":
            out[f"loss.{f.name}"] = (METRICS["loss"], lambda t, n=f.name: _flow_value(t, n, "lost_percent"))
    return out


@dataclass(frozen=True)
class CellSamples:
    cell: str
    scenario: str
    calibration: bool
    params: dict
    values: dict[str, list[float]]     # metric name -> one value per ok trial that has it
    metrics: dict[str, Metric]


def scenario_label(scenario: str, calibration: bool) -> str:
    """How tables name a cell: its scenario, marked when it is the calibration cell."""
    return f"{scenario} (calibration)" if calibration and scenario != CALIBRATION_LABEL else scenario


def is_calibration(entry: CellEntry) -> bool:
    return bool((entry.labels or {}).get(CALIBRATION_LABEL))


def cell_samples(entry: CellEntry) -> CellSamples:
    readers = _readers(entry)
    values: dict[str, list[float]] = {}
    for name, (_, read) in readers.items():
        got = [read(t) for t in entry.ok_trials]
        values[name] = [v for v in got if v is not None]
    return CellSamples(entry.id or "", entry.scenario or "", is_calibration(entry), dict(entry.params or {}),
                       {k: v for k, v in values.items() if v}, {k: m for k, (m, _) in readers.items()})


def run_samples(run: StoredRun) -> dict[str, CellSamples]:
    """Every cell of a run by id, in the run's order."""
    return {e.id: cell_samples(e) for e in run.entries if e.id}


def run_profiles(run: StoredRun) -> list[str]:
    return sorted(run.manifest.profiles)


def _release(host: dict | None) -> str | None:
    return ((host or {}).get("kernel") or {}).get("release")


def run_kernel(run: StoredRun) -> str | None:
    """The kernel the run's lab hosts ran (the first host's that has one, else the controller's)."""
    fp = fingerprint_of(run.manifest) or {}
    hosts = [_release(h) for h in (fp.get(HOSTS) or {}).values()]
    return next((k for k in hosts if k), None) or _release(fp.get(CONTROLLER))


def run_controller_kernel(run: StoredRun) -> str | None:
    """The kernel of the machine that ran longhaul (what a boot-time suite compares with uname)."""
    return _release((fingerprint_of(run.manifest) or {}).get(CONTROLLER))
