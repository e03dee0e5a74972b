"""Seed 003's metrics on hand-worked examples, and a plan's sweep (section 5.3) end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest

from longhaul.collectors.studies.planning import metrics
from longhaul.collectors.studies.planning.settings import PlanFile, SweepSection, load_plan
from longhaul.collectors.studies.planning.sweep import PLAN, find, headline, run_plan
from longhaul.collectors.studies.planning.trace import OD, Trace, Transfer
from longhaul.core.errors import ConfigError


def test_concurrency_cov_counts_transfers_active_in_each_minute():
    # [0,30] and [0,90] in minute 0; [0,90] in minute 1; [130,150] in minute 2: counts 2, 1, 1
    cov = metrics.concurrency_cov(np.array([0.0, 0.0, 130.0]), np.array([30.0, 90.0, 150.0]))
    counts = np.array([2, 1, 1])
    assert cov == pytest.approx(counts.std() / counts.mean())


def test_throughput_stats_in_minute_bins():
    delivered = np.zeros(180)
    delivered[:60] = 1e6       # 8 Mb/s for a minute, then 4 Mb/s, then idle
    delivered[60:120] = 0.5e6
    got = metrics.throughput_stats(delivered, 1.0)
    assert got["peak_bps"] == pytest.approx(8e6)
    assert got["mean_bps"] == pytest.approx(4e6)
    assert got["gap_bps"] == pytest.approx(4e6)
    assert got["mean_to_peak"] == pytest.approx(0.5)
    assert metrics.gap_change(3e6, 4e6) == pytest.approx(-0.25)


def test_spread_keeps_every_byte_at_its_logged_rate():
    got = metrics.spread(np.array([0.5, 10.0]), np.array([4.5, 11.0]), np.array([400.0, 50.0]), 1.0)
    assert got.sum() == pytest.approx(450.0)
    assert got[:5] == pytest.approx([50, 100, 100, 100, 50])
    assert got[10] == pytest.approx(50)


def _day(n=600, seed=3):
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0, 6 * 3600, n))
    return Trace([Transfer(float(s), float(d), int(d * r / 8)) for s, d, r in
                  zip(starts, rng.lognormal(3, 1, n), rng.lognormal(np.log(5e8), 0.7, n))], name="t")


def test_the_default_sweep_is_the_paper_s_64_configurations():
    doc = run_plan(_day(), SweepSection())
    assert PLAN.check(doc, "plan.json") == 1 and doc["format"] == PLAN.name
    assert len(doc["configs"]) == 64
    assert {(c["od_transfers_pct"], c["od_bandwidth_pct"]) for c in doc["configs"] if c["od_transfers_pct"] == 50} == \
        {(50, 50), (50, 60), (50, 70), (50, 100)}
    assert [b["load_ratio"] for b in doc["baseline"]] == [1.0, 1.5, 2.0, 2.5]
    base1 = doc["baseline"][0]
    assert base1["gap_change"] == 0.0
    assert doc["capacity_bps"] == pytest.approx(doc["trace"]["logged"]["peak_bps"])
    # the mean grows with the load, the peak is held by the capacity: the gap's change shrinks
    means = [b["mean_bps"] for b in doc["baseline"]]
    assert means == sorted(means) and means[2] / means[0] == pytest.approx(2.0, rel=0.05)
    assert all(b["peak_bps"] <= doc["capacity_bps"] * 1.0001 for b in doc["baseline"])
    # more bandwidth reserved: OD no slower, BE no faster (at the same split and load)
    a, b = find(doc, 30.0, 30.0, 2.0), find(doc, 30.0, 100.0, 2.0)
    assert b["avg_bs_od"] <= a["avg_bs_od"] + 1e-9 and b["avg_bs_be"] >= a["avg_bs_be"] - 1e-9
    assert json.loads(json.dumps(doc)) == doc
    lines = headline(doc)
    assert lines[0].startswith("At 2x load on the same link") and "30 % on-demand transfers and 40 %" in lines[1]


def test_a_logged_split_uses_the_trace_s_classes():
    trace = _day(200)
    for k, t in enumerate(trace.transfers):
        trace.transfers[k] = Transfer(t.start_s, t.seconds, t.nbytes, OD if k % 4 == 0 else "be")
    doc = run_plan(trace, SweepSection(load_ratios=[1.0, 2.0]))          # auto: every transfer has a class
    assert doc["split"] == "logged" and {c["od_transfers_pct"] for c in doc["configs"]} == {25.0}
    assert run_plan(trace, SweepSection(split="random", load_ratios=[1.0]))["split"] == "random"
    assert all(c["transfers"]["od"] == 50 for c in doc["configs"])
    with pytest.raises(ValueError, match="class"):
        run_plan(_day(50), SweepSection(split="logged"))


def test_plan_file_names_the_bad_key_and_line(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text("[sweep]\nload_ratios = [1.0, -2.0]\n")
    with pytest.raises(ConfigError) as err:
        load_plan(path)
    assert "plan.toml" in str(err.value) and ":2" in str(err.value) and "greater than 0" in str(err.value)
    path.write_text("[sweep]\nod_transfer_pct = [10]\n")
    with pytest.raises(ConfigError, match="od_transfers_pct"):
        load_plan(path)
    assert load_plan(None) == PlanFile()


def test_od_bandwidth_above_100_is_clipped_once():
    got = SweepSection(od_transfers_pct=[90], load_ratios=[1.0]).configurations()
    assert got == [(90, 90, 1.0), (90, 100.0, 1.0)]
