"""Each extension point takes one module (or folder) plus one registry entry (docs/architecture.md
"How to add ..."): a toy tool, a toy lab backend, a toy study and a toy router OS are registered
here and used through the product's own paths, without root."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import fake_lab
import fakes
import pytest
import report_fixtures
from rich.console import Console

from longhaul.appliance import report
from longhaul.appliance.cli import app
from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.studies import registry
from longhaul.core.errors import ConfigError
from longhaul.core.paths import REPO
from longhaul.drivers.patterns import PATTERNS, Burst, Pattern
from longhaul.drivers.registry import TOOLS
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, ServerSpec, listening
from longhaul.hardware.backends.base import LinkSettings
from longhaul.hardware.backends.ssh import readiness
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.backends.ssh.lab import HostsLab, inventory_dumbbell
from longhaul.hardware.backends.ssh.preflight import HostFacts, HostsFeatures
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import Completed, ProcessTable
from longhaul.hardware.routers.registry import ROUTERS
from longhaul.hardware.verdicts import OsCheck

# ---------------------------------------------------------------------------------------- study

TOY_TEMPLATE = """<section id="toy"><h2>Toy study</h2>
<p>{{ cells }} cells; the first is {{ first }}; {{ note }}</p></section>
"""


class ToySection:
    """A study's section: a name, a template beside its code, applies() and context()."""

    name = "toy"

    def __init__(self, folder: Path):
        self.template = folder / "toy.html.j2"
        self.template.write_text(TOY_TEMPLATE)

    def applies(self, store) -> bool:
        return bool(store.entries)

    def context(self, store) -> dict:
        return {"cells": len(store.entries), "first": store.entries[0].id, "note": "<b>escaped</b>"}


def test_a_toy_study(tmp_path, monkeypatch):
    run_dir = report_fixtures.make_store(tmp_path / "runs")
    folder = tmp_path / "toy_study"
    folder.mkdir()
    monkeypatch.setattr(registry, "SECTIONS", (*registry.SECTIONS, ToySection(folder)))
    (written,) = report.write_report(run_dir, ("html",))      # the product's path: `longhaul report`
    html = written.read_text()
    assert "<h2>Toy study</h2>" in html and "cells; the first is" in html
    assert "&lt;b&gt;escaped&lt;/b&gt;" in html and "<b>escaped</b>" not in html


# ----------------------------------------------------------------------------------------- tool

class ToyTool:
    """A paced UDP source: one driver class with the Tool attributes, its rules and four methods.
    Its sender prints one line a second, `<second> <bytes>`, which parse() reads."""

    name = "toy"
    executables = ("toy-send", "toy-recv")
    shared_servers = False
    sets_cca = True
    counts_arrivals = False
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = ("payload",)
    rules = FlowRules(("udp",), declared_rate=True)

    def prepare(self, spec):
        return [], []

    def server(self, spec):
        return ServerSpec(["toy-recv", str(spec.port)], ready=listening(spec.port, "udp"))

    def client(self, spec):
        return ["toy-send", spec.receiver, str(spec.port), f"{spec.duration_s:g}", f"{spec.rate_mbps:g}"]

    def parse(self, client_text, server_text, spec):
        rows = [tuple(map(float, line.split())) for line in client_text.splitlines() if line.strip()]
        if not rows:
            raise ValueError("no toy output")
        intervals = [Interval(end_s=t, seconds=1.0, bytes=int(b)) for t, b in rows]
        total = sum(iv.bytes for iv in intervals)
        return Result("udp", None, 1, float(len(rows)), total, total, None, 0.0, receiver_intervals=intervals)


TOY_PROFILE = """
[profile]
description = "a toy tool next to iperf3"
repeats = 1

[topology]
pairs = 2
bottleneck_rate_mbps = 100
rtt_ms = 20

[[flows]]
name = "fg"
role = "foreground"
duration_s = 1

[[flows]]
name = "toy"
role = "background"
tool = "toy"
pair = 2
udp_rate_mbps = 8
duration_s = 2
options = { payload = 1200 }
"""


def _toy_sender(respond):
    """The fake lab answers the toy's sender with what a real one would print at its rate."""
    def answer(self, host, argv):
        if argv[0] == "toy-recv":
            return math.inf, ""                 # a receiver runs until it is stopped
        if argv[0] == "toy-send":
            seconds, rate = int(float(argv[3])), float(argv[4])
            return 0.0, "".join(f"{k + 1} {int(rate * 1e6 / 8)}\n" for k in range(seconds))
        return respond(self, host, argv)
    return answer


def test_a_toy_tool(tmp_path, monkeypatch):
    monkeypatch.setitem(TOOLS, "toy", ToyTool)
    monkeypatch.setattr(fake_lab.FakeLab, "respond", _toy_sender(fake_lab.FakeLab.respond))
    fakes.use_fake_backend(monkeypatch)
    config = load_config(fakes.write_fake_config(tmp_path, TOY_PROFILE, "toy"))
    store = Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    (cell,) = store.cells
    flows = {f.name: f for f in cell.trials[0].flows}
    assert cell.trials[0].error is None, cell.trials[0].error
    assert cell.status == "complete" and flows["toy"].protocol == "udp"     # the toy's default transport
    assert flows["toy"].mean_mbps == pytest.approx(8.0) and flows["toy"].bytes == 2_000_000
    throughput = (store.dir / "cells" / cell.id / "trial-1" / "throughput.csv").read_text()
    assert "toy,all,8.0" in throughput


def test_the_schema_applies_a_toy_tools_rules(tmp_path, monkeypatch):
    monkeypatch.setitem(TOOLS, "toy", ToyTool)
    fakes.use_fake_backend(monkeypatch)
    for change, expected in ((("payload = 1200", "colour = 1"), "options ['colour'] are not settings of toy; it takes: payload"),
                             (("udp_rate_mbps = 8\n", ""), "a UDP flow of toy needs udp_rate_mbps"),
                             (('tool = "toy"', 'tool = "toy"\nprotocol = "tcp"'), "tool 'toy' carries udp, not tcp")):
        with pytest.raises(ConfigError) as err:
            load_config(fakes.write_fake_config(tmp_path, TOY_PROFILE.replace(*change), "toy"))
        assert "toy.toml:" in str(err.value) and "flows[1]" in str(err.value) and expected in str(err.value)


# -------------------------------------------------------------------------------------- pattern

TWICE_PROFILE = TOY_PROFILE.replace("duration_s = 1\n", 'duration_s = 4\npattern = "twice"\non_s = 1\noff_s = 2\n', 1)


def test_a_toy_pattern(tmp_path, monkeypatch):
    """A pattern is one entry of drivers/patterns.py PATTERNS: the schema takes its name and keys,
    the trial runs its schedule. "twice": two bursts of on_s, off_s apart, whatever the duration."""
    twice = Pattern("twice", lambda f: [Burst(k, f.start_s + k * (f.on_s + f.off_s), f.on_s, None) for k in (0, 1)],
                    ("on_s", "off_s"), "on_s and off_s")
    monkeypatch.setitem(PATTERNS, "twice", twice)
    monkeypatch.setitem(TOOLS, "toy", ToyTool)
    monkeypatch.setattr(fake_lab.FakeLab, "respond", _toy_sender(fake_lab.FakeLab.respond))
    fakes.use_fake_backend(monkeypatch)
    for change, expected in ((("off_s = 2\n", ""), "pattern 'twice' needs on_s and off_s"),
                             (("off_s = 2\n", "off_s = 2\nmax_mbps = 5\n"), "max_mbps is for pattern 'sinusoid'"),
                             (('pattern = "twice"', 'pattern = "thrice"'), "one of constant, square, bursty, sinusoid, twice")):
        with pytest.raises(ConfigError) as err:
            load_config(fakes.write_fake_config(tmp_path, TWICE_PROFILE.replace(*change), "toy"))
        assert "toy.toml:" in str(err.value) and expected in str(err.value), str(err.value)
    config = load_config(fakes.write_fake_config(tmp_path, TWICE_PROFILE, "toy"))
    store = Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    (cell,) = store.cells
    flows = {f.name: f for f in cell.trials[0].flows}
    assert cell.status == "complete" and flows["fg"].pattern == "twice"
    assert (flows["fg"].bursts, flows["fg"].completed_bursts) == (2, 2)


# -------------------------------------------------------------------------------------- backend

def test_a_toy_backend(tmp_path, monkeypatch, capsys):
    """tests/support/fakes.py's FakeBackend is a backend of its own (settings, configure, check, session
    yielding labs) and one registry entry: `longhaul check` and `longhaul run` use it unchanged."""
    backend = fakes.use_fake_backend(monkeypatch)
    config = fakes.write_fake_config(tmp_path)
    assert app.main(["check", "--config", str(config)]) == 0
    assert "lab backend fake" in capsys.readouterr().out
    assert app.main(["run", "--config", str(config)]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "fake" and manifest["status"] == "complete"
    assert [lab.built and lab.torn_down for lab in backend.labs] == [True]


# ------------------------------------------------------------------------------------ router OS

class ToyOS:
    """A router OS of its own (hardware/routers/base.py's RouterOS): its readiness checks, sysctls
    and shaper, as argv for the backend to run."""

    name, uname, end_hosts, tools = "toy", "ToyOS", False, ("toyshape",)
    delays_itself, sets_offloads = True, False
    meter_sh = 'toyshape stats "$1"'

    def kernel_check(self):
        return OsCheck("toy shaper", ("toyshape", "probe"), lambda done: ("ok", done.stdout.strip()))

    def link_check(self, ifname, rate_mbps):
        return OsCheck(f"link {ifname}", ("toylink", ifname), lambda done: ("ok", f"{done.stdout.strip()} of {rate_mbps:g}"))

    def pci_check(self, pci):
        return None

    def meter_counters(self, text):
        return None

    def sysctls(self, shape):
        return {"toy.forwarding": "1"}

    def write_sysctls(self, values):
        return [["toyctl", f"{k}={v}"] for k, v in values.items()]

    def shaping(self, shape, netem):
        return [["toyshape", "add", shape.ifname, f"{shape.rate_mbps:g}", f"{shape.delay_ms:g}", str(shape.queue_bytes)]]

    def unshaping(self, shape):
        return [["toyshape", "del", shape.ifname]]

    def read_shaping(self, ifname):
        return ["toyshape", "show", ifname]

    def parse_shaping(self, text):
        return {"kind": text.strip() or None}

    def in_the_way(self, state, ifname):
        return None


class ToyHost:
    """A lab machine that records what it is asked and answers as a fresh one would."""

    remote, lost = True, None

    def __init__(self, name, log):
        self.name, self.log = name, log

    def run(self, argv, timeout=30.0, check=True, input=None):
        self.log.append((self.name, list(argv)))
        out = "".join("0\n" for _ in argv[2:]) if argv[:2] in (["sysctl", "-n"], ["toyctl", "-n"]) else \
            "[]" if argv[:2] == ["tc", "-j"] else ""
        return Completed(argv, 0, out, "")


def test_a_toy_router_os(tmp_path, monkeypatch):
    """One class and one ROUTERS entry: the inventory takes `os = "toy"` for a router (not for an
    end host), readiness runs and reads the OS's own checks, and a lab shapes its bottleneck port
    with the OS's argv and undoes it."""
    monkeypatch.setitem(ROUTERS, "toy", ToyOS())
    text = (REPO / "hardware" / "example-inventory.toml").read_text()
    inventory = tmp_path / "inv.toml"
    for router in ("R1", "R2"):
        text = text.replace(f'name = "{router}"\nrole = "router"\nos = "linux"', f'name = "{router}"\nrole = "router"\nos = "toy"', 1)
    inventory.write_text(text)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "longhaul_ed25519").write_text("not a key: nothing is contacted\n")
    inv = load_inventory(inventory)
    r2 = inv.host("R2")
    assert r2.os == "toy"
    checks = readiness.host_checks(r2)
    assert [c.name for c in checks][:2] == ["tools", "toy shaper"] and checks[0].params == ("toyshape",)
    link = next(c for c in checks if c.name.startswith("link "))
    assert link.argv[0] == "toylink" and readiness.interpret(link, Completed(link.argv, 0, "up\n", ""))[0] == "ok"
    assert readiness.interpret_reach(r2, Completed(["uname", "-sr"], 0, "ToyOS 1.0\n", ""))[-1] == ("os", "ok", "ToyOS 1.0")
    with pytest.raises(ConfigError, match="routers only"):
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace('name = "S1"\nrole = "sender"\nos = "linux"', 'name = "S1"\nrole = "sender"\nos = "toy"', 1))
        load_inventory(bad)

    log = []
    monkeypatch.setattr(type(inv), "executor", lambda self, name, procs, via=None: ToyHost(name, log))
    topo, names = inventory_dumbbell(inv, "t1", 1, 100, 1500)
    features = HostsFeatures(str(inventory), {"S1": HostFacts("S1", "sender", ("cubic",)),
                                              "D1": HostFacts("D1", "receiver", ("cubic",)),
                                              "R1": HostFacts("R1", "router"), "R2": HostFacts("R2", "router")})
    cleanup = CleanupStack()
    lab = HostsLab(inv, topo, names, LinkSettings(20, 250_000, "cubic", "default"), features, ProcessTable(),
                   cleanup, tmp_path)
    lab.build()
    on_r2 = [argv for host, argv in log if host == "R2"]
    wan = topo.bottleneck().b.ifname
    assert ["toyctl", "toy.forwarding=1"] in on_r2 and ["toyshape", "add", wan, "100", "10", "250000"] in on_r2
    assert not any(argv[0] in ("tc", "iptables") for argv in on_r2)          # nothing of Linux's on it
    assert lab.record["delay"] == {"R1": "shaper", "R2": "shaper"}       # it delays by itself
    log.clear()
    assert cleanup.close() == []
    assert ["toyshape", "del", wan] in [argv for host, argv in log if host == "R2"]
