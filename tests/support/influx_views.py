"""The common views docs/telemetry.md documents (one block per query language), and the stored v1
fixture run as a second run on another kernel: what the InfluxDB 1.x and 2.x query tests share."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from longhaul.core.tables import read_json, write_json

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "run-v1" / "20261123-222341-a39045"
OTHER = "20261124-101500-b0b0b0"


def views(language: str, comment: str) -> dict[str, str]:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    out = {}
    for block in blocks:
        first, _, rest = block.partition("\n")
        assert first.startswith(f"{comment} view: "), block
        out[first.removeprefix(f"{comment} view: ").strip()] = rest.strip()
    return out



def variant(tmp_path: Path) -> Path:
    """The fixture as a second run on another kernel."""
    run = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / OTHER))
    manifest = read_json(run / "manifest.json")
    manifest["run_id"], manifest["host"]["kernel"] = OTHER, "6.1.0-28-amd64"
    manifest["started"] = "2026-11-24T10:15:00Z"
    write_json(run / "manifest.json", manifest)
    summary = read_json(run / "summary.json")
    summary["run_id"] = OTHER
    write_json(run / "summary.json", summary)
    return run
