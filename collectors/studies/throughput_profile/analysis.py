"""Throughput profiles (seed 001, sections 1 and 2.2): the tidy trial table, profile means, box stats.

Every analysis of the throughput-profile study starts from one tidy table of trials, one row per
(configuration, RTT, repeat): `cca, streams, buffer, rtt_ms, repeat, mbps` and the path of the
trial's per-second trace. The table comes either from a longhaul run directory (docs/results-format.md)
or from a user's CSV with exactly those columns, so that measurements made elsewhere (the paper's,
another tool's) go through the same analysis.

The throughput profile of a configuration (V, n, B) is the mean of the repeats' average throughput at
each RTT: the profile mean of section 5.2, Theta_hat_O(tau_k) = (1/n_k) sum_i theta(tau_k, t_i^k).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from longhaul.collectors.store.format import THROUGHPUT_CSV
from longhaul.collectors.store.reader import StoreError, load_store
from longhaul.collectors.store.records import FlowDecl

TRIAL_COLUMNS = ("cca", "streams", "buffer", "rtt_ms", "repeat", "mbps")
TRACE_KEY_COLUMNS = ("cca", "streams", "buffer", "rtt_ms", "repeat")
BUFFER_ORDER = {"default": 0, "normal": 1, "large": 2}  # seed 001 Table 1, smallest first


class InputError(ValueError):
    """A table we cannot use: where (file, line), the bad value and what is allowed."""

    def __init__(self, path, line: int | None, value, allowed: str):
        self.path, self.line, self.value, self.allowed = Path(path), line, value, allowed
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {value!r}: {allowed}" if value is not None else f"{where}: {allowed}")


@dataclass(frozen=True)
class Config:
    """A transport configuration (V, n, B) of section 3.1: variant, parallel streams, buffer."""

    cca: str
    streams: int
    buffer: str

    @property
    def label(self) -> str:
        return f"{self.cca} / {self.streams} / {self.buffer}"

    def sort_key(self) -> tuple:
        return (self.cca, buffer_rank(self.buffer), self.streams)


def buffer_rank(buffer: str) -> tuple:
    """default < normal < large < explicit sizes (by bytes) < anything else (by name)."""
    if buffer in BUFFER_ORDER:
        return (0, BUFFER_ORDER[buffer], "")
    return (1, int(buffer), "") if buffer.isdigit() else (2, 0, buffer)


@dataclass
class Trace:
    """One trial's 1 s throughput trace: aggregate and per stream (Mb/s), as in seed 001 Fig. 11."""

    t_s: np.ndarray
    aggregate: np.ndarray
    streams: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Trial:
    cca: str
    streams: int
    buffer: str
    rtt_ms: float
    repeat: int
    mbps: float
    trace: Path | Trace | None = None   # a file in throughput.csv format, or a trace already loaded
    flow: str | None = None             # which flow of the trace file (store: the foreground flow)
    capacity_mbps: float | None = None  # the bottleneck rate, when the source knows it

    @property
    def config(self) -> Config:
        return Config(self.cca, self.streams, self.buffer)


@dataclass
class Profile:
    """Theta_O(tau) of one configuration: the repeats' averages at every measured RTT."""

    config: Config
    rtt_ms: np.ndarray              # distinct RTTs, ascending
    samples: list[np.ndarray]       # per RTT: the average throughput of every repeat (Mb/s)
    capacity_mbps: float | None = None

    @property
    def mean(self) -> np.ndarray:
        return np.array([s.mean() for s in self.samples])

    @property
    def std(self) -> np.ndarray:
        # Sample std (ddof=1): the repeats are a sample of what the path would give.
        return np.array([s.std(ddof=1) if s.size > 1 else 0.0 for s in self.samples])

    @property
    def n(self) -> np.ndarray:
        return np.array([s.size for s in self.samples])


# ---- loading -----------------------------------------------------------------------------------

def load_trials(source: Path, traces: Path | None = None) -> list[Trial]:
    """The tidy trial table of a run directory or a CSV; `traces` adds one long trace CSV."""
    source = Path(source)
    if source.is_dir():
        try:
            trials = trials_from_store(load_store(source))
        except StoreError as exc:
            raise InputError(source, None, None, str(exc)) from None
    elif source.is_file():
        trials = read_trials_csv(source)
    else:
        raise InputError(source, None, None, "no such run directory or CSV file")
    if traces is not None:
        trials = attach_traces(trials, traces)
    if not trials:
        raise InputError(source, None, None, "no successful trials of a foreground TCP flow to analyse")
    return trials


def trials_from_store(store) -> list[Trial]:
    """One row per ok trial and foreground TCP flow of a `collectors.store.reader.StoredRun`.

    The RTT is the configured one (the sweep's value, what the profile is drawn against); the
    buffer is the cell's swept value, else what the profile fixed ([tuning] or the flow's own).
    """
    declared = {c.id: c.cell or {} for c in store.manifest.cells}
    rows = []
    for cell in store.entries:
        rtt, capacity = _number(cell.topology.rtt_ms), _number(cell.topology.bottleneck_rate_mbps)
        if rtt is None:
            continue
        full = declared.get(cell.id, {})
        roles = {f.name: f for f in cell.flows}
        for trial in cell.ok_trials:
            if not isinstance(trial.trial, int):
                continue
            path = store.trial_dir(cell.id, trial.trial) / THROUGHPUT_CSV
            for flow in trial.flows:
                decl = roles.get(flow.name) or FlowDecl()
                if (flow.role or decl.role) != "foreground" or flow.protocol == "udp":
                    continue
                mbps = _number(flow.mean_mbps)
                if mbps is None:
                    continue
                rows.append(Trial(
                    cca=str(flow.cca or decl.cca or (full.get("tuning") or {}).get("cca") or "unknown"),
                    streams=int(flow.streams or decl.streams or 1),
                    buffer=_cell_buffer(cell.params or {}, full, flow.name), rtt_ms=rtt,
                    repeat=trial.trial, mbps=mbps, trace=path if path.is_file() else None,
                    flow=flow.name, capacity_mbps=capacity))
    return rows


def _cell_buffer(params: dict, full: dict, flow: str) -> str:
    """The flow's own buffer if it has one, else the hosts' (schema.Cell.flow_buffer), read from
    the swept params first and from the manifest's full cell otherwise."""
    own = next((f.get("buffer") for f in full.get("flows") or [] if f.get("name") == flow), None)
    for value in (params.get(f"flows.{flow}.buffer"), own, params.get("tuning.buffer"),
                  (full.get("tuning") or {}).get("buffer")):
        if value is not None:
            return normalise_buffer(value)
    return "unknown"


def normalise_buffer(value) -> str:
    """Buffer names as in seed 001; sizes as plain byte counts so "1e6" and "1000000" group."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if math.isfinite(number) and number == int(number) else text


def read_trials_csv(path: Path) -> list[Trial]:
    """A user's table: columns cca,streams,buffer,rtt_ms,repeat,mbps [,trace][,capacity_mbps].

    `trace` is the path of that trial's per-second trace (throughput.csv format, relative to the
    CSV's directory); `capacity_mbps` the bottleneck rate if known.
    """
    path = Path(path)
    rows = _read_rows(path, TRIAL_COLUMNS)
    out = []
    for line, row in rows:
        trace = (row.get("trace") or "").strip()
        capacity = row.get("capacity_mbps")
        out.append(Trial(
            cca=_text(path, line, row, "cca"), streams=_int(path, line, row, "streams", 1),
            buffer=normalise_buffer(_text(path, line, row, "buffer")),
            rtt_ms=_float(path, line, row, "rtt_ms"), repeat=_int(path, line, row, "repeat", 0),
            mbps=_float(path, line, row, "mbps"),
            trace=(path.parent / trace) if trace else None,
            capacity_mbps=_float(path, line, row, "capacity_mbps") if capacity not in (None, "") else None))
    return out


def write_trials_csv(trials: list[Trial], path: Path) -> Path:
    """The tidy table as a CSV that read_trials_csv reads back (e.g. a run exported for others)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(TRIAL_COLUMNS + ("trace", "capacity_mbps"))
        for t in trials:
            trace = str(t.trace) if isinstance(t.trace, Path) else ""
            w.writerow((t.cca, t.streams, t.buffer, f"{t.rtt_ms:g}", t.repeat, f"{t.mbps:.6g}", trace,
                        "" if t.capacity_mbps is None else f"{t.capacity_mbps:g}"))
    return path


def attach_traces(trials: list[Trial], path: Path) -> list[Trial]:
    """Join one long trace CSV (cca,streams,buffer,rtt_ms,repeat,t_s,stream,mbps) onto the trials."""
    path = Path(path)
    grouped: dict[tuple, list[tuple[float, str, float]]] = {}
    for line, row in _read_rows(path, TRACE_KEY_COLUMNS + ("t_s", "stream", "mbps")):
        key = (_text(path, line, row, "cca"), _int(path, line, row, "streams", 1),
               normalise_buffer(_text(path, line, row, "buffer")), _float(path, line, row, "rtt_ms"),
               _int(path, line, row, "repeat", 0))
        grouped.setdefault(key, []).append((_float(path, line, row, "t_s"), row["stream"].strip(),
                                            _float(path, line, row, "mbps")))
    out = []
    for t in trials:
        samples = grouped.get((t.cca, t.streams, t.buffer, t.rtt_ms, t.repeat))
        out.append(t if samples is None else replace(t, trace=_trace_from_samples(samples)))
    return out


def _read_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(path, 1, None, f"missing column(s) {', '.join(missing)}; "
                                                f"the header must include {','.join(required)}")
            return [(i + 2, r) for i, r in enumerate(reader) if any((v or "").strip() for v in r.values())]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(path, None, None, f"unreadable: {exc}") from None


def _text(path, line, row, key) -> str:
    value = (row.get(key) or "").strip()
    if not value:
        raise InputError(path, line, value, f"{key} must not be empty")
    return value


def _float(path, line, row, key) -> float:
    text = (row.get(key) or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(path, line, text, f"{key} must be a number >= 0")
    return value


def _int(path, line, row, key, minimum: int) -> int:
    text = (row.get(key) or "").strip()
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < minimum:
        raise InputError(path, line, text, f"{key} must be a whole number >= {minimum}")
    return int(number)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# ---- traces --------------------------------------------------------------------------------------

def load_trace(trial: Trial) -> Trace | None:
    """The trial's trace, or None when it has none or the file is unreadable (the caller notes it)."""
    if isinstance(trial.trace, Trace):
        return trial.trace
    if trial.trace is None:
        return None
    try:
        return read_trace(trial.trace, trial.flow)
    except (OSError, ValueError, csv.Error, UnicodeDecodeError):
        return None


def read_trace(path: Path, flow: str | None = None) -> Trace | None:
    """A throughput.csv (t_s,[flow,]stream,mbps); rows of other flows are skipped.

    csv.reader and column-wise numpy parsing rather than DictReader and float() per cell: a full
    sweep has millions of trace rows and this is the analysis' hot loop.
    """
    with Path(path).open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None) or []
        col = {name: i for i, name in enumerate(header)}
        if not {"t_s", "stream", "mbps"} <= col.keys():
            raise ValueError(f"{path}: not a throughput trace (needs t_s, stream, mbps)")
        it, ist, im, ifl = col["t_s"], col["stream"], col["mbps"], col.get("flow")
        width = max(it, ist, im, ifl or 0)
        # a truncated last line is too short; rows of other flows are not ours
        rows = [r for r in reader if len(r) > width and (flow is None or ifl is None or r[ifl] == flow)]
    if not rows:
        return None
    cols = list(zip(*rows))
    t, mbps = _floats(cols[it]), _floats(cols[im])
    keep = np.isfinite(t) & np.isfinite(mbps)
    if not keep.any():
        return None
    return _trace_from_groups(t, mbps, {k: v[keep[v]] for k, v in _group(cols[ist]).items()})


def _floats(cells) -> np.ndarray:
    try:
        return np.fromiter(map(float, cells), dtype=float, count=len(cells))
    except ValueError:  # an empty or garbled cell: that row alone is dropped
        return np.array([_to_float(c) for c in cells])


def _to_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _trace_from_samples(samples: list[tuple[float, str, float]]) -> Trace:
    t, names, mbps = zip(*samples)
    return _trace_from_groups(np.array(t, dtype=float), np.array(mbps, dtype=float), _group(names))


def _group(names) -> dict[str, np.ndarray]:
    """Row indices per stream name, in one pass (rows of streams interleave in a trace)."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    return {k: np.array(v) for k, v in groups.items()}


def _trace_from_groups(t: np.ndarray, mbps: np.ndarray, groups: dict[str, np.ndarray]) -> Trace:
    """Per stream name the row indices; each series is put in time order."""
    series = {}
    for name, idx in groups.items():
        if idx.size:
            order = np.argsort(t[idx], kind="stable")
            series[name] = (t[idx][order], mbps[idx][order])
    agg = series.pop("all", None)
    streams = {k: v[1] for k, v in sorted(series.items(), key=lambda kv: _stream_order(kv[0]))}
    if agg is None:  # only per-stream rows: the aggregate is their sum, second by second
        length = min(v.size for v in streams.values())
        first = next(iter(series.values()))[0]
        agg = (first[:length], sum(v[:length] for v in streams.values()))
    return Trace(t_s=agg[0], aggregate=agg[1], streams=streams)


def _stream_order(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


# ---- profiles and box statistics -------------------------------------------------------------

def build_profiles(trials: list[Trial]) -> dict[Config, Profile]:
    """The profile of every configuration, ordered by variant, buffer, streams (section 2.2)."""
    grouped: dict[Config, dict[float, list[float]]] = {}
    capacity: dict[Config, float] = {}
    for t in trials:
        grouped.setdefault(t.config, {}).setdefault(t.rtt_ms, []).append(t.mbps)
        if t.capacity_mbps:
            capacity[t.config] = max(capacity.get(t.config, 0.0), t.capacity_mbps)
    out = {}
    for config in sorted(grouped, key=Config.sort_key):
        rtts = sorted(grouped[config])
        out[config] = Profile(config, np.array(rtts), [np.array(grouped[config][r]) for r in rtts],
                              capacity.get(config))
    return out


def box_stats(values) -> dict:
    """Tukey box: quartiles, whiskers at the last sample within 1.5 IQR, the rest as outliers."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return {"n": 0}
    q1, median, q3 = (float(v) for v in np.percentile(x, [25, 50, 75]))
    iqr = q3 - q1
    inside = x[(x >= q1 - 1.5 * iqr) & (x <= q3 + 1.5 * iqr)]
    return {"n": int(x.size), "mean": float(x.mean()), "min": float(x[0]), "q1": q1, "median": median,
            "q3": q3, "max": float(x[-1]), "whisker_low": float(inside[0]),
            "whisker_high": float(inside[-1]),
            "outliers": [float(v) for v in x[(x < inside[0]) | (x > inside[-1])]]}


def distinct_rtts(trials: list[Trial]) -> list[float]:
    return sorted({t.rtt_ms for t in trials})


def capacity_of(trials: list[Trial], profiles: dict[Config, Profile], given: float | None = None) -> float:
    """The rate that scales profiles into (0, 1) for the sigmoid fit (section 2.3).

    The bottleneck rate when known (given, or the store's topology); otherwise the best profile
    mean anywhere in the sweep, which on a dedicated path is the closest measured stand-in for it.
    """
    if given:
        return float(given)
    known = [t.capacity_mbps for t in trials if t.capacity_mbps]
    if known:
        return float(max(known))
    return float(max(p.mean.max() for p in profiles.values()))
