"""Labelled RTT time-series for background recognition (seed 000 §5.2-5.3): format, loader, windows.

A dataset is a CSV `<name>.csv` with the header `class,probing,run,t_s,rtt_ms` (one probe value
per row) and a sidecar `<name>.json` with the lab conditions and the class definitions; the
format is documented in docs/ops.md. A `run` is one continuous recording of one class in one
probing mode: windows never span two runs, nor a round the probe missed; they sit on the run's
clock (window k is seconds k*w to k*w + w of the run).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np

from longhaul.core.documents import DocumentFormat, DocumentVersionError

DATASET = DocumentFormat("longhaul-ops-dataset", 1, "an OPS recording's sidecar")
HEADER = ("class", "probing", "run", "t_s", "rtt_ms")
PROBING = ("passive", "active")
CCAS = ("cubic", "bbr")
# Background flows of each class: (sender of the pair, congestion control). Background runs on
# S1/D1 and, for a second stream, S2/D2; the foreground uses S3/D3 and the probe S4/D4 (§5.2).
# Why these six: docs/ops.md ("The six background classes").
CLASSES: dict[str, list[tuple[str, str]]] = {
    "none": [],
    "cubic": [("S1", "cubic")],
    "cubic2": [("S1", "cubic"), ("S2", "cubic")],
    "bbr": [("S1", "bbr")],
    "bbr2": [("S1", "bbr"), ("S2", "bbr")],
    "cubic_bbr": [("S1", "cubic"), ("S2", "bbr")],
}
# The same classes as the congestion controls of their background streams, in pair order (S1, S2):
# the form `longhaul ops record` starts them from.
BACKGROUND_CLASSES: dict[str, list[str]] = {name: [cca for _, cca in flows] for name, flows in CLASSES.items()}
# The paper's names for the classes it names (§6.6 mentions "B1-C1" and "B1-B1").
PAPER_LABELS = {"none": "no background", "cubic": "C1", "cubic2": "C1-C1", "bbr": "B1",
                "bbr2": "B1-B1", "cubic_bbr": "B1-C1"}
# A probe round is numbered by the second it began in; one that starts up to a quarter interval
# early still counts as its own second (rounds begin a few ms after their second, never much before).
ROUND_SLACK = 0.25


class DatasetError(ValueError):
    """A dataset that cannot be used: names the file, line or key, the value and what is allowed."""

    def __init__(self, path, line: int | None, key: tuple, value, allowed: str):
        self.path, self.line, self.key, self.value, self.allowed = Path(path), line, tuple(key), value, allowed
        where = f"{path}:{line}" if line else str(path)
        key_text = ".".join(str(k) for k in key)
        shown = "" if value is None else f" = {value!r}"
        super().__init__(f"{where}: {key_text + shown + ': ' if key_text else ''}{allowed}")


class Run(NamedTuple):
    """One continuous recording: its rows in time order."""

    run: str
    cls: str
    probing: str
    t_s: np.ndarray
    rtt_ms: np.ndarray


@dataclass
class Dataset:
    path: Path
    meta: dict
    runs: list[Run]
    files: tuple[Path, ...] = ()      # a joined dataset's recordings (join); empty: `path` alone

    @property
    def paths(self) -> tuple[Path, ...]:
        return self.files or (self.path,)

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    @property
    def lab(self) -> dict:
        return dict(self.meta.get("lab") or {})

    @property
    def interval_s(self) -> float:
        return float((self.meta.get("probe") or {}).get("interval_s", 1.0))

    def probings(self) -> list[str]:
        present = {r.probing for r in self.runs}
        return [p for p in PROBING if p in present]


def class_flows(classes: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """Background flows per class, for the recorder: {"cubic_bbr": [("S1", "cubic"), ("S2", "bbr")]}."""
    source = CLASSES if classes is None else classes
    return {name: [tuple(f) for f in (v["flows"] if isinstance(v, dict) else v)]
            for name, v in source.items()}


def sidecar_path(csv_path: Path) -> Path:
    return Path(csv_path).with_suffix(".json")


def default_meta(lab: dict | None = None, **extra) -> dict:
    """A sidecar for the built-in six classes; `extra` adds keys (probe, active_profile, manifest)."""
    classes = {name: {"flows": [list(f) for f in flows], "paper_label": PAPER_LABELS[name]}
               for name, flows in CLASSES.items()}
    meta = {**DATASET.stamp(), "lab": dict(lab or {}), "classes": classes,
            "probe": {"interval_s": 1.0, "pings": 10, "ping_gap_ms": 1}}
    meta.update(extra)
    return meta


# ---- writing -----------------------------------------------------------------------------------

def write(csv_path: Path, rows: Iterable[tuple], meta: dict) -> Path:
    """Write rows (class, probing, run, t_s, rtt_ms) and the sidecar; validates the sidecar first."""
    csv_path = Path(csv_path)
    meta = dict(meta, classes=normalise_classes(sidecar_path(csv_path), meta.get("classes")))
    _check_meta(sidecar_path(csv_path), meta)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(HEADER)
        for cls, probing, run, t_s, rtt in rows:
            out.writerow((cls, probing, run, f"{float(t_s):.3f}", f"{float(rtt):.3f}"))
    sidecar_path(csv_path).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return csv_path


# ---- loading and validation --------------------------------------------------------------------

def load(csv_path: Path) -> Dataset:
    """Read and validate a dataset; raises DatasetError naming the first problem found."""
    csv_path = Path(csv_path)
    side = sidecar_path(csv_path)
    meta = _read_meta(side)
    meta["classes"] = normalise_classes(side, meta.get("classes"))
    _check_meta(side, meta)
    return Dataset(path=csv_path, meta=meta, runs=_read_runs(csv_path, set(meta["classes"])))


def _read_meta(side: Path) -> dict:
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(side, None, (), None, f"cannot read the sidecar: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise DatasetError(side, exc.lineno, (), None, f"not valid JSON: {exc.msg}") from exc
    if not isinstance(meta, dict):
        raise DatasetError(side, None, (), None, "the sidecar must be a JSON object")
    return meta


def normalise_classes(side: Path, classes):
    """Sidecar classes as {name: {"flows": [[sender, cca], ...], ...}}. Also accepted, as the
    recorder may write them: {name: ["cubic", "bbr"]} (streams on S1, S2, ... in order) and
    {name: [["S1", "cubic"], ...]}. Anything else is left for _check_meta to reject."""
    if not isinstance(classes, dict):
        return classes
    out = {}
    for name, spec in classes.items():
        if isinstance(spec, list) and all(isinstance(c, str) for c in spec):
            spec = {"flows": [[f"S{i + 1}", cca] for i, cca in enumerate(spec)]}
        elif isinstance(spec, list):
            spec = {"flows": spec}
        out[name] = spec
    return out


def _check_meta(side: Path, meta: dict) -> None:
    try:
        DATASET.check(meta, side)
    except DocumentVersionError as e:
        raise DatasetError(side, None, (e.key,), meta.get(e.key), e.reason) from None
    classes = meta.get("classes")
    if not isinstance(classes, dict) or len(classes) < 2:
        raise DatasetError(side, None, ("classes",), None, "an object of at least two classes")
    for name, spec in classes.items():
        flows = spec.get("flows") if isinstance(spec, dict) else None
        if not isinstance(flows, list) or not all(
                isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f) for f in flows):
            raise DatasetError(side, None, ("classes", name, "flows"), flows,
                               'a list of ["<sender>", "<cca>"] pairs (empty for no background)')
    if not isinstance(meta.get("lab", {}), dict):
        raise DatasetError(side, None, ("lab",), meta.get("lab"), "an object of lab conditions")
    interval = (meta.get("probe") or {}).get("interval_s", 1.0)
    if not isinstance(interval, (int, float)) or not interval > 0:
        raise DatasetError(side, None, ("probe", "interval_s"), interval, "a positive number of seconds")


def _read_runs(csv_path: Path, classes: set[str]) -> list[Run]:
    try:
        fh = open(csv_path, newline="", encoding="utf-8")
    except OSError as exc:
        raise DatasetError(csv_path, None, (), None, f"cannot read the CSV: {exc.strerror}") from exc
    rows: dict[str, list] = {}
    with fh:
        reader = csv.reader(fh)
        header = tuple(next(reader, ()))
        if header != HEADER:
            raise DatasetError(csv_path, 1, (), ",".join(header), f"the header must be {','.join(HEADER)}")
        for line, rec in enumerate(reader, start=2):
            _add_row(csv_path, line, rec, classes, rows)
    if not rows:
        raise DatasetError(csv_path, None, (), None, "no data rows")
    return [Run(run, c, p, np.asarray(t), np.asarray(v)) for run, (c, p, t, v, _) in rows.items()]


def _add_row(path: Path, line: int, rec: list, classes: set[str], rows: dict) -> None:
    if len(rec) != len(HEADER):
        raise DatasetError(path, line, (), ",".join(rec), f"{len(HEADER)} fields: {','.join(HEADER)}")
    cls, probing, run, t_text, rtt_text = rec
    if cls not in classes:
        raise DatasetError(path, line, ("class",), cls, f"one of the sidecar's classes: {sorted(classes)}")
    if probing not in PROBING:
        raise DatasetError(path, line, ("probing",), probing, f"one of {list(PROBING)}")
    if not run:
        raise DatasetError(path, line, ("run",), run, "a non-empty run identifier")
    t_s, rtt = _number(path, line, "t_s", t_text), _number(path, line, "rtt_ms", rtt_text)
    if rtt <= 0:
        raise DatasetError(path, line, ("rtt_ms",), rtt_text, "a positive RTT in milliseconds")
    entry = rows.setdefault(run, [cls, probing, [], [], line])
    if (entry[0], entry[1]) != (cls, probing):
        raise DatasetError(path, line, ("run",), run, f"run {run!r} began on line {entry[4]} as "
                           f"{entry[0]}/{entry[1]}; a run is one class in one probing mode")
    if entry[2] and t_s <= entry[2][-1]:
        raise DatasetError(path, line, ("t_s",), t_text, f"increasing within run {run!r} (previous {entry[2][-1]})")
    entry[2].append(t_s)
    entry[3].append(rtt)


def _number(path: Path, line: int, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DatasetError(path, line, (key,), text, "a finite number")
    return value


# ---- windows -----------------------------------------------------------------------------------

def _check_w(w) -> int:
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
        raise ValueError(f"window length w must be a positive integer, got {w!r}")
    return int(w)


def run_windows(run: Run, interval_s: float = 1.0, w: int = 1) -> np.ndarray:
    """The run's windows on its own clock: window k holds probe rounds k*w .. k*w + w - 1 counted
    from the run's start (t_s = 0), and only complete windows count. So a window never spans a
    round the probe missed, and with active probing, whose cycle starts at t_s = 0, a window of a
    whole number of cycles always sees the same phases. (n, w)."""
    w = _check_w(w)
    if len(run.t_s) == 0:
        return np.empty((0, w))
    rounds = np.floor(np.asarray(run.t_s) / interval_s + ROUND_SLACK).astype(np.int64)
    out = []
    for k in np.unique(rounds // w):
        members = np.flatnonzero(rounds // w == k)
        if len(members) == w and len(np.unique(rounds[members])) == w:
            out.append(run.rtt_ms[members])
    return np.vstack(out) if out else np.empty((0, w))


def build_xy(dataset: Dataset, probing: str, w: int) -> tuple[np.ndarray, np.ndarray]:
    """X (n, w) windows and y (n,) class names of one probing mode, every run and segment in turn."""
    if probing not in PROBING:
        raise ValueError(f"probing {probing!r}: one of {PROBING}")
    w = _check_w(w)
    xs, ys = [], []
    for run in dataset.runs:
        if run.probing != probing:
            continue
        win = run_windows(run, dataset.interval_s, w)
        xs.append(win)
        ys.extend([run.cls] * len(win))
    if not xs:
        return np.empty((0, w)), np.asarray([], dtype=str)
    return np.vstack(xs), np.asarray(ys, dtype=str)


def summary(dataset: Dataset) -> dict:
    """Minutes recorded per probing mode and class, for reports and the docs."""
    out: dict = {}
    for run in dataset.runs:
        per = out.setdefault(run.probing, {})
        per[run.cls] = per.get(run.cls, 0.0) + len(run.rtt_ms) * dataset.interval_s / 60.0
    return out


# ---- merging -----------------------------------------------------------------------------------

# What two recordings must share to be one dataset: the lab's conditions and roles, the probe
# and the classes. The active profile and its alignment must match too when active runs are kept.
MERGE_KEYS = (("lab", "topology"), ("lab", "queue_bytes"), ("lab", "roles"), ("probe",), ("classes",))
ACTIVE_KEYS = (("lab", "active_profile"), ("active_cycle_s",), ("active_aligned",))


def _at(meta: dict, key: tuple):
    for k in key:
        meta = meta.get(k) if isinstance(meta, dict) else None
    return meta


def merge(datasets: list[Dataset], probings: Iterable[str] = PROBING) -> tuple[list[tuple], dict]:
    """Rows and sidecar of one dataset holding the runs of several recordings made under the same
    conditions (e.g. a long recording made in sessions). Runs keep their names, with `~N` (the
    source's position) added where a name repeats; the sidecar lists the sources."""
    probings = [p for p in PROBING if p in set(probings)]
    first = datasets[0]
    _same(datasets, MERGE_KEYS)
    if "active" in probings:     # only the recordings that give active runs need the same profile
        _same([d for d in datasets if "active" in d.probings()], ACTIVE_KEYS)
    rows, seen = [], set()
    for n, data in enumerate(datasets, start=1):
        for run in data.runs:
            if run.probing not in probings:
                continue
            name = run.run if run.run not in seen else f"{run.run}~{n}"
            seen.add(name)
            rows += [(run.cls, run.probing, name, t, v) for t, v in zip(run.t_s, run.rtt_ms)]
    meta = {k: v for k, v in first.meta.items() if k not in ("recorded", "duration_s", "complete")}
    meta["modes"] = probings
    meta["sources"] = [src for d in datasets for src in d.meta.get("sources") or [
        {"file": d.path.name, "recorded": d.meta.get("recorded"), "duration_s": d.meta.get("duration_s"),
         "modes": [p for p in d.probings() if p in probings], "complete": d.meta.get("complete")}]]
    # what the sidecar says of active probing comes from the sources whose active runs were kept
    active = [d for d in datasets if "active" in d.probings()] if "active" in probings else []
    meta["lab"] = dict(meta.get("lab") or {}, active_profile=_at(active[0].meta, ("lab", "active_profile"))
                       if active else None)
    for (key,) in ACTIVE_KEYS[1:]:
        meta[key] = active[0].meta.get(key) if active else None
    return rows, meta


def join(datasets: list[Dataset], probings: Iterable[str] = PROBING) -> Dataset:
    """Several recordings as one dataset in memory, as `merge` would write them: what `ops evaluate`
    and `ops train` read when given more than one, so a long recording made in sittings is never
    kept twice on disk. One recording comes back as it is."""
    if len(datasets) == 1:
        return datasets[0]
    rows, meta = merge(datasets, probings)
    runs: dict[str, tuple[str, str, list, list]] = {}
    for cls, probing, name, t_s, rtt in rows:
        entry = runs.setdefault(name, (cls, probing, [], []))
        entry[2].append(t_s)
        entry[3].append(rtt)
    return Dataset(path=datasets[0].path, meta=meta, files=tuple(p for d in datasets for p in d.paths),
                   runs=[Run(n, c, p, np.asarray(t), np.asarray(v)) for n, (c, p, t, v) in runs.items()])


def check_held_out(train: Dataset, test: Dataset, probings: Iterable[str]) -> None:
    """A recording tests a model trained on another only if both were made under the same lab,
    roles, probe and classes (and, for active probing, the same burst profile): otherwise the
    accuracy would measure the difference in conditions, not recognition."""
    _same([train, test], MERGE_KEYS, "to test a model trained on it")
    if "active" in set(probings):
        _same([train, test], ACTIVE_KEYS, "to test a model trained on it")


def _same(datasets: list[Dataset], keys, purpose: str = "to merge") -> None:
    for other in datasets[1:]:
        for key in keys:
            if _at(other.meta, key) != _at(datasets[0].meta, key):
                raise DatasetError(sidecar_path(other.path), None, key, _at(other.meta, key),
                                   f"the same as {sidecar_path(datasets[0].path)} ({_at(datasets[0].meta, key)!r}) {purpose}")
