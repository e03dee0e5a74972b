"""Read TOML while remembering where each key was written, so errors can name file and line.

tomllib gives values but no positions; this scanner walks the same text once and maps every key
path (as tuples like ("flows", 1, "cca")) to the line that set it. It understands table headers,
arrays of tables, dotted keys and one-line inline tables, which is all our config files use; a key
it cannot place falls back to its nearest enclosing table's line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.core.errors import ConfigError

_BARE = r"[A-Za-z0-9_-]+"
_KEY = rf'(?:{_BARE}|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=\s*(.*)$")
_INLINE_KEY = re.compile(rf"(?:^|[{{,])\s*({_DOTTED})\s*=")


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_KEY, dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


@dataclass
class TomlSource:
    """A parsed TOML file: its data, its path, and the line of every key."""

    path: Path
    data: dict
    lines: dict[tuple, int] = field(default_factory=dict)

    def line_of(self, keypath: tuple) -> int | None:
        """Line of the key, or of the nearest enclosing table that has one."""
        path = tuple(keypath)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def load(path: Path) -> TomlSource:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, None, (), None, f"cannot read the file: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = _decode_error_line(str(exc))
        raise ConfigError(path, line, (), None, f"not valid TOML: {exc}") from exc
    return TomlSource(path=path, data=data, lines=_scan_lines(text))


def _decode_error_line(message: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


def _with_indices(key: tuple, array_counts: dict[tuple, int]) -> tuple:
    """[scenarios.set] after [[scenarios]] belongs to the latest scenarios entry."""
    out: tuple = ()
    for part in key:
        out += (part,)
        if out in array_counts and len(out) < len(key):
            out += (array_counts[out] - 1,)
    return out


def _scan_lines(text: str) -> dict[tuple, int]:
    lines: dict[tuple, int] = {}
    table: tuple = ()
    array_counts: dict[tuple, int] = {}
    in_multiline = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if in_multiline in raw:
                in_multiline = None
            continue
        header = _HEADER.match(raw)
        if header:
            key = _split_key(header.group(2))
            key = _with_indices(key, array_counts)
            if header.group(1) == "[[":
                index = array_counts.get(key, 0)
                array_counts[key] = index + 1
                table = key + (index,)
            else:
                table = key
            lines.setdefault(table, number)
            continue
        assign = _ASSIGN.match(raw)
        if not assign:
            continue
        parts = _split_key(assign.group(1))
        for n in range(1, len(parts) + 1):  # a dotted key also defines its prefixes
            lines.setdefault(table + parts[:n], number)
        key = table + parts
        rest = assign.group(2)
        for quote in ('"""', "'''"):
            if rest.count(quote) == 1:
                in_multiline = quote
        if rest.lstrip().startswith("{"):
            for inner in _INLINE_KEY.findall(rest):
                lines.setdefault(key + _split_key(inner), number)
    return lines
