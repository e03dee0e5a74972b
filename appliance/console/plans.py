"""The planning page: the facility plans under the plans folder (`longhaul plan` writes one folder
per plan: its plan.json and, when the trace was replayed through the lab, replay/replay.json), each
read through its document format and shown as the planning report renders it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from longhaul.appliance.console.index import NotFound, folder_in
from longhaul.collectors.studies.planning.replay_record import REPLAY_JSON, read_replay
from longhaul.collectors.studies.planning.sweep import PLAN_JSON, REPLAY_DIR, headline, read_plan

REPLAY_PATH = Path(REPLAY_DIR) / REPLAY_JSON


@dataclass(frozen=True)
class PlanRow:
    name: str                 # the plan's folder
    created: str
    trace: str
    transfers: int
    span_h: float
    peak_gbps: float
    mean_gbps: float
    configurations: int
    replayed: bool
    headline: tuple[str, ...]
    problem: str = ""         # the folder's plan.json does not read: why


def list_plans(root: Path | None) -> list[PlanRow]:
    """Every plan under root, newest first (by folder name, which ends in its time)."""
    if root is None or not Path(root).is_dir():
        return []
    rows = []
    for folder in sorted((p for p in Path(root).iterdir() if (p / PLAN_JSON).is_file()), reverse=True):
        try:
            doc = read_plan(folder)
            trace = doc["trace"]
            rows.append(PlanRow(folder.name, doc.get("created", ""), trace["name"], trace["transfers"],
                                trace["span_s"] / 3600, trace["logged"]["peak_bps"] / 1e9,
                                trace["logged"]["mean_bps"] / 1e9, len(doc["configs"]),
                                (folder / REPLAY_PATH).is_file(), tuple(headline(doc))))
        except (OSError, ValueError, KeyError, TypeError) as e:
            rows.append(PlanRow(folder.name, "", "", 0, 0.0, 0.0, 0.0, 0, False, (), f"{type(e).__name__}: {e}"))
    return rows


def plan_folder(root: Path | None, name: str) -> Path:
    """The plan's folder: one path segment under root, holding a plan.json (else NotFound)."""
    if root is None:
        raise NotFound(name)
    return folder_in(root, name, PLAN_JSON)


def plan_page(folder: Path) -> str:
    """The plan's report, rendered from its documents as `longhaul plan` renders plan.html."""
    from longhaul.collectors.studies.planning.report import plan_html  # matplotlib: only when shown

    replay_path = folder / REPLAY_PATH
    return plan_html(read_plan(folder), read_replay(replay_path) if replay_path.is_file() else None)
