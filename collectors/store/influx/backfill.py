"""`longhaul export RUN_DIR`: ship a run to InfluxDB after the fact.

A run whose spool is complete (the mirror spooled every event) ships what is left of it. A run
without one (an old run directory, a run made without `[store] influx`) or whose spool is not
complete (its disk filled, longhaul was killed) gets its spool written anew from the run's files:
the same points the mirror would have spooled (points.py), so shipping them again overwrites
instead of duplicating.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.shipper import Shipper, ShipReport
from longhaul.collectors.store.influx.spool import SPOOL, ShipState, Spool, spool_dir, spool_files
from longhaul.collectors.store.influx.targets import Target
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.records import Verification
from longhaul.core.tables import read_json


def stored_lines(run_dir: Path, problems: list[str]) -> Iterator[str]:
    """Every point of a stored run, from its files (the run's own point and documents last, as a
    run spools them at its end)."""
    run_dir = Path(run_dir)
    stored = load_store(run_dir)
    manifest = stored.manifest
    yield from points.source_lines(manifest, run_dir)
    for entry in stored.entries:
        yield from points.cell_lines(manifest, entry)
        verification = fmt.cell_dir(run_dir, entry.id) / fmt.VERIFICATION
        if verification.is_file():
            yield from points.verification_lines(manifest, entry, Verification.from_dict(read_json(verification)))
        for trial in entry.trials:
            yield from points.trial_lines(manifest, entry, trial, fmt.trial_dir(run_dir, entry.id, trial.trial), problems)
    yield from points.run_lines(manifest, stored.summary if (run_dir / fmt.SUMMARY).is_file() else None)


def rebuild_spool(run_dir: Path, problems: list[str], batch_lines: int = 5000) -> int:
    """spool.lp written anew from the run's files (its shipped offset back to 0); lines written."""
    directory = spool_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SPOOL).unlink(missing_ok=True)
    spool = Spool(directory, batch_lines)
    spool.append(stored_lines(run_dir, problems))
    spool.flush()
    state = ShipState(directory)
    state.files[SPOOL] = 0
    state.complete = True
    state.save()
    return spool.written


@dataclass
class Export:
    rebuilt: bool
    report: ShipReport
    problems: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def export_run(run_dir: Path, target: Target, rebuild: bool = False, batch_lines: int = 5000) -> Export:
    """Ship the run's spool (rebuilt first when it is missing or incomplete, or asked). Raises
    TargetDown when the server cannot take it; the offsets reached are kept, so run it again."""
    problems: list[str] = []
    state = ShipState(spool_dir(run_dir))
    rebuilt = rebuild or not state.complete or not (spool_dir(run_dir) / SPOOL).is_file()
    if rebuilt:
        rebuild_spool(run_dir, problems, batch_lines)
    shipper = Shipper(target, spool_dir(run_dir), batch_lines)
    shipper.ship_available()
    return Export(rebuilt, shipper.report, problems, [p.name for p in spool_files(spool_dir(run_dir))])


def spooled_counts(run_dir: Path) -> Counter:
    """Points per measurement in the run's spool files, each (series, time) once: what the
    database must hold for this run when everything is shipped."""
    seen: set[tuple[str, str]] = set()
    counts: Counter = Counter()
    for path in spool_files(spool_dir(run_dir)):
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key = _series_and_time(line)
                if key is not None and key not in seen:
                    seen.add(key)
                    counts[_measurement(key[0])] += 1
    return counts


def _series_and_time(line: str) -> tuple[str, str] | None:
    """(measurement and tags, timestamp) of a line protocol line; None for blank or comment lines."""
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        return None
    series = _unescaped_split(line, " ")[0]
    return series, line.rsplit(" ", 1)[1]


def _unescaped_split(text: str, sep: str) -> list[str]:
    """Split at the first unescaped separator (line protocol escapes spaces and commas in keys)."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == sep:
            return [text[:i], text[i + 1:]]
        i += 1
    return [text]


def _measurement(series: str) -> str:
    return _unescaped_split(series, ",")[0].replace("\\ ", " ").replace("\\,", ",")
