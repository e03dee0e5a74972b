"""Figure 29 and the OPS recording as generated profiles (appliance/ops/plans.py): the cells,
flows and schedules they declare, the chooser that decides each foreground burst's congestion
control, and what `ops run` refuses before any lab. The lab runs are in tests/system/test_ops_record_lab.py."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.config.schema import Topology
from longhaul.appliance.ops import plans
from longhaul.appliance.ops.lab import ActiveStep
from longhaul.collectors.live.rtt_probe import RttSample
from longhaul.collectors.studies.ops.chooser import OpsChooser
from longhaul.collectors.studies.ops.dataset import BACKGROUND_CLASSES
from longhaul.collectors.studies.ops.paper import SCHEMES
from longhaul.core.units import parse_size
from longhaul.drivers.patterns import bursts

REPO = Path(__file__).resolve().parents[2]
TOPO = Topology(pairs=4, access_rate_mbps=1000, bottleneck_rate_mbps=500, rtt_ms=128, queue="6MB", mtu=1500)
STEPS = [ActiveStep(cca=c, seconds=5) for c in ("cubic", "bbr", "cubic", "none")]      # seed 000's


def _load(tmp_path, text, name):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_profile(path)


def _fig29(tmp_path, **kw):
    args = dict(backgrounds=["cubic", "bbr"], schemes=list(SCHEMES), total_s=120, period_s=30, w=10,
                warmup_s=15, settle_s=0, cycled=True, active_steps=None)
    args.update(kw)
    text, plan = plans.fig29_profile(TOPO, 1, 3, 4, **args)
    return _load(tmp_path, text, plans.FIG29_PROFILE), plan


def test_fig29_cells_are_background_by_scheme(tmp_path):
    profile, plan = _fig29(tmp_path)
    assert [c.scenario for c in profile.cells] == ["cubic-fixed-cubic", "cubic-fixed-bbr", "cubic-adaptive",
                                                   "bbr-fixed-cubic", "bbr-fixed-bbr", "bbr-adaptive"]
    assert plan["scenarios"]["bbr-adaptive"] == {"background": "bbr", "scheme": "Adaptive", "fixed": None,
                                                 "chooses": True}
    cell = profile.cells[3].cell
    assert cell.flow_cca(cell.flows[0]) == "bbr" and cell.probe.pair == 4


def test_fig29_foreground_cycle_is_probe_then_transfer(tmp_path):
    """Seed 000 6.7: probe w s, classify, decide, transfer a period; 120 s in 30 s periods."""
    profile, plan = _fig29(tmp_path, settle_s=5)
    fg = profile.cells[2].cell.flows[1]
    got = [(b.start_s, b.duration_s) for b in bursts(fg)]
    # the first probe window follows the warm-up; each later one a settle and w + 1 s after a burst
    assert got == [(26.0, 30.0), (72.0, 30.0), (118.0, 30.0), (164.0, 30.0)]
    assert plan["cycle_s"] == 46 and sum(d for _, d in got) == 120


def test_fig29_last_period_is_what_is_left(tmp_path):
    profile, _ = _fig29(tmp_path, total_s=70)
    assert [b.duration_s for b in bursts(profile.cells[0].cell.flows[1])] == [30.0, 30.0, 10.0]


def test_fixed_continuous_is_one_transfer(tmp_path):
    profile, plan = _fig29(tmp_path, cycled=False)
    fixed = profile.cells[0].cell
    assert [f.name for f in fixed.flows] == ["bg", "fg"]
    fg = fixed.flows[1]
    assert (fg.pattern, fg.start_s, fg.duration_s, fixed.flow_cca(fg)) == ("constant", 15.0, 120.0, "cubic")
    assert plan["scenarios"]["cubic-fixed-cubic"]["chooses"] is False
    assert plan["scenarios"]["cubic-adaptive"]["chooses"] is True


def test_active_probe_bursts_fall_in_the_windows(tmp_path):
    profile, plan = _fig29(tmp_path, active_steps=STEPS)
    flows = {f.name: f for f in profile.cells[2].cell.flows}
    assert set(flows) == {"bg", "fg", "active0", "active1", "active2"}
    # the third step starts 10 s into an 11 s window: cut to 1 s, as the probe ends there
    assert [(flows[n].start_s, flows[n].on_s) for n in ("active0", "active1", "active2")] == \
        [(15.0, 5.0), (20.0, 5.0), (25.0, 1.0)]
    windows = [b.start_s for b in bursts(flows["active0"])]
    assert windows[:3] == [15.0, 56.0, 97.0] and plan["cycle_s"] == 41


def test_record_cells_per_mode_and_class(tmp_path):
    text, plan = plans.record_profile(TOPO, [1, 2], 4, dict(BACKGROUND_CLASSES), ["passive", "active"], 300, 15,
                                      STEPS)
    profile = _load(tmp_path, text, plans.RECORD_PROFILE)
    assert len(profile.cells) == 12
    cells = {c.scenario: c.cell for c in profile.cells}
    assert cells["passive-none"].flows == [] and cells["passive-none"].probe.duration_s == 316
    mixed = cells["passive-cubic_bbr"]
    assert [(f.pair, mixed.flow_cca(f)) for f in mixed.flows] == [(1, "cubic"), (2, "bbr")]
    active = cells["active-bbr"]
    assert [f.name for f in active.flows] == ["bg1", "active0", "active1", "active2"]
    assert [b.start_s for b in bursts(active.flows[2])][:2] == [20.0, 40.0]      # aligned with the cycle
    assert plan["scenarios"]["active-bbr"] == {"class": "bbr", "probing": "active"}


def test_an_active_step_sets_its_streams_window_and_pacing(tmp_path):
    """What a probing profile can vary besides the CCA and timing (issue 26): streams, a socket
    buffer that caps the window, a pacing rate per stream (iperf3 --fq-rate)."""
    steps = [ActiveStep(cca="cubic", seconds=3, streams=4, buffer="normal", pacing_mbps=12.5),
             ActiveStep(cca="none", seconds=7)]
    text, _ = plans.record_profile(TOPO, [1, 2], 4, {"none": []}, ["active"], 60, 5, steps)
    profile = _load(tmp_path, text, plans.RECORD_PROFILE)
    (burst,) = profile.cells[0].cell.flows
    assert (burst.streams, burst.buffer, burst.options, burst.on_s, burst.off_s) == (4, "normal", {"pacing_mbps": 12.5},
                                                                                    3.0, 7.0)
    from longhaul.drivers.registry import tool_for
    from longhaul.drivers.tool import BurstSpec

    spec = BurstSpec(receiver="10.0.0.2", port=5400, protocol="tcp", duration_s=3, bytes=None, streams=4,
                     cca="cubic", window_bytes=None, rate_mbps=None, options={"pacing_mbps": 12.5})
    argv = tool_for("iperf3").client(spec)
    assert argv[argv.index("--fq-rate") + 1] == "12500000" and argv[argv.index("-P") + 1] == "4"


@pytest.mark.parametrize("options,why", [({"pacing_mbps": 0}, "above 0"), ({"pacing_mbps": "fast"}, "a rate in Mb/s"),
                                         ({"rate": 5}, "not settings of iperf3")])
def test_iperf3_refuses_a_pacing_it_cannot_take(tmp_path, options, why):
    from longhaul.core.errors import ConfigError

    text = ('[topology]\npairs = 1\n[[flows]]\nname = "fg"\nrole = "foreground"\nduration_s = 5\n'
            + "[flows.options]\n" + "".join(f"{k} = {plans._value(v)}\n" for k, v in options.items()))
    with pytest.raises(ConfigError, match=why):
        _load(tmp_path, text, "paced")


def _rounds(values, start=0.0):
    return [RttSample(start + i, v, 10, 10 if v is not None else 0, "burst") for i, v in enumerate(values)]


class FakeModel:
    w, classes, probing = 3, ["none", "bbr"], "passive"


def test_the_chooser_reads_the_window_before_the_burst(monkeypatch):
    seen = []
    monkeypatch.setattr("longhaul.collectors.studies.ops.chooser.classify",
                        lambda model, rtts: seen.append(list(rtts)) or "bbr")
    decision = SimpleNamespace(decide=lambda c: {"bbr": "bbr", "none": "cubic"}[c])
    adaptive = OpsChooser(FakeModel(), decision, w=3, fixed=None)
    rounds = _rounds([1, 2, 3, 10, 11, None, 12, 13])          # the burst at 8 s: window 4..7 (w + 1 s)
    cca, note = adaptive(SimpleNamespace(start_s=8.0), rounds)
    assert (cca, note["class"], note["ops_cca"], note["rounds"]) == ("bbr", "bbr", "bbr", 3)
    assert seen == [[11, 12, 13]] and note["probe_ms"] == 12.0


def test_a_fixed_scheme_logs_what_ops_would_choose(monkeypatch):
    monkeypatch.setattr("longhaul.collectors.studies.ops.chooser.classify", lambda model, rtts: "bbr")
    fixed = OpsChooser(FakeModel(), SimpleNamespace(decide=lambda c: "bbr"), w=3, fixed="cubic")
    cca, note = fixed(SimpleNamespace(start_s=4.0), _rounds([5, 5, 5, 5]))
    assert cca == "cubic" and note["ops_cca"] == "bbr"


def test_a_short_window_falls_back_and_says_so():
    chooser = OpsChooser(FakeModel(), SimpleNamespace(decide=lambda c: "bbr"), w=3, fixed=None)
    cca, note = chooser(SimpleNamespace(start_s=4.0), _rounds([None, None, 7, 8]))
    assert cca == "cubic" and note["class"] is None and note["rounds"] == 2


def test_adaptive_needs_a_model():
    with pytest.raises(ValueError):
        OpsChooser(None, None, w=10, fixed=None)


@pytest.mark.parametrize("text, size", [("2GB", 2 * 10**9), ("500MiB", 500 * 2**20), ("1500", 1500), (1500, 1500),
                                        ("0.5 GB", 5 * 10**8)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["2 parsecs", "", "-5MB", "0", True, "1bdp", "400p"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("args, fragment", [
    (["--background", "cubic,foo"], "--background = 'cubic,foo'"),
    (["--duration", "1"], "--duration = 1.0"),
    (["--period", "0"], "--period = 0.0"),
    (["--schemes", "Fixed:RENO"], "--schemes"),
    (["--settle", "-1"], "--settle = -1.0"),
])
def test_ops_run_refuses_bad_arguments_before_any_lab(tmp_path, capsys, args, fragment):
    from longhaul.appliance.cli.app import main

    model = REPO / "datasets" / "ops-overlay1-s4-passive-w10.npz"
    rc = main(["ops", "run", "--model", str(model), "--lab", str(REPO / "profiles" / "ops" / "lab.toml"),
               "--decision", str(REPO / "profiles" / "ops" / "decision.toml"), "--out", str(tmp_path / "runs"), *args])
    assert rc == 2 and fragment in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_ops_run_decision_must_cover_the_model(tmp_path, capsys):
    from longhaul.appliance.cli.app import main

    partial = tmp_path / "decision.toml"
    partial.write_text('[decision.map]\nnone = "cubic"\ncubic = "cubic"\n')
    rc = main(["ops", "run", "--model", str(REPO / "datasets" / "ops-overlay1-s4-passive-w10.npz"),
               "--lab", str(REPO / "profiles" / "ops" / "lab.toml"), "--decision", str(partial),
               "--out", str(tmp_path / "runs")])
    assert rc == 2 and "decision.toml" in capsys.readouterr().err
