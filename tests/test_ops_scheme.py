"""The Figure 29 schemes' control loop (appliance/ops_experiments.run_scheme) against a scripted
lab: the transfers it asks for, when it stops, and what it refuses. The lab itself is exercised
in tests/test_ops_record_lab.py."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from longhaul.appliance.ops import experiments as ox
from longhaul.collectors.live.rtt_probe import RttSample
from longhaul.core.errors import RunError
from longhaul.core.units import parse_size
from longhaul.drivers.result import Result


class ScriptedLab:
    """Moves `rate_bps` while a transfer runs; records every transfer asked for."""

    def __init__(self, rate_bps=80e6, fail=False):
        self.spec = SimpleNamespace(record=SimpleNamespace(warmup_s=0),
                                    roles=SimpleNamespace(background_pairs=[1]),
                                    topology=SimpleNamespace(bottleneck_rate_mbps=100))
        self.rate, self.fail, self.transfers, self.probes = rate_bps / 8, fail, [], 0
        self.lost: list[set] = []     # per probe call, the rounds whose pings were all lost

    def seconds_for(self, seconds, bytes_):
        return seconds if seconds is not None else bytes_ * 8 / 5e6

    def start_background(self, ccas, seconds, raw):
        return []

    def probe(self, seconds, active):
        self.probes += 1
        lost = self.lost.pop(0) if self.lost else set()
        return [RttSample(float(i), None if i in lost else 100.0 + i, 10, 10, "burst") for i in range(int(seconds))]

    def transfer(self, cca, seconds, raw, bytes_=None):
        self.transfers.append((cca, seconds, bytes_))
        if self.fail:
            return None
        seconds = seconds if seconds is not None else bytes_ / self.rate
        moved = int(bytes_ if bytes_ is not None else self.rate * seconds)
        return Result("tcp", cca, 1, seconds, moved, moved, 0, None)


def _adaptive(lab, tmp_path, **kw):
    return ox.run_scheme(lab, "cubic", "Adaptive", kw.pop("total_s", None), Path(tmp_path), classify=lambda r: "bbr",
                         decide=lambda c: "bbr", w=10, period_s=10, say=lambda m: None, **kw)


def test_adaptive_by_time_splits_into_periods(tmp_path):
    lab = ScriptedLab()
    res = _adaptive(lab, tmp_path, total_s=25)
    assert lab.transfers == [("bbr", 10, None), ("bbr", 10, None), ("bbr", 5, None)]
    assert res.fg_on_s == 25 and lab.probes == 3 and len(res.decisions) == 3
    assert res.fg_mbps == pytest.approx(80) and res.completion_s is not None


def test_adaptive_by_bytes_ends_with_the_exact_rest(tmp_path):
    lab = ScriptedLab(rate_bps=80e6)      # 10 MB/s: 100 MB per 10 s period
    res = _adaptive(lab, tmp_path, total_bytes=250_000_000)
    # two periods by time, then the rest (50 MB, ~5 s at the rate so far) as a sized transfer
    assert lab.transfers == [("bbr", 10, None), ("bbr", 10, None), ("bbr", None, 50_000_000)]
    assert res.fg_bytes == 250_000_000


def test_fixed_continuous_by_bytes_is_one_sized_transfer(tmp_path):
    lab = ScriptedLab()
    res = ox.run_scheme(lab, "bbr", "Fixed:CUBIC", None, Path(tmp_path), total_bytes=10**9, cycled=False,
                        say=lambda m: None)
    assert lab.transfers == [("cubic", None, 10**9)] and res.fg_bytes == 10**9 and not res.decisions
    assert lab.probes == 0


def test_fixed_cycles_like_adaptive_and_logs_what_ops_would_choose(tmp_path):
    """Seed 000 §6.7: every scheme probes w s before each transfer; a fixed scheme keeps its CCA."""
    lab = ScriptedLab()
    res = ox.run_scheme(lab, "bbr", "Fixed:CUBIC", 25, Path(tmp_path), classify=lambda r: "bbr",
                        decide=lambda c: "bbr", w=10, period_s=10, say=lambda m: None)
    assert lab.transfers == [("cubic", 10, None), ("cubic", 10, None), ("cubic", 5, None)] and lab.probes == 3
    assert [(d["class"], d["ops_cca"], d["cca"]) for d in res.decisions] == [("bbr", "bbr", "cubic")] * 3
    assert res.decisions[0]["probe_ms"] == pytest.approx(100 + 4.5)   # the scripted probe's rounds 0..9


def test_fixed_cycles_without_a_model_still_probe(tmp_path):
    lab = ScriptedLab()
    res = ox.run_scheme(lab, "bbr", "Fixed:BBR", 20, Path(tmp_path), w=10, period_s=10, say=lambda m: None)
    assert lab.transfers == [("bbr", 10, None)] * 2 and lab.probes == 2
    assert all(d["class"] is None and d["ops_cca"] is None for d in res.decisions)


def test_settle_pauses_before_every_probe_but_the_first(tmp_path, monkeypatch):
    lab, pauses = ScriptedLab(), []
    monkeypatch.setattr(ox.time, "sleep", pauses.append)
    ox.run_scheme(lab, "bbr", "Adaptive", 30, Path(tmp_path), classify=lambda r: "bbr", decide=lambda c: "bbr",
                  w=10, period_s=10, settle_s=5, say=lambda m: None)
    assert lab.probes == 3 and pauses == [0, 5, 5]       # the warm-up (0 here), then before probes 2 and 3


def test_adaptive_needs_a_model(tmp_path):
    with pytest.raises(ValueError, match="classify and decide"):
        ox.run_scheme(ScriptedLab(), "bbr", "Adaptive", 20, Path(tmp_path), say=lambda m: None)


def test_failing_transfers_end_the_scheme_instead_of_looping(tmp_path):
    lab = ScriptedLab(fail=True)
    with pytest.raises(RunError, match="3 foreground transfers in a row"):
        _adaptive(lab, tmp_path, total_s=25)
    assert len(lab.transfers) == 3


def test_the_window_is_the_first_w_rounds_of_a_probe(tmp_path):
    # rounds 0..w-1 carry the phases an active model was trained on
    lab, seen = ScriptedLab(), []
    ox.run_scheme(lab, "cubic", "Adaptive", 10, Path(tmp_path), classify=lambda r: seen.append(r) or "bbr",
                  decide=lambda c: "bbr", w=4, period_s=10, say=lambda m: None)
    assert seen == [[100.0, 101.0, 102.0, 103.0]] and lab.probes == 1


def test_a_lost_round_probes_on_for_the_rest(tmp_path):
    lab, seen = ScriptedLab(), []
    lab.lost = [{1}]
    ox.run_scheme(lab, "cubic", "Adaptive", 10, Path(tmp_path), classify=lambda r: seen.append(r) or "bbr",
                  decide=lambda c: "bbr", w=4, period_s=10, say=lambda m: None)
    # 4 of rounds 0-4 came back; one more second of probing completes the window
    assert seen == [[102.0, 103.0, 104.0, 100.0]] and lab.probes == 2


def test_time_or_bytes_not_both(tmp_path):
    with pytest.raises(ValueError):
        _adaptive(ScriptedLab(), tmp_path, total_s=10, total_bytes=10)


@pytest.mark.parametrize("text, size", [("2GB", 2 * 10**9), ("500MiB", 500 * 2**20), ("1500", 1500), (1500, 1500),
                                        ("0.5 GB", 5 * 10**8)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["2 parsecs", "", "-5MB", "0", True, "1bdp", "400p"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args, fragment", [
    (["--background", "cubic,foo"], "--background = 'cubic,foo'"),
    (["--bytes", "2parsecs"], "--bytes = '2parsecs'"),
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


def test_background_outlasts_every_cycle():
    # 600 s in 10 s periods with w = 10: 60 cycles of up to 22 s of probing and 5 s of pause
    assert ox.background_seconds(600, 15, 10, 10, 5) == 15 + 600 + 60 * 27 + 60
    assert ox.background_seconds(120, 15, None, 10, 0) == 15 + 120 + 60      # one continuous transfer


def test_the_background_is_asked_for_long_enough(tmp_path):
    lab, asked = ScriptedLab(), []
    lab.start_background = lambda ccas, seconds, raw: asked.append(seconds) or []
    _adaptive(lab, tmp_path, total_s=25)                # 3 cycles of w = 10, no warm-up here
    assert asked == [25 + 3 * 22 + 60]
