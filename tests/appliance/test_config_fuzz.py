"""Every loader of a user-written file, fed mutated copies of the shipped files: loading either
succeeds or raises a ConfigError naming file, line and key, never any other exception.

Two kinds of mutation start from each shipped file (config.toml, config-vm.toml, every
profiles/*.toml, profiles/ops/lab*.toml and decision.toml, hardware/example-inventory.toml):
- values: parse the file, then replace a value with another type, delete, add, rename or duplicate
  keys and entries, and write the result back as TOML (a small serialiser below, in the shapes
  these files use: tables, arrays of tables, inline tables, one-line arrays);
- text: delete, duplicate or swap lines, insert garbage characters (control characters, invalid
  UTF-8, quotes, brackets), break quotes and brackets, change table headers, replace a value with
  a raw token, truncate, switch to CRLF, which exercise the TOML syntax errors.

Runs are derandomised (the same examples on every run) and bounded for CI.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toml_mutations import INVENTORY, INVENTORY_NAME, MUTATIONS, dumps, mutated, toml_string

from longhaul.appliance.config.load import load_config
from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.ops.lab import load_ops_lab
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.core.errors import ConfigError, format_keypath
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.image_files import IMAGE, MANIFEST, RAW

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "profiles").glob("*.toml"))

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def _ssh_config() -> str:
    """config.toml with the ssh backend, so that mutations reach the inventory loader too."""
    text = (REPO / "config.toml").read_text(encoding="utf-8")
    old = 'backend = "netns"'
    assert text.count(old) == 1
    return text.replace(old, f'backend = "ssh"\ninventory = "{INVENTORY_NAME}"')


CONFIG_SEEDS = {
    "config.toml": (REPO / "config.toml").read_text(encoding="utf-8"),
    "config-vm.toml": (REPO / "config-vm.toml").read_text(encoding="utf-8"),
    "config-ssh.toml": _ssh_config(),
}
SEEDS = {
    "config": CONFIG_SEEDS,
    "profile": {p.name: p.read_text(encoding="utf-8") for p in PROFILES},
    "ops_lab": {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "profiles" / "ops").glob("lab*.toml"))},
    "decision": {"decision.toml": (REPO / "profiles" / "ops" / "decision.toml").read_text(encoding="utf-8")},
    "inventory": {INVENTORY.name: INVENTORY.read_text(encoding="utf-8")},
}


# -- the property ------------------------------------------------------------------------------------

def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _written_depth(data, keypath: tuple) -> int:
    """How many leading parts of `keypath` name something the file holds."""
    for depth, part in enumerate(keypath):
        if isinstance(data, dict) and isinstance(part, str) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return depth
    return len(keypath)


def check_error(err: ConfigError, root: Path) -> None:
    """What every ConfigError from a file must tell: which file (the one loaded, or a profile or
    inventory it names, all below `root`), which line (always for a syntax error, and for every
    key that is written in the file: the line that writes it), which key."""
    message = str(err)
    assert err.path is not None, message
    assert err.path.resolve().is_relative_to(root.resolve()) and err.path.is_file(), message
    raw = err.path.read_bytes()
    text = raw.decode("utf-8", "replace")
    if err.line is not None:
        assert type(err.line) is int and 1 <= err.line <= _line_count(text), message
    if not err.keypath:
        assert err.line is not None, f"a file-level error without a line: {message}"
        return
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AssertionError(f"a key error for a file that is not valid TOML ({exc}): {message}") from None
    depth = _written_depth(data, err.keypath)
    # a key the file lacks is named inside a table it has, not behind names of no key at all
    assert depth >= len(err.keypath) - 1, f"{format_keypath(err.keypath[depth:])} is not in the file: {message}"
    if depth == len(err.keypath):
        assert err.line is not None, f"the key is written in the file, but no line: {message}"
        last = err.keypath[-1]
        if isinstance(last, str):
            written = text.split("\n")[err.line - 1]
            assert last in written or toml_string(last)[1:-1] in written, \
                f"line {err.line} ({written!r}) does not write {last!r}: {message}"
    if err.line is None:
        assert format_keypath(err.keypath) in message, message


def load_or_config_error(load, path: Path, root: Path) -> ConfigError | None:
    try:
        load(path)
    except ConfigError as err:
        check_error(err, root)
        return err
    return None


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A copy of what the loaders resolve beside config.toml: profiles/, the inventory under
    hardware/, and a stand-in for the qemu image (the files configure() looks for)."""
    base = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(REPO / "profiles", base / "profiles")
    (base / "hardware").mkdir()
    shutil.copy(INVENTORY, base / "hardware" / INVENTORY.name)
    image = base / "build" / "image"
    image.mkdir(parents=True)
    (image / RAW).write_text("")
    (image / MANIFEST).write_text(json.dumps(IMAGE.stamp()))             # configure() reads the manifest
    (base / "mutated").mkdir()
    return base


def _write(root: Path, name: str, content: bytes) -> Path:
    path = root / "mutated" / name
    path.write_bytes(content)
    return path


def load_family(family: str, root: Path, name: str, content: bytes) -> ConfigError | None:
    """Write `content` where the family's loader finds it and load it; the ConfigError, checked,
    if it raised one. A config.toml goes beside profiles/, hardware/ and build/image."""
    if family == "config":
        path = root / "config.toml"
        path.write_bytes(content)
        return load_or_config_error(load_config, path, root)
    loader = {"profile": load_profile, "ops_lab": load_ops_lab, "decision": ops_decision.load,
              "inventory": load_inventory}[family]
    return load_or_config_error(loader, _write(root, name, content), root)


def test_the_seeds_load(root):
    for family, seeds in SEEDS.items():
        for name, text in seeds.items():
            assert load_family(family, root, name, text.encode("utf-8")) is None, (family, name)


@pytest.mark.parametrize("inline_nested", [False, True])
@pytest.mark.parametrize("family, name", [(f, n) for f, seeds in SEEDS.items() for n in seeds])
def test_the_serialiser_round_trips(family, name, inline_nested):
    data = tomllib.loads(SEEDS[family][name])
    assert tomllib.loads(dumps(data, inline_nested)) == data


# -- the fuzz: per family, value and text mutations -------------------------------------------------

@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=400)
@given(case=st.data())
def test_config_mutations(root, kind, case):
    load_family("config", root, *case.draw(mutated(SEEDS["config"], kind), label="config.toml"))


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=400)
@given(case=st.data())
def test_profile_mutations(root, kind, case):
    load_family("profile", root, *case.draw(mutated(SEEDS["profile"], kind), label="profile"))


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=300)
@given(case=st.data())
def test_ops_lab_mutations(root, kind, case):
    load_family("ops_lab", root, *case.draw(mutated(SEEDS["ops_lab"], kind), label="ops lab"))


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=300)
@given(case=st.data())
def test_ops_decision_mutations(root, kind, case):
    load_family("decision", root, *case.draw(mutated(SEEDS["decision"], kind), label="decision"))


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=300)
@given(case=st.data())
def test_inventory_mutations(root, kind, case):
    load_family("inventory", root, *case.draw(mutated(SEEDS["inventory"], kind), label="inventory"))


# -- what the fuzz found: each raised another exception, or a ConfigError without its line or key ----

def _edit(family: str, name: str, old: str, new: str) -> bytes:
    text = SEEDS[family][name]
    assert text.count(old) == 1, old
    return text.replace(old, new).encode("utf-8", "surrogateescape")


Q, CFG, VM, SSH = "quickstart.toml", "config.toml", "config-vm.toml", "config-ssh.toml"
INV = INVENTORY.name
LAST = "<the last line>"
S2_IFACE = 'name = "enp59s0f0"\naddress = "10.1.2.2/24"\nrate_mbps = 1000\npci = "0000:3b:00.0"\n'
# (id, family, seed, content, the expected line (a text in it, LAST or None), key path, part of the message)
REGRESSIONS = [
    # tomllib says "(at end of document)" without a line
    ("unterminated-string-at-end", "profile", Q, (SEEDS["profile"][Q] + 'x = "abc').encode(), LAST, (),
     "Unterminated string"),
    # read_text() raised UnicodeDecodeError
    ("not-utf8", "profile", Q, _edit("profile", Q, "pairs = 2", "pairs = 2  # \udcff"), "pairs = 2", (),
     "not UTF-8 text: byte 0xff"),
    # read_text()'s universal newlines made a stray CR a line break: invalid TOML loaded, lines shifted
    ("stray-cr", "profile", Q, _edit("profile", Q, "pairs = 2\n", "pairs = 2\r\r\n"), "pairs = 2", (),
     "not valid TOML"),
    # tomllib raised RecursionError
    ("nested-too-deep", "profile", Q, _edit("profile", Q, "rtt_ms = 128", "rtt_ms = " + "[" * 3000 + "]" * 3000),
     "rtt_ms = [[[", (), "nested too deeply"),
    # tomllib raised ValueError (int() of more than 4300 digits)
    ("integer-of-5000-digits", "profile", Q, _edit("profile", Q, "pairs = 2", "pairs = 1" + "0" * 5000),
     "pairs = 1", (), "64 bits"),
    # a hex integer of 20000 bits loaded, and str() of it raises ValueError
    ("hex-integer-beyond-64-bits", "profile", Q, _edit("profile", Q, "pairs = 2", "pairs = 0x" + "f" * 5000),
     "pairs = 0x", ("topology", "pairs"), "64 bits"),
    # splitlines() also split at U+2028 and U+0085 (legal in comments and strings): later lines shifted
    ("line-separators-in-a-comment", "profile", Q,
     _edit("profile", Q, "rtt_ms = 128", "# a \u2028 b \x85 c\nrtt_ms = -1"), "rtt_ms = -1", ("topology", "rtt_ms"),
     "greater than or equal to 0"),
    # the scanner recorded [[extra]]'s entry but not the array: no line
    ("unknown-array-of-tables", "profile", Q, (SEEDS["profile"][Q] + "\n[[extra]]\nx = 1\n").encode(), "[[extra]]",
     ("extra",), "unknown key"),
    # [hosts.interfaces.name] after the second host's [[hosts.interfaces]]: the index after
    # interfaces was left out, and the line fell back to the [[hosts.interfaces]] header
    ("sub-table-of-a-nested-array", "inventory", INV,
     _edit("inventory", INV, S2_IFACE, S2_IFACE.replace('name = "enp59s0f0"\n', "") + "[hosts.interfaces.name]\n"),
     "[hosts.interfaces.name]", ("hosts", 1, "interfaces", 0, "name"), "valid string"),
    # the scanner kept a quoted key's escapes ("\u001f" as written): the line fell back to [topology]
    ("escaped-key", "profile", Q, _edit("profile", Q, "rtt_ms = 128", 'rtt_ms = 128\n"\\u001f" = 1'),
     '"\\u001f" = 1', ("topology", "\x1f"), "unknown key"),
    # decision.load gave no line for a map that is not a table, and named decision.map without [decision]
    ("decision-map-not-a-table", "decision", "decision.toml", b'[decision]\nmap = "x"\n', 'map = "x"',
     ("decision", "map"), "a [decision.map] table"),
    ("decision-missing", "decision", "decision.toml", b"# nothing\n", None, ("decision",), "a [decision] table"),
    # a NUL in a path: Path.resolve() raised ValueError (config.toml, the qemu backend, the inventory)
    ("nul-in-profile-dir", "config", CFG, _edit("config", CFG, 'profile_dir = "profiles"', 'profile_dir = "p\\u0000"'),
     "profile_dir =", ("run", "profile_dir"), "NUL"),
    ("nul-in-qemu-image", "config", VM, _edit("config", VM, 'image = "build/image"', 'image = "build/\\u0000"'),
     'image = "build/', ("lab", "qemu", "image"), "NUL"),
    ("nul-in-ssh-key", "inventory", INV,
     _edit("inventory", INV, 'ssh_key = "keys/longhaul_ed25519"', 'ssh_key = "keys/\\u0000"'), 'ssh_key = "keys/',
     ("inventory", "ssh_key"), "NUL"),
    # a name longer than NAME_MAX: Path.is_file() raised OSError (find_profile, the qemu and ssh backends)
    ("profile-name-too-long", "config", CFG, _edit("config", CFG, '"quickstart"', '"' + "x" * 300 + '"'),
     "profiles = [", ("run", "profiles"), "no such profile"),
    ("profile-dir-too-long", "config", CFG,
     _edit("config", CFG, 'profile_dir = "profiles"', f'profile_dir = "{"x" * 300}"'),
     "profiles = [", ("run", "profiles"), "no such profile"),
    ("qemu-image-too-long", "config", VM, _edit("config", VM, 'image = "build/image"', f'image = "build/{"x" * 300}"'),
     "[lab]", ("lab",), "paths the file system can use"),
    ("inventory-path-too-long", "config", SSH,
     _edit("config", SSH, f'inventory = "{INVENTORY_NAME}"', f'inventory = "hardware/{"x" * 300}.toml"'),
     "[lab]", ("lab",), "paths the file system can use"),
    # parse_queue's int() of infinity raised OverflowError
    ("queue-beyond-a-float", "profile", Q, _edit("profile", Q, 'queue = "6MB"', f'queue = "1{"0" * 400}MB"'),
     "queue =", ("topology", "queue"), "at most 308 digits"),
    # the flow's default protocol looked the tool up in TOOLS: TypeError (unhashable dict)
    ("tool-a-table", "profile", Q, _edit("profile", Q, 'tool = "iperf3"\npair = 1', 'tool = { a = 1 }\npair = 1'),
     "tool = {", ("flows", 0, "tool"), "valid string"),
    # pydantic's union member tag came out as a key: flows[0].options.x.int
    ("option-of-no-allowed-type", "profile", Q,
     _edit("profile", Q, 'tool = "iperf3"\npair = 1', 'tool = "iperf3"\npair = 1\noptions = { x = [1] }'),
     "options =", ("flows", 0, "options", "x"),
     "one of: a valid integer, a valid number, a valid string, a valid boolean"),
]


@pytest.mark.parametrize("family, name, content, line, keypath, fragment",
                         [pytest.param(*case[1:], id=case[0]) for case in REGRESSIONS])
def test_regressions(root, family, name, content, line, keypath, fragment):
    err = load_family(family, root, name, content)
    assert err is not None, "it loaded"
    text = content.decode("utf-8", "replace")
    if line == LAST:
        line = _line_count(text)
    elif line is not None:
        line = next(n for n, written in enumerate(text.split("\n"), start=1) if line in written)
    assert (err.line, err.keypath) == (line, keypath), str(err)
    assert fragment in str(err), str(err)
