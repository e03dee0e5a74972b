"""A run directory rebuilt from InfluxDB (`longhaul report --from-influx RUN_ID`).

The database holds the run's documents (lh_doc: manifest, summary, config, profiles, each cell's
verification and each trial's trial.json, events.csv and decisions.csv) and its trial tables as
series (lh_throughput, lh_rtt, lh_tcpinfo). Writing them back as files gives a directory the
store's reader and the report read like any other; the tools' raw output is not in the database,
so sections that need it say it is missing, as they do for a run cut short.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.targets import Target
from longhaul.core.tables import write_json

COLUMNS = {fmt.THROUGHPUT_CSV: fmt.THROUGHPUT_COLUMNS, fmt.RTT_CSV: fmt.RTT_COLUMNS,
           fmt.TCPINFO_CSV: fmt.TCPINFO_COLUMNS}


class NotInDatabase(LookupError):
    """The database has no run by that id."""


def rebuild_run(target: Target, run_id: str, out: Path) -> Path:
    """Write run `run_id` from the database into out/run_id; the directory."""
    docs: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for row in target.rows(points.DOC, {"run": run_id}):
        docs[row["doc"]].append((int(row["part"]), row["text"], row["parts"]))
    if fmt.MANIFEST not in docs:
        raise NotInDatabase(f"{target.destination} has no run {run_id!r} (no {points.DOC} manifest point)")
    run_dir = Path(out) / run_id
    for rel, parts in docs.items():
        path = run_dir / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ValueError(f"document path {rel!r} leaves the run directory")
        text = points.doc_text(parts)
        if rel.endswith(".json"):           # as the file store writes them
            write_json(path, json.loads(text))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
    summary = json.loads((run_dir / fmt.SUMMARY).read_text()) if (run_dir / fmt.SUMMARY).is_file() else {}
    for cell in summary.get("cells") or []:
        if not cell.get("trials"):
            continue
        for name, table in points.TABLES.items():      # one query a table and cell, not a trial
            by_trial: dict[str, list[dict]] = defaultdict(list)
            for row in target.rows(table.measurement, {"run": run_id, "cell": cell["id"]}):
                by_trial[row["trial"]].append(row)
            for trial, rows in by_trial.items():
                rows.sort(key=lambda r: (r["time"], r.get("flow") or "", r.get("stream") or ""))
                _write_table(fmt.trial_dir(run_dir, cell["id"], int(trial)) / name, COLUMNS[name], rows)
    return run_dir


def _write_table(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        for row in rows:
            out.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
