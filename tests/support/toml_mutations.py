"""Mutated copies of longhaul's TOML files for tests/appliance/test_config_fuzz.py: a TOML serialiser
for the shapes these files use, and hypothesis strategies that mutate a file's values (parsed,
changed, written back) or its text (lines deleted, duplicated, swapped, garbage, CRLF...)."""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st
from pydantic import BaseModel

from longhaul.appliance.config.load import ConfigFile
from longhaul.appliance.config.profiles import ProfileFile
from longhaul.appliance.config.schema import Cell
from longhaul.appliance.ops.lab import OpsLabFile
from longhaul.hardware.backends.registry import BACKENDS
from longhaul.hardware.backends.ssh.inventory import Inventory

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "hardware" / "example-inventory.toml"   # its name is a value mutations use
INVENTORY_NAME = INVENTORY.stem


# -- a TOML serialiser for the shapes of our files --------------------------------------------------

@dataclass(frozen=True)
class Deep:
    """An array nested `depth` times: written as text, so that neither the serialiser nor the
    mutations recurse into it (tomllib itself recurses once per level)."""

    depth: int


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    return key if _BARE.match(key) else toml_string(key)


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Deep):
        return "[" * value.depth + "]" * value.depth
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def _table_array(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def dumps(data: dict, inline_nested: bool) -> str:
    """TOML text for `data`: top-level tables as [headers] and arrays of tables as [[headers]];
    tables below them as [a.b] sub-tables, or inline when `inline_nested`."""
    out: list[str] = []
    _write_table(out, (), data, inline_nested)
    return "\n".join(out) + "\n"


def _write_table(out: list[str], path: tuple, table: dict, inline_nested: bool) -> None:
    nested = []
    # plain keys first: after a sub-table's header they would belong to the sub-table
    for key, value in table.items():
        if (isinstance(value, dict) or _table_array(value)) and not (path and inline_nested):
            nested.append((key, value))
        else:
            out.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        header = ".".join(_key(k) for k in path + (key,))
        if isinstance(value, dict):
            out += ["", f"[{header}]"]
            _write_table(out, path + (key,), value, inline_nested)
        else:
            for item in value:
                out += ["", f"[[{header}]]"]
                _write_table(out, path + (key,), item, inline_nested)


# -- value mutations ---------------------------------------------------------------------------------

def _walk(value, path: tuple = ()):
    """(key path, value) of everything below `value`, depth first."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, inner in items:
        yield path + (key,), inner
        yield from _walk(inner, path + (key,))


def _at(data, path: tuple):
    for part in path:
        data = data[part]
    return data


UTC = dt.timezone.utc
SCALARS = [
    0, 1, -1, 2, 3, 16, 17, 576, 9000, 65536, 2**31, 2**63 - 1, 2**63, 10**30, -(10**30), 10**400,
    0.0, -0.0, 0.5, 1.5, -1.0, 1e-300, 1e308, math.inf, -math.inf, math.nan,
    True, False,
    "", " ", "x", "0", "-1", "1.5", "nan", "NaN", "inf", "-inf", "1e999", "9" * 400,
    "1" + "0" * 400 + "MB", "1" + "0" * 400 + "bdp", "1" + "0" * 400 + "p", "0bdp", "-1MB", "6MB", "400p",
    "1bdp", "true", "none", "null", "x" * 300, "a/b", "../config", "~", "~nosuchuser/key", "\x00", "a\x00b",
    "é", "line\nbreak", "\u2028", "\t", "netns", "ssh", "qemu", INVENTORY_NAME, "quickstart", "cubic", "bbr",
    "iperf3", "gridftp", "udt", "nfs", "paced-udp", "udp", "tcp", "sinusoid", "square", "bursty",
    "foreground", "background", "router", "sender", "receiver", "controller", "bottleneck", "freebsd",
    "10.1.1.2/24", "10.1.1.2", "::1/128", "0000:3b:00.0", "S1", "R1", "fg", "bg", "large", "default",
    "flows.bg.tool", "flows.fg.streams", "topology.rtt_ms", "tuning.cca", "flows.nosuch.x", "topology",
    dt.datetime(1979, 5, 27, 7, 32, tzinfo=UTC), dt.datetime(1979, 5, 27, 7, 32), dt.date(1979, 5, 27),
    dt.time(7, 32),
    Deep(40), Deep(150), Deep(3000),
]


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _field_names(model: type[BaseModel], seen: set) -> set[str]:
    """Every key a model and the models inside it accept."""
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for field in model.model_fields.values():
        for inner in _models_in(field.annotation):
            names |= _field_names(inner, seen)
    return names


def _schema_keys(*models: type[BaseModel]) -> list[str]:
    seen: set = set()
    return sorted(set().union(*(_field_names(m, seen) for m in models)))


# keys the schemas know, so that an added key is often a real one the shipped files leave out
# (options, pattern, on_s, pci ...), besides unknown keys, near misses and keys needing quotes
KEY_NAMES = _schema_keys(ConfigFile, ProfileFile, Cell, OpsLabFile, Inventory,
                         *(b.settings for b in BACKENDS.values())) + [
    "x", "Name", "NAME", "rtt", "duration", "with space", "dotted.key", "", "é", "1", "-", "flows.bg.tool"]


def _leaf(found: list) -> st.SearchStrategy:
    choices = [st.sampled_from(SCALARS), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)]
    if found:
        choices.append(st.sampled_from(found))
    return st.one_of(*choices)


def _values(data: dict) -> st.SearchStrategy:
    """Another value for a key: any type, a value found elsewhere in the file, or a container of
    them (lists of at most three: a list is a sweep axis in a profile, and the cells multiply)."""
    found = [v for _, v in _walk(data) if not isinstance(v, (dict, list))]
    subtrees = [v for _, v in _walk(data) if isinstance(v, (dict, list))]
    keys = st.one_of(st.sampled_from(KEY_NAMES), st.text(max_size=5))
    leaf = _leaf(found)
    choices = [
        leaf,
        st.lists(leaf, max_size=3),
        st.lists(st.lists(leaf, max_size=2), max_size=2),
        st.dictionaries(keys, leaf, max_size=3),
        st.lists(st.dictionaries(keys, leaf, max_size=2), min_size=1, max_size=2),
    ]
    if subtrees:
        choices.append(st.sampled_from(subtrees))
    return st.one_of(*choices).map(copy.deepcopy)


def _tweaks(old) -> list:
    """Edits of a value that keep close to it, where loaders break: a number in a string made
    huge, a name made too long for the file system, a NUL in a path, a sign flipped, one element
    more or less in a list, the same value as another type."""
    if isinstance(old, bool):
        return [not old, int(old), str(old).lower(), [old]]
    if isinstance(old, int):
        floats = [float(old), old + 0.5] if abs(old) < 2**63 else []   # a previous tweak made it huge
        return [0, -1, -old, old + 1, old * 1000, 2**63, 10**400, -(10**400), *floats, str(old),
                math.nan, math.inf, [old], [old, old + 1]]
    if isinstance(old, float):
        return [0.0, -0.0, -old, old * 1e300, math.nan, math.inf, -math.inf, 5e-324, str(old), [old],
                int(old) if math.isfinite(old) else 0]
    if isinstance(old, str):
        return ["", re.sub(r"\d+", "9" * 400, old) if re.search(r"\d", old) else "9" * 400 + old,
                re.sub(r"\d+", "0", old), old + "x" * 300, old + "\x00", "\x00", old.upper(), old[:-1], old + "x",
                "-" + old, "../" + old, old + "/", "/" + old, 1, [old], [old, old], {"x": old}]
    if isinstance(old, list):
        return [[], [old], old[1:], old + old[:1], old[:1] * 2, [str(v) for v in old], [[v] for v in old],
                {"x": old}, old[0] if old else 0]
    if isinstance(old, dict):
        return [{}, [old], [old, old], list(old), {k: str(v) for k, v in old.items()}, "x"]
    return [0, "", "x"]


@st.composite
def _mutate_once(draw, data: dict) -> dict:
    data = copy.deepcopy(data)
    paths = [p for p, _ in _walk(data)]
    keys = [p for p in paths if isinstance(p[-1], str)]
    tables = [()] + [p for p, v in _walk(data) if isinstance(v, dict)]
    lists = [p for p, v in _walk(data) if isinstance(v, list) and v]
    ops = ["add", "add"] + (["tweak", "tweak", "tweak", "replace", "delete"] if paths else []) \
        + (["rename"] if keys else []) + (["duplicate"] if lists else [])
    op = draw(st.sampled_from(ops))
    if op == "add":
        table = _at(data, draw(st.sampled_from(tables)))
        written = sorted({p[-1] for p in keys}) or ["x"]      # a key moved to another table
        table[draw(st.sampled_from(KEY_NAMES) | st.sampled_from(written))] = draw(_values(data))
    elif op == "duplicate":
        array = _at(data, draw(st.sampled_from(lists)))
        array.append(copy.deepcopy(draw(st.sampled_from(array))))
    elif op == "rename":
        path = draw(st.sampled_from(keys))
        parent, old = _at(data, path[:-1]), path[-1]
        new = draw(st.sampled_from(KEY_NAMES) | st.text(min_size=1, max_size=6)
                   | st.sampled_from([old.upper(), old + "s", old[:-1]]))
        items = [(new if k == old else k, v) for k, v in parent.items()]
        parent.clear()                    # refilled in order, so the key keeps its position
        parent.update(items)
    else:
        path = draw(st.sampled_from(paths))
        parent = _at(data, path[:-1])
        if op == "tweak":
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(_tweaks(parent[path[-1]]))))
        elif op == "replace":
            parent[path[-1]] = draw(_values(data))
        else:
            del parent[path[-1]]
    return data


@st.composite
def value_mutated(draw, text: str) -> bytes:
    data = tomllib.loads(text)
    for _ in range(draw(st.integers(1, 3))):
        data = draw(_mutate_once(data))
    return dumps(data, inline_nested=draw(st.booleans())).encode("utf-8")


# -- text mutations ----------------------------------------------------------------------------------

# "\udcff" and "\udcc3" become the bytes 0xff and 0xc3 (surrogateescape): not UTF-8
GARBAGE = ['"', "'", "[", "]", "[[", "]]", "{", "}", "=", "#", ".", ",", "\\", "\n", "\r", "\t", "\x00", "\x01",
           "\x7f", "\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\ufeff", "é", '"""', "'''", "\\u", "\\x", "\udcff",
           "\udcc3", " = ", "x = 1", "[x]"]
TOKENS = ["", "1.2.3", "tru", "True", "0x1F", "0o17", "0b11", "1_000", "1__0", "+inf", "nan", "-nan", "01",
          "1979-05-27", "1979-05-27T07:32:00Z", "07:32:00", "1979-13-45", '"unterminated', "'x'", '"""a"""',
          "[1, \"a\"]", "[1,,2]", "[", "]", "{a=1,}", "{a=1, a=2}", "{}", "[]", '"\\q"', '"\\uD800"', "1e", ".5",
          "5.", "=", "# comment", "[[", "{ a = { b = { c = 1 } } }", "9223372036854775808", "1" + "0" * 5000,
          "0x" + "f" * 5000, "[" * 3000 + "]" * 3000]
HEADERS = ["[x]", "[[x]]", "[flows]", "[[flows]]", "[topology]", "[[topology]]", "[lab.qemu]", "[decision.map]",
           "[[hosts]]", "[hosts]", "[[hosts.interfaces]]", "[inventory]", "[[scenarios]]", "[scenarios.set]",
           "[a.b.c]", "[ flows ]", "[\"quoted key\"]", "[]", "[[]]", "[x", "x]", "[[x]", "[x]]", "[run.profiles]"]
_ASSIGN = re.compile(r"^(\s*[^=#\[]+?\s*=\s*)(.*)$")


def _index(draw, items: list) -> int:
    return draw(st.integers(0, len(items) - 1))


def _delete_line(draw, lines):
    del lines[_index(draw, lines)]


def _duplicate_line(draw, lines):
    i = _index(draw, lines)
    lines.insert(draw(st.integers(0, len(lines))), lines[i])


def _swap_lines(draw, lines):
    i, j = _index(draw, lines), _index(draw, lines)
    lines[i], lines[j] = lines[j], lines[i]


def _insert_garbage(draw, lines):
    i = _index(draw, lines)
    col = draw(st.integers(0, len(lines[i])))
    junk = draw(st.one_of(st.sampled_from(GARBAGE), st.text(max_size=4)))
    lines[i] = lines[i][:col] + junk + lines[i][col:]


def _delete_span(draw, lines):
    i = _index(draw, lines)
    a = draw(st.integers(0, len(lines[i])))
    b = draw(st.integers(a, len(lines[i])))
    lines[i] = lines[i][:a] + lines[i][b:]


def _break_pairs(draw, lines):
    """Drop one quote or bracket, so a string, array, inline table or header is left open."""
    spots = [(i, j) for i, line in enumerate(lines) for j, ch in enumerate(line) if ch in "\"'[]{}"]
    if spots:
        i, j = draw(st.sampled_from(spots))
        lines[i] = lines[i][:j] + lines[i][j + 1:]


def _change_header(draw, lines):
    headers = [i for i, line in enumerate(lines) if line.lstrip().startswith("[")]
    if headers:
        i = draw(st.sampled_from(headers))
        lines[i] = draw(st.one_of(st.sampled_from(HEADERS), st.sampled_from([lines[h] for h in headers])))


def _replace_value(draw, lines):
    assigns = [i for i, line in enumerate(lines) if _ASSIGN.match(line) and not line.lstrip().startswith("#")]
    if assigns:
        i = draw(st.sampled_from(assigns))
        lines[i] = _ASSIGN.match(lines[i]).group(1) + draw(st.sampled_from(TOKENS))


def _truncate(draw, lines):
    text = "\n".join(lines)
    lines[:] = text[:draw(st.integers(0, len(text)))].split("\n")


def _crlf(draw, lines):
    lines[:] = [line + "\r" for line in lines]


TEXT_OPS = [_delete_line, _duplicate_line, _swap_lines, _insert_garbage, _insert_garbage, _delete_span,
            _break_pairs, _change_header, _replace_value, _truncate, _crlf]


@st.composite
def text_mutated(draw, text: str) -> bytes:
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        draw(st.sampled_from(TEXT_OPS))(draw, lines)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


MUTATIONS = {"values": value_mutated, "text": text_mutated}


def mutated(seeds: dict[str, str], kind: str) -> st.SearchStrategy:
    """(seed file name, mutated bytes) from any of `seeds`."""
    mutate = MUTATIONS[kind]
    return st.sampled_from(sorted(seeds)).flatmap(lambda name: st.tuples(st.just(name), mutate(seeds[name])))
