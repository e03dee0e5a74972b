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
_KEY = rf'(?:{_BARE}|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=\s*(.*)$")
_INLINE_KEY = re.compile(rf"(?:^|[{{,])\s*({_DOTTED})\s*=")


def _split_key(dotted: str) -> tuple[str, ...]:
    return tuple(_unquote(p) for p in re.findall(_KEY, dotted))


def _unquote(part: str) -> str:
    if part[:1] == "'":
        return part[1:-1]
    if part[:1] == '"' and "\\" in part:
        # escapes (\u001f, \") name the key tomllib returns; tomllib decodes them as it did the file
        try:
            return tomllib.loads(f"k = {part}")["k"]
        except tomllib.TOMLDecodeError:       # text the scanner took for a key, inside a string
            return part[1:-1]
    return part[1:-1] if part[:1] == '"' else part


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
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(path, None, (), None, f"cannot read the file: {exc.strerror}") from exc
    try:
        # decoded from bytes: read_text()'s universal newlines would turn a stray CR (not valid
        # TOML) into a line break, and the lines counted here would differ from tomllib's
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(path, line, (), None,
                          f"not UTF-8 text: byte {raw[exc.start]:#04x} at offset {exc.start}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = _decode_error_line(str(exc), text)
        raise ConfigError(path, line, (), None, f"not valid TOML: {exc}") from exc
    except RecursionError:
        # tomllib recurses once per level of nested arrays and inline tables
        raise ConfigError(path, _deepest_line(text), (), None,
                          "not valid TOML here: arrays or inline tables nested too deeply") from None
    except ValueError:
        # int() refuses a decimal of more than sys.get_int_max_str_digits() digits, and tomllib
        # lets that through as a plain ValueError
        raise ConfigError(path, _longest_number_line(text), (), None,
                          f"not valid TOML here: an integer beyond TOML's 64 bits ({_INT64_RANGE})") from None
    source = TomlSource(path=path, data=data, lines=_scan_lines(text))
    bad = _unusable_value(data)
    if bad is not None:
        keypath, value, allowed = bad
        shown = value if isinstance(value, str) else None    # a huge int may be too long for str()
        raise ConfigError(path, source.line_of(keypath), keypath, shown, allowed)
    return source


_INT64 = (-(2**63), 2**63 - 1)
_INT64_RANGE = "-2^63 to 2^63-1"


def _unusable_value(data) -> tuple[tuple, object, str] | None:
    """(key path, value, what is allowed) of the first value nothing downstream can handle, or
    None. Iterative: tomllib accepts nesting deeper than a recursion here would."""
    stack: list[tuple[tuple, object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and "\0" in value:
            # a NUL (\u0000) cannot be in a file name, a host or any other text these files
            # hold; the OS would refuse it later with a ValueError, far from the line
            return path, value, "text without NUL characters (\\u0000)"
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            # TOML integers are 64-bit (tomllib accepts more); a hex one of thousands of digits
            # would make every str() of it raise
            return path, value, f"an integer within TOML's 64 bits ({_INT64_RANGE})"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(reversed([(path + (key,), inner) for key, inner in items]))
    return None


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _decode_error_line(message: str, text: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    if match:
        return int(match.group(1))
    if "end of document" in message:     # an unclosed string, array or table: it ran to the end
        return _line_count(text)
    return None


def _longest_number_line(text: str) -> int:
    """The line with the longest run of digits."""
    runs = [(len(m.group()), text.count("\n", 0, m.start()) + 1) for m in re.finditer(r"[0-9_]+", text)]
    return max(runs)[1] if runs else 1


def _deepest_line(text: str) -> int:
    """The line where arrays and inline tables nest deepest (strings and comments skipped; a
    rough lexer, only to point at the line)."""
    depth = deepest = 0
    line = where = 1
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            line += 1
        elif quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif ch in "]}":
            depth -= 1
        i += 1
    return where


def _with_indices(key: tuple, array_counts: dict[tuple, int]) -> tuple:
    """[scenarios.set] after [[scenarios]] belongs to the latest scenarios entry."""
    out: tuple = ()
    for n, part in enumerate(key, start=1):
        out += (part,)
        # n counts the header's own parts: `out` grows by the indices, [a.b.c] after [[a.b]]
        # needs an index after b too
        if out in array_counts and n < len(key):
            out += (array_counts[out] - 1,)
    return out


def _scan_lines(text: str) -> dict[tuple, int]:
    lines: dict[tuple, int] = {}
    table: tuple = ()
    array_counts: dict[tuple, int] = {}
    in_multiline = None
    # TOML ends lines at \n only; splitlines() would also split at \x0c, \x85, \u2028 ... (legal
    # inside strings and comments) and shift every line after them
    for number, raw in enumerate(text.split("\n"), start=1):
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
            # the array itself and the tables a header implies ([a.b] defines a) are written here
            # too when nothing wrote them before
            for n in range(1, len(table) + 1):
                lines.setdefault(table[:n], number)
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
