"""A line-protocol reader with Telegraf's unescaping rules (plugins/parsers/influx/escape.go): what
the tests read Telegraf's and the tcp_info probe's output with, written apart from the writer
(drivers/agents/line_protocol.py) so that each checks the other."""

from __future__ import annotations

from pathlib import Path

_TAG_UNESCAPE = {",": ",", " ": " ", "=": "=", '"': '"'}
_NAME_UNESCAPE = {",": ",", " ": " "}


def _read(text: str, i: int, stops: str, unescape: dict) -> tuple[str, int]:
    out = []
    while i < len(text) and text[i] not in stops:
        if text[i] == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(unescape.get(nxt, "\\" + nxt))   # an escape Telegraf does not know stays as is
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out), i


def _string_field(text: str, i: int) -> tuple[str, int]:
    out, i = [], i + 1
    while text[i] != '"':
        if text[i] == "\\" and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out), i + 1


def parse_line(text: str) -> tuple[str, dict, dict, int | None]:
    name, i = _read(text, 0, ", ", _NAME_UNESCAPE)
    tags = {}
    while text[i] == ",":
        key, i = _read(text, i + 1, "=", _TAG_UNESCAPE)
        tags[key], i = _read(text, i + 1, ", ", _TAG_UNESCAPE)
    fields = {}
    i += 1
    while True:
        key, i = _read(text, i, "=", _TAG_UNESCAPE)
        i += 1
        if text[i] == '"':
            fields[key], i = _string_field(text, i)
        else:
            raw, i = _read(text, i, ", ", {})
            fields[key] = (int(raw[:-1]) if raw.endswith(("i", "u")) else raw == "true" if raw in ("true", "false")
                           else float(raw))
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        break
    stamp = int(text[i + 1:]) if i < len(text) else None
    return name, tags, fields, stamp


def parse_file(path: Path) -> list[tuple[str, dict, dict, int | None]]:
    return [parse_line(text) for text in path.read_text().splitlines() if text.strip()]


# -- escaping ---------------------------------------------------------------------------------------
