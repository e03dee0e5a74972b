"""Writing the store's files: CSV tables and JSON written atomically (a crash never leaves half a file)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(["" if v is None else v for v in row] for row in rows)
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    write_text(path, json_text(data) + "\n")


def json_text(data, level: int = 0) -> str:
    """The JSON every store file is written in (indent 1), as it reads nested `level` deep in one."""
    text = json.dumps(data, indent=1, default=str)
    return text.replace("\n", "\n" + " " * level) if level else text


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def read_json(path: Path):
    with open(path) as handle:
        return json.load(handle)
