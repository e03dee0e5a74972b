"""The OPS lab declaration: the active probing cycle's schedule and what a profile may declare."""
from __future__ import annotations

from pathlib import Path

import pytest

from longhaul.appliance.ops.lab import ActiveStep, active_plan, load_ops_lab
from longhaul.core.errors import ConfigError

LAB_TOML = Path(__file__).resolve().parents[2] / "profiles" / "ops" / "lab.toml"


def test_the_shipped_profile_is_a_20_s_cycle_of_three_bursts_and_a_pause():
    spec = load_ops_lab(LAB_TOML)
    cycle, plan = active_plan(spec.active_profile)
    assert cycle == 20
    assert [(off, step.cca, slot) for off, step, slot in plan] == [
        (0, "cubic", 0), (5, "bbr", 1), (10, "cubic", 2), (15, "none", -1)]


def test_pauses_take_no_server_and_offsets_accumulate():
    steps = [ActiveStep(cca="none", seconds=2.5), ActiveStep(cca="bbr", seconds=3), ActiveStep(cca="none", seconds=1)]
    assert [(off, slot) for off, _, slot in active_plan(steps)[1]] == [(0, -1), (2.5, 0), (5.5, -1)]
    assert active_plan(steps)[0] == 6.5


def test_a_fractional_burst_is_refused_with_its_line(tmp_path):
    text = (LAB_TOML).read_text()
    bad = tmp_path / "lab.toml"
    bad.write_text(text.replace('cca = "bbr"\nseconds = 5', 'cca = "bbr"\nseconds = 2.5'))
    with pytest.raises(ConfigError) as err:
        load_ops_lab(bad)
    message = str(err.value)
    assert "whole seconds" in message and "active_profile" in message
    assert err.value.line == text.splitlines().index('cca = "bbr"') + 2
