"""The JSON objects among a tool's output lines: helpers print one object per line, and a line cut
short by a kill or a stray warning is skipped, not fatal."""

from __future__ import annotations

import json
from collections.abc import Iterator


def json_lines(text: str) -> Iterator[dict]:
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            yield item
