"""Config and profile validation: every bad input names file, line, key path and what is allowed."""
from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from longhaul.appliance.cli import app as cli
from longhaul.appliance.config.load import load_config
from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.config.schema import Topology
from longhaul.core.errors import ConfigError
from longhaul.hardware.image_files import IMAGE, MANIFEST, RAW

REPO = Path(__file__).resolve().parents[2]
AVAILABLE = ", ".join(sorted(p.stem for p in (REPO / "profiles").glob("*.toml")))

BASE = """\
[profile]
description = "test"

[topology]
pairs = 2
rtt_ms = 128

[[flows]]
name = "fg"
role = "foreground"
pair = 1
duration_s = 10

[[flows]]
name = "bg"
role = "background"
pair = 2
duration_s = 10
"""
FG = 'pair = 1\n'          # unique anchor inside the first [[flows]] entry
BG = 'pair = 2\nduration'  # unique anchor inside the second [[flows]] entry


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def scen(body: str) -> str:
    return BASE + '\n[[scenarios]]\nname = "s"\n' + body + "\n"


def line_of(text: str, marker: str, nth: int = 1) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if marker in line]
    return hits[nth - 1]


def write(tmp_path: Path, text: str, name: str = "prof") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def params(cases: list) -> list:
    """Plain tuples are (id, *values); pytest.param cases carry their id as the first value."""
    out = []
    for case in cases:
        if type(case) is tuple:
            out.append(pytest.param(*case[1:], id=case[0]))
        else:
            out.append(pytest.param(*case.values[1:], id=case.values[0], marks=case.marks))
    return out


def expect_error(path: Path, text: str, marker, keypath: str, allowed: str, loader=load_profile):
    line = line_of(text, *marker) if isinstance(marker, tuple) else line_of(text, marker)
    with pytest.raises(ConfigError) as info:
        loader(path)
    message = str(info.value)
    assert info.value.line == line, message
    assert message.startswith(f"{path}:{line}: {keypath}"), message
    assert allowed in message, message
    return info.value



# (id, profile text, marker of the expected line (or (marker, nth)), key path, part of what is allowed)
BAD_PROFILES = [
    ("unknown-top", "nosuch = 1\n" + BASE, "nosuch = 1", "nosuch = 1", "unknown key"),
    ("unknown-topology", edit("rtt_ms = 128", "rtt = 128"), "rtt = 128", "topology.rtt = 128", "unknown key"),
    ("unknown-flow", edit(BG, 'pair = 2\nccaa = "x"\nduration'), "ccaa", "flows[1].ccaa = 'x'", "unknown key"),
    ("unknown-profile", edit('description = "test"', 'description = "t"\nrepeat = 2'), "repeat = 2",
     "profile.repeat = 2", "unknown key"),
    ("unknown-scenario", scen('flow = ["fg"]'), "flow = [", "scenarios[0].flow", "unknown key"),
    ("rtt-string", edit("rtt_ms = 128", 'rtt_ms = "fast"'), "rtt_ms", "topology.rtt_ms = 'fast'", "valid number"),
    ("rtt-negative", edit("rtt_ms = 128", "rtt_ms = -1"), "rtt_ms", "topology.rtt_ms = -1", "greater than or equal to 0"),
    ("pairs-0", edit("pairs = 2", "pairs = 0"), "pairs = 0", "topology.pairs = 0", "greater than or equal to 1"),
    ("pairs-17", edit("pairs = 2", "pairs = 17"), "pairs = 17", "topology.pairs = 17", "less than or equal to 16"),
    ("mtu-100", edit("rtt_ms = 128", "rtt_ms = 128\nmtu = 100"), "mtu", "topology.mtu = 100",
     "greater than or equal to 576"),
    ("streams-0", edit(FG, "pair = 1\nstreams = 0\n"), "streams", "flows[0].streams = 0", "greater than or equal to 1"),
    ("queue-parsecs", edit("rtt_ms = 128", 'rtt_ms = 128\nqueue = "6 parsecs"'), "queue",
     "topology.queue = '6 parsecs'", "use B, KB, MB, GB, KiB, MiB, GiB, p or bdp"),
    ("queue-abc", edit("rtt_ms = 128", 'rtt_ms = 128\nqueue = "abc"'), "queue", "topology.queue = 'abc'",
     "packets (400p) or a BDP multiple (1bdp)"),
    ("queue-one-packet", edit("rtt_ms = 128", "rtt_ms = 128\nqueue = 2000"), "queue", "topology.queue = 2000",
     "at least two packets (3000 bytes)"),
    ("queue-one-packet-p", edit("rtt_ms = 128", 'rtt_ms = 128\nqueue = "1p"'), "queue", "topology.queue = '1p'",
     "at least two packets"),
    # a conflict between two keys is reported at the later one
    ("bottleneck-above-access", edit("rtt_ms = 128", "rtt_ms = 128\naccess_rate_mbps = 100\nbottleneck_rate_mbps = 500"),
     "bottleneck_rate_mbps = 500", "topology.bottleneck_rate_mbps = 500", "must not exceed access_rate_mbps"),
    ("square-no-on", edit(FG, 'pair = 1\npattern = "square"\noff_s = 1\n'), "[[flows]]", "flows[0]",
     "needs on_s and off_s"),
    ("bursty-burst-ge-every", edit(BG, 'pair = 2\npattern = "bursty"\nburst_s = 5\nevery_s = 5\nduration'),
     ("[[flows]]", 2), "flows[1]", "burst_s must be shorter than every_s"),
    ("bursty-missing", edit(FG, 'pair = 1\npattern = "bursty"\nburst_s = 1\n'), "[[flows]]", "flows[0]",
     "needs burst_s (x) and every_s (y)"),
    ("udp-no-rate", edit(FG, 'pair = 1\nprotocol = "udp"\n'), "[[flows]]", "flows[0]", "needs udp_rate_mbps"),
    ("tcp-with-rate", edit(FG, "pair = 1\nudp_rate_mbps = 10\n"), "[[flows]]", "flows[0]",
     "only for UDP flows of iperf3, paced-udp and trex"),
    ("sinusoid-wrong-tool", edit(FG, 'pair = 1\nprotocol = "udp"\npattern = "sinusoid"\nmin_mbps = 1\nmax_mbps = 5\nperiod_s = 10\n'),
     "[[flows]]", "flows[0]", "only 'paced-udp' and 'trex' can"),
    ("sinusoid-incomplete", edit(FG, 'pair = 1\ntool = "paced-udp"\npattern = "sinusoid"\nmin_mbps = 1\n'),
     "[[flows]]", "flows[0]", "needs min_mbps, max_mbps and period_s"),
    ("udt-tcp", edit(FG, 'pair = 1\ntool = "udt"\nprotocol = "tcp"\n'), "[[flows]]", "flows[0]",
     "tool 'udt' carries udp, not tcp"),
    ("disk-iperf3", edit(FG, 'pair = 1\nstorage = "disk"\n'), "[[flows]]", "flows[0]",
     "storage 'disk' is for gridftp"),
    ("nfs-streams", edit(FG, 'pair = 1\ntool = "nfs"\nfile_bytes = 1000\nstreams = 4\n'), "[[flows]]", "flows[0]",
     "runs one stream per flow"),
    ("nfs-no-file-size", edit(FG, 'pair = 1\ntool = "nfs"\n'), "[[flows]]", "flows[0]",
     "a timed file transfer needs file_bytes"),
    ("udt-unknown-option", edit(FG, 'pair = 1\ntool = "udt"\noptions = { udt_rcvbuf = 20000000, window = 3 }\n'),
     "[[flows]]", "flows[0]", "options ['window'] are not settings of udt; it takes: mss, fc, udt_sndbuf"),
    ("file-bytes-iperf3", edit(FG, 'pair = 1\nfile_bytes = 1000\n'), "[[flows]]", "flows[0]",
     "file_bytes 1000 is for gridftp and nfs"),
    ("duration-and-bytes", edit(FG, "pair = 1\nbytes = 1000\n"), "[[flows]]", "flows[0]",
     "exactly one of duration_s or bytes"),
    ("neither-duration-nor-bytes", edit("pair = 1\nduration_s = 10\n", "pair = 1\n"), "[[flows]]", "flows[0]",
     "exactly one of duration_s or bytes"),
    ("pattern-with-bytes", edit("pair = 1\nduration_s = 10\n", 'pair = 1\npattern = "square"\non_s = 1\noff_s = 1\nbytes = 9\n'),
     "[[flows]]", "flows[0]", "use duration_s, not bytes"),
    ("bad-role", edit('role = "background"', 'role = "bystander"'), "bystander", "flows[1].role = 'bystander'",
     "'foreground' or 'background'"),
    ("bad-cca", edit(BG, 'pair = 2\ncca = "BBR"\nduration'), "cca", "flows[1].cca = 'BBR'", "should match pattern"),
    ("tuning-buffer-small", BASE + "\n[tuning]\nbuffer = 100\n", "buffer", "tuning.buffer = 100", "at least 4096"),
    ("tuning-unknown-offload", BASE + "\n[tuning]\noffloads = { gro = false, turbo = true }\n", "offloads",
     "tuning.offloads.turbo = 'turbo'", "'gro', 'gso', 'tso', 'lro', 'sg', 'rx' or 'tx'"),
    ("probe-mode", BASE + '\n[probe]\nmode = "ping"\n', "mode", "probe.mode = 'ping'", "'burst' or 'interval'"),
    ("empty-sweep", edit("rtt_ms = 128", "rtt_ms = []"), "rtt_ms", "topology.rtt_ms = []", "at least one value"),
    ("empty-sweep-flow", edit(BG, "pair = 2\ncca = []\nduration"), "cca", "flows[1].cca = []", "at least one value"),
    ("bad-sweep-value", edit(BG, 'pair = 2\ncca = ["cubic", "BBR"]\nduration'), "cca", "flows[1].cca = 'BBR'",
     "should match pattern"),
    ("set-unknown-flow", scen('set = { "flows.nosuch.cca" = "bbr" }'), "set =",
     "scenarios[0].set.flows.nosuch.cca = 'bbr'", "topology.KEY, tuning.KEY, probe.KEY or flows.FLOWNAME.KEY"),
    ("set-unknown-section", scen('set = { "nosection.x" = 1 }'), "set =", "scenarios[0].set.nosection.x = 1",
     "flows.FLOWNAME.KEY"),
    ("set-unknown-key", scen('set = { "topology.nosuch" = 1 }'), "set =", "scenarios[0].set.topology.nosuch = 1",
     "unknown key"),
    ("set-bad-value", scen('set = { "topology.rtt_ms" = -5 }'), "set =", "scenarios[0].set.topology.rtt_ms = -5",
     "greater than or equal to 0"),
    ("scenario-unknown-flow", scen('flows = ["fg", "zz"]'), "flows = [", "scenarios[0].flows = ['zz']",
     "flows must name flows of this profile: ['fg', 'bg']"),
    # a cell built from a subset of flows still points at the flow's own entry
    ("subset-error-original-entry", scen('flows = ["bg"]').replace(BG, "pair = 2\nstreams = 0\nduration"),
     "streams", "flows[1].streams = 0", "greater than or equal to 1"),
    ("invalid-toml", edit("rtt_ms = 128", "rtt_ms 128"), "rtt_ms 128", "not valid TOML", "Expected '='"),
    pytest.param("duplicate-flow-names", edit('name = "bg"', 'name = "fg"'), ('name = "fg"', 2), "flows[1].name",
                 "unique"),
    pytest.param("flow-pair-beyond-topology", edit(BG, "pair = 3\nduration"), "pair = 3", "flows[1].pair = 3",
                 "topology.pairs = 2"),
    pytest.param("probe-pair-beyond-topology", BASE + "\n[probe]\npair = 3\n", "pair = 3", "probe.pair = 3",
                 "topology.pairs = 2"),
    pytest.param("queue-below-two-jumbo-packets", edit("rtt_ms = 128", "rtt_ms = 128\nmtu = 9000\nqueue = 10000"),
                 "queue", "topology.queue = 10000", "at least two packets (18000 bytes)"),
    pytest.param("unknown-dotted-key", edit(BG, "pair = 2\nfoo.bar = 1\nduration"), "foo.bar", "flows[1].foo",
                 "unknown key"),
    pytest.param("set-in-subtable", BASE + '\n[[scenarios]]\nname = "s"\n\n[scenarios.set]\n"topology.nosuch" = 1\n',
                 '"topology.nosuch"', "scenarios[0].set.topology.nosuch = 1", "unknown key"),
    pytest.param("stale-origin-after-subset",
                 BASE + '\n[[flows]]\nname = "c"\nrole = "background"\ncca = "Bad!"\nduration_s = 10\n'
                 '\n[[scenarios]]\nname = "s"\nflows = ["bg", "c"]\nset = { "flows.bg.cca" = "bbr" }\n',
                 'cca = "Bad!"', "flows[2].cca = 'Bad!'", "should match pattern"),
    pytest.param("buffer-bad-name", BASE + '\n[tuning]\nbuffer = "huge"\n', "buffer", "tuning.buffer = 'huge'",
                 "bytes"),
]


@pytest.mark.parametrize("text, marker, keypath, allowed", params(BAD_PROFILES))
def test_bad_profile(tmp_path, text, marker, keypath, allowed):
    expect_error(write(tmp_path, text), text, marker, keypath, allowed)


def test_negative_flow_buffer_rejected(tmp_path):
    text = edit(FG, "pair = 1\nbuffer = -5\n")
    expect_error(write(tmp_path, text), text, "buffer", "flows[0].buffer = -5", "at least 4096")


def test_boolean_queue_says_not_a_boolean(tmp_path):
    text = edit("rtt_ms = 128", "rtt_ms = 128\nqueue = true")
    expect_error(write(tmp_path, text), text, "queue", "topology.queue = True", "not a boolean")


def test_unknown_profile_key_lists_allowed_keys(tmp_path):
    text = edit("rtt_ms = 128", "rtt = 128")
    err = expect_error(write(tmp_path, text), text, "rtt = 128", "topology.rtt", "unknown key")
    assert "rtt_ms" in err.allowed and "bottleneck_rate_mbps" in err.allowed


# ------------------------------------------------------------------------------------------ config.toml

CONFIG = f"""\
[lab]
backend = "netns"

[run]
profiles = ["quickstart"]
profile_dir = "{REPO / 'profiles'}"

[verify]
attempts = 2
"""

BAD_CONFIGS = [
    ("unknown-section", CONFIG + "\n[nosuch]\nx = 1\n", "[nosuch]", "nosuch",
     "allowed here: lab, store, run, report, verify"),
    ("unknown-verify-key", CONFIG + "speed = 2\n", "speed", "verify.speed = 2",
     "allowed here: rtt_tolerance_ms, rtt_tolerance_pct, rate_tolerance_pct, rate_probe_s, attempts, retry_pause_s, enabled"),
    ("backend-ssh-no-inventory", edit('"netns"', '"ssh"', CONFIG), "backend", "lab.backend = 'ssh'",
     "'ssh' needs [lab] inventory = \"<name>\" (hardware/<name>.toml) or a path to one"),
    ("inventory-missing", edit('"netns"', '"ssh"\ninventory = "nosuch"', CONFIG), "inventory", "lab.inventory = 'nosuch'",
     "an inventory file ("),
    ("inventory-bad-name", edit('"netns"', '"ssh"\ninventory = "no such"', CONFIG), "inventory",
     "lab.inventory = 'no such'", "a name of letters, digits, - and _"),
    ("profile-missing", edit('["quickstart"]', '["quickstart", "nope"]', CONFIG), "profiles =",
     "run.profiles = 'nope'", f"no such profile in {REPO / 'profiles'}; available: {AVAILABLE}"),
    ("attempts-0", edit("attempts = 2", "attempts = 0", CONFIG), "attempts", "verify.attempts = 0",
     "greater than or equal to 1"),
    ("bad-format", CONFIG + '\n[report]\nformats = ["docx"]\n', "formats", "report.formats[0] = 'docx'",
     "'html' or 'pdf'"),
    ("invalid-toml", edit("[verify]", "[verify", CONFIG), "[verify", "not valid TOML", "Expected ']'"),
    pytest.param("backend-unknown", edit('"netns"', '"foo"', CONFIG), "backend", "lab.backend = 'foo'",
                 "implemented: netns, ssh, qemu"),
    ("qemu-no-image", edit('"netns"', '"qemu"\n[lab.qemu]\nimage = "noimg"', CONFIG), "image =",
     "lab.qemu.image = 'noimg'", "an image directory with longhaul.raw and manifest.json ("),
    ("qemu-bad-accel", edit('"netns"', '"qemu"\n[lab.qemu]\naccel = "hvf"', CONFIG), "accel =",
     "lab.qemu.accel = 'hvf'", "'auto', 'tcg' or 'kvm'"),
    ("qemu-tiny-vm", edit('"netns"', '"qemu"\n[lab.qemu]\nmemory_mb = 64', CONFIG), "memory_mb",
     "lab.qemu.memory_mb = 64", "greater than or equal to 256"),
]


@pytest.mark.parametrize("text, marker, keypath, allowed", params(BAD_CONFIGS))
def test_bad_config(tmp_path, text, marker, keypath, allowed):
    path = write(tmp_path, text, "config")
    expect_error(path, text, marker, keypath, allowed, loader=load_config)


def test_profile_named_on_command_line_missing(tmp_path):
    path = write(tmp_path, CONFIG, "config")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["nope"])
    message = str(info.value)
    assert message.startswith("<arguments>: ") and "'nope'" in message, message
    assert info.value.line is None and f"available: {AVAILABLE}" in message


def test_error_in_named_profile_names_profile_file(tmp_path):
    (tmp_path / "profiles").mkdir()
    text = edit("rtt_ms = 128", "rtt_ms = -1")
    write(tmp_path / "profiles", text, "mine")
    path = write(tmp_path, '[run]\nprofiles = ["mine"]\n', "config")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{tmp_path / 'profiles' / 'mine.toml'}:6: topology.rtt_ms = -1")


# ------------------------------------------------------------------------------------------ good inputs

def test_shipped_config_loads():
    config = load_config(REPO / "config.toml")
    assert config.data.lab.backend == "netns"
    assert [p.name for p in config.profiles] == tomllib.loads((REPO / "config.toml").read_text())["run"]["profiles"]
    assert config.profile_dir == REPO / "profiles"
    assert config.data.verify.attempts == 3 and config.data.verify.enabled is True


@pytest.mark.parametrize("path", sorted((REPO / "profiles").glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_profiles_load(path):
    profile = load_profile(path)
    assert profile.name == path.stem and profile.cells
    assert [c.id for c in profile.cells] == [f"{path.stem}-{i:03d}" for i in range(1, len(profile.cells) + 1)]


def test_quickstart_contents():
    profile = load_profile(REPO / "profiles" / "quickstart.toml")
    assert [c.scenario for c in profile.cells] == ["alone", "vs-cubic", "vs-bbr"]
    alone, vs_cubic, vs_bbr = (c.cell for c in profile.cells)
    assert [f.name for f in alone.flows] == ["fg"]
    assert vs_bbr.flows[1].cca == "bbr" and vs_cubic.flows[1].cca == "cubic"
    assert alone.topology.queue_bytes == 6_000_000
    assert profile.meta.repeats == 1


def test_defaults_applied(tmp_path):
    text = '[[flows]]\nname = "f"\nrole = "foreground"\nduration_s = 5\n'
    profile = load_profile(write(tmp_path, text))
    assert profile.meta.repeats == 3 and profile.meta.time_scale == 1.0 and profile.meta.description == ""
    cell = profile.cells[0].cell
    t = cell.topology
    assert (t.pairs, t.access_rate_mbps, t.bottleneck_rate_mbps, t.rtt_ms, t.queue, t.mtu) == \
        (1, 1000.0, 500.0, 128.0, "1bdp", 1500)
    assert t.queue_bytes == 8_000_000
    assert (cell.tuning.cca, cell.tuning.buffer) == ("cubic", "large")
    assert (cell.probe.pair, cell.probe.mode, cell.probe.interval_ms) == (1, "burst", 10.0)
    flow = cell.flows[0]
    assert (flow.tool, flow.pair, flow.protocol, flow.cca, flow.streams, flow.start_s, flow.pattern) == \
        ("iperf3", 1, "tcp", None, 1, 0.0, "constant")
    assert cell.flow_cca(flow) == "cubic" and cell.flow_buffer(flow) == "large"
    assert profile.cells[0].scenario == "base" and profile.cells[0].params == {"scenario": "base"}


@pytest.mark.parametrize("queue, expected", [
    ("6MB", 6_000_000), (6_000_000, 6_000_000), ("1bdp", 8_000_000), ("0.5bdp", 4_000_000), ("400p", 600_000),
    ("4MiB", 4_194_304), ("1.5 MB", 1_500_000), ("64KiB", 65_536), ("1GB", 10**9), ("3000", 3000),
])
def test_queue_sizes(queue, expected):
    assert Topology(queue=queue, bottleneck_rate_mbps=500, rtt_ms=128, mtu=1500).queue_bytes == expected


def test_queue_in_profile(tmp_path):
    text = edit("rtt_ms = 128", 'rtt_ms = 128\nqueue = "400p"')
    assert load_profile(write(tmp_path, text)).cells[0].cell.topology.queue_bytes == 600_000


# ------------------------------------------------------------------------------------------ CLI

def test_cli_check_bad_config_exits_2_and_sets_up_nothing(tmp_path, capsys, monkeypatch):
    from longhaul.hardware.backends.netns import features

    def no_preflight(*args, **kwargs):
        raise AssertionError("preflight must not run for a bad config")

    monkeypatch.setattr(features, "detect", no_preflight)
    netns_dir = Path("/run/netns")
    before = set(os.listdir(netns_dir)) if netns_dir.is_dir() else set()
    text = edit("attempts = 2", "attempts = 2\nspeed = 2", CONFIG)
    bad = write(tmp_path, text, "config")
    assert cli.main(["check", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:{line_of(text, 'speed')}: verify.speed = 2: unknown key" in err
    after = set(os.listdir(netns_dir)) if netns_dir.is_dir() else set()
    # other sessions may use namespaces concurrently: only this process's scratch namespace counts
    assert not {n for n in after - before if n.endswith(f"-{os.getpid()}")}


def test_cli_check_bad_profile_exits_2(tmp_path, capsys, monkeypatch):
    from longhaul.hardware.backends.netns import features

    monkeypatch.setattr(features, "detect", lambda *a, **k: pytest.fail("preflight ran"))
    (tmp_path / "profiles").mkdir()
    text = edit("pairs = 2", "pairs = 17")
    write(tmp_path / "profiles", text, "mine")
    config = write(tmp_path, '[run]\nprofiles = ["mine"]\n', "config")
    assert cli.main(["check", "--config", str(config)]) == 2
    assert "mine.toml:5: topology.pairs = 17" in capsys.readouterr().err


def test_ssh_backend_with_an_inventory(tmp_path):
    """[lab] inventory: a path relative to config.toml (or a name: hardware/<name>.toml); it is
    validated at load, so its own errors name its own file and line."""
    (tmp_path / "lab.toml").write_text((REPO / "hardware" / "example-inventory.toml").read_text())
    path = write(tmp_path, edit('"netns"', '"ssh"\ninventory = "lab.toml"', CONFIG), "config")
    config = load_config(path)
    assert config.backend.name == "ssh" and config.lab.inventory_path == tmp_path / "lab.toml"
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "mylab.toml").write_text("[inventory]\nname = 'x'\n")
    path = write(tmp_path, edit('"netns"', '"ssh"\ninventory = "mylab"', CONFIG), "config")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.path == tmp_path / "hardware" / "mylab.toml"


def test_qemu_backend_with_an_image_directory(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / RAW).write_text("")
    (tmp_path / "img" / MANIFEST).write_text(json.dumps(IMAGE.stamp()))
    path = write(tmp_path, edit('"netns"', '"qemu"\n[lab.qemu]\nimage = "img"\naccel = "tcg"', CONFIG), "config")
    config = load_config(path)
    assert config.backend.name == "qemu" and config.lab.image_dir == tmp_path / "img"
    assert config.lab.section.accel == "tcg"
