"""Typed entries of the run store: what summary.json, trial.json and verification.json hold
(docs/results-format.md), as dataclasses with to_dict/from_dict.

to_dict gives the documented JSON, keys in the documented order; from_dict(to_dict(x)) == x. Reading
is lenient because a store may be partial or older: a missing key takes its default (None, an empty
list or table), and keys this longhaul does not know are kept in `extra` and written back after the
known ones, so an added field survives a read-modify-write (a resumed run) unchanged. Values are
not coerced: a store holds what the run measured, and the reader must not reinterpret it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from longhaul.collectors.metrics import mean_std

OMIT_NONE = {"omit_none": True}     # field metadata: the key is left out while the value is None
OMIT_EMPTY = {"omit_empty": True}   # ... while the value is empty (a table older documents lack)


@dataclass(kw_only=True)
class Record:
    """to_dict/from_dict for the records below; `_nested` names fields holding records:
    field -> (record type, "one" | "list" | "dict")."""

    _nested: ClassVar[dict[str, tuple[type[Record], str]]] = {}
    extra: dict = field(default_factory=dict, repr=False, compare=True)

    @classmethod
    def from_dict(cls, doc: dict | None):
        if isinstance(doc, cls):
            return doc
        rest = dict(doc) if isinstance(doc, dict) else {}
        values = {}
        for f in fields(cls):
            if f.name != "extra" and f.name in rest:
                values[f.name] = _load(cls._nested.get(f.name), rest.pop(f.name))
        return cls(**values, extra=rest)

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none") or not value and f.metadata.get("omit_empty"):
                continue
            out[f.name] = _dump(value)
        out.update(_dump(self.extra))
        return out


def _load(nested: tuple[type[Record], str] | None, value):
    if nested is None:
        return value
    kind, shape = nested
    if value is None:           # list and table fields are always a list and a table
        return [] if shape == "list" else {} if shape == "dict" else None
    if shape == "list":
        return [kind.from_dict(v) for v in value if isinstance(v, dict)] if isinstance(value, list) else []
    if shape == "dict":
        return {k: kind.from_dict(v) for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}
    return kind.from_dict(value) if isinstance(value, dict) else None


def _dump(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    return value


# --- a cell's declaration -------------------------------------------------------------------------

@dataclass(kw_only=True)
class Topology(Record):
    pairs: int | None = None
    access_rate_mbps: float | None = None
    bottleneck_rate_mbps: float | None = None
    rtt_ms: float | None = None
    queue_bytes: int | None = None
    mtu: int | None = None


@dataclass(kw_only=True)
class FlowDecl(Record):
    """A flow as the cell declares it (summary.json cells[].flows)."""

    name: str | None = None
    role: str | None = None
    tool: str | None = None
    protocol: str | None = None
    cca: str | None = None           # None for UDP tools
    pair: int | None = None
    streams: int | None = None
    pattern: str | None = None


@dataclass(kw_only=True)
class DeclaredCell(Record):
    """A cell as the manifest lists it: the sweep's parameters and the whole validated cell
    (`cell`, the profile's schema as a table), so a partial run still names every cell."""

    id: str | None = None
    profile: str | None = None
    scenario: str | None = None
    params: dict = field(default_factory=dict)
    labels: dict | None = None
    reference: dict | None = None
    cell: dict | None = None


# --- lab verification ----------------------------------------------------------------------------

@dataclass(kw_only=True)
class Setting(Record):
    """A configured value verification does not measure (the queue)."""

    configured: Any = None


@dataclass(kw_only=True)
class Measure(Setting):
    measured: float | None = None     # None: nothing came back (no ping reply)


@dataclass(kw_only=True)
class RateMeasure(Measure):
    goodput: float | None = None      # the probe's receiver goodput beside the shaper's rate


@dataclass(kw_only=True)
class PathRtt(Record):
    """One pair's idle RTT: the median of its rounds and its least echo (the floor invariant)."""

    median_ms: float | None = None      # None: no reply
    min_ms: float | None = None


@dataclass(kw_only=True)
class Tolerance(Record):
    rtt_ms: float | None = None
    rate_mbps: float | None = None


@dataclass(kw_only=True)
class Verification(Record):
    """cells/<id>/verification.json, and the cell entry's `lab`."""

    _nested: ClassVar = {"tolerance": (Tolerance, "one"), "rtt_ms": (Measure, "one"),
                         "rate_mbps": (RateMeasure, "one"), "queue_bytes": (Setting, "one"),
                         "pairs": (PathRtt, "dict")}
    ok: bool | None = None
    problems: list[str] = field(default_factory=list)
    host_cpu_steal_pct: float | None = None
    tolerance: Tolerance | None = None
    rtt_ms: Measure | None = None
    rate_mbps: RateMeasure | None = None
    queue_bytes: Setting | None = None
    method: dict | None = None
    attempt: int | None = None
    # since every pair's path is checked (left out of older runs' documents): pair -> its idle RTT
    pairs: dict[str, PathRtt] = field(default_factory=dict, metadata=OMIT_EMPTY)
    rtt_floor_ms: float | None = field(default=None, metadata=OMIT_NONE)   # no echo may be below it
    # a later cell on the same lab build: the cell whose full verification (rate probe, raw files)
    # this one shares; its RTTs are its own re-check
    shared_from: str | None = field(default=None, metadata=OMIT_NONE)

    @property
    def measured_rtt_ms(self) -> float | None:
        return self.rtt_ms.measured if self.rtt_ms else None

    @property
    def measured_rate_mbps(self) -> float | None:
        return self.rate_mbps.measured if self.rate_mbps else None


# --- a trial -------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class FlowResult(FlowDecl):
    """One flow's outcome in one trial (trial.json flows[])."""

    bursts: int | None = None
    completed_bursts: int | None = None
    bytes: float | None = None
    on_s: float | None = None
    mean_mbps: float | None = None        # bytes received / seconds the flow was on
    span_mean_mbps: float | None = None   # bytes received / (last stop - first start)
    retransmits: int | None = None
    lost_percent: float | None = None
    observed_cca: list[str] | None = None
    # a paced sender's schedule bytes given up after a stall (left out for tools without a schedule)
    skipped_bytes: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(kw_only=True)
class RttStats(Record):
    idle_ms: float | None = None
    samples: int | None = None
    median_ms: float | None = None
    p95_ms: float | None = None
    max_ms: float | None = None
    inflation_median_ms: float | None = None
    inflation_p95_ms: float | None = None
    inflation_max_ms: float | None = None


@dataclass(kw_only=True)
class CollectorCounts(Record):
    socket_samples: int | None = None
    sampler_ticks: int | None = None
    rtt_rounds: int | None = None
    # since the arrival meter (left out of older runs' documents)
    arrival_samples: int | None = field(default=None, metadata=OMIT_NONE)      # its samples, over its ports
    seconds_above_ceiling: int | None = field(default=None, metadata=OMIT_NONE)   # above the payload ceiling
    # since the RTT floor invariant: probe rounds and data sockets' srtt below the configured RTT
    rtt_rounds_below_floor: int | None = field(default=None, metadata=OMIT_NONE)
    tcpinfo_samples_below_floor: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(kw_only=True)
class TrialSummary(Record):
    """cells/<id>/trial-<k>/trial.json, and one of the cell entry's `trials`."""

    _nested: ClassVar = {"flows": (FlowResult, "list"), "rtt": (RttStats, "one"),
                         "collector": (CollectorCounts, "one")}
    trial: int | None = None
    status: str | None = None             # ok, failed, interrupted
    error: str | None = None
    started: str | None = None
    duration_s: float | None = None
    flows: list[FlowResult] = field(default_factory=list)
    jain: float | None = None
    rtt: RttStats | None = None
    collector: CollectorCounts | None = None
    host_cpu_steal_pct: float | None = None
    # since hosts are watched during trials (left out where none was lost): the lab hosts lost
    lost_hosts: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)
    # since TCP memory is watched (left out where no end host's counters could be read): the end
    # hosts' entries into TCP memory pressure during the trial, and the ms of those that ended
    tcp_memory_pressures: int | None = field(default=None, metadata=OMIT_NONE)
    tcp_memory_pressure_ms: int | None = field(default=None, metadata=OMIT_NONE)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def flow(self, name: str) -> FlowResult | None:
        return next((f for f in self.flows if f.name == name), None)


# --- statistics over a cell's trials -------------------------------------------------------------

@dataclass(kw_only=True)
class FlowStats(Record):
    mean_mbps: float | None = None
    std_mbps: float | None = None
    n: int = 0


@dataclass(kw_only=True)
class JainStats(Record):
    mean: float | None = None
    std: float | None = None
    n: int = 0


@dataclass(kw_only=True)
class CellStats(Record):
    _nested: ClassVar = {"flows": (FlowStats, "dict"), "jain": (JainStats, "one")}
    flows: dict[str, FlowStats] = field(default_factory=dict)
    jain: JainStats | None = None


def cell_stats(trials: list[TrialSummary]) -> CellStats:
    """Mean, sample std and count of each flow's mean_mbps and of Jain's index over the ok trials
    (one trial has no spread: std 0.0)."""
    good = [t for t in trials if t.ok]
    names = dict.fromkeys(f.name for t in good for f in t.flows if f.name)
    flows = {}
    for name in names:
        stats = mean_std(f.mean_mbps for t in good for f in t.flows if f.name == name)
        flows[name] = FlowStats(mean_mbps=stats["mean"], std_mbps=stats["std"], n=stats["n"])
    jain = mean_std(t.jain for t in good)
    return CellStats(flows=flows, jain=JainStats(mean=jain["mean"], std=jain["std"], n=jain["n"]))


# --- a cell --------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class CellEntry(Record):
    """One cell of summary.json: its declaration, its lab verification, its trials and their
    statistics. The writers change it only through the methods below, which are idempotent, so
    several writers handed the same entry (a file store and a database) agree."""

    _nested: ClassVar = {"topology": (Topology, "one"), "flows": (FlowDecl, "list"), "lab": (Verification, "one"),
                         "trials": (TrialSummary, "list"), "stats": (CellStats, "one")}
    id: str | None = None
    profile: str | None = None
    scenario: str | None = None
    params: dict = field(default_factory=dict)
    topology: Topology = field(default_factory=Topology)
    labels: dict | None = None
    reference: dict | None = None
    status: str | None = None             # pending, running, complete, failed, refused, interrupted, not run
    flows: list[FlowDecl] = field(default_factory=list)
    lab: Verification | None = None
    trials: list[TrialSummary] = field(default_factory=list)
    stats: CellStats | None = None
    jain: float | None = None             # stats.jain.mean, for a quick look
    error: str | None = field(default=None, metadata=OMIT_NONE)

    def trial(self, number: int) -> TrialSummary | None:
        return next((t for t in self.trials if t.trial == number), None)

    @property
    def ok_trials(self) -> list[TrialSummary]:
        return [t for t in self.trials if t.ok]

    def set_lab(self, verification: Verification) -> None:
        self.lab = verification

    def add_trial(self, trial: TrialSummary) -> None:
        """Add (or replace, by number) a trial and recompute the statistics."""
        self.trials = [t for t in self.trials if t.trial != trial.trial] + [trial]
        self.refresh_stats()

    def refresh_stats(self) -> None:
        self.stats = cell_stats(self.trials)
        self.jain = self.stats.jain.mean if self.stats.jain else None

    def end(self, status: str, error: str | None = None) -> None:
        self.status = status
        if error:
            self.error = error
