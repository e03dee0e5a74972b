"""Run order: every trial once, a recorded seed reproduces a shuffle, resumed runs skip what is done."""

from __future__ import annotations

from pathlib import Path

from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.run.jobs import PlannedCell, schedule

PROFILE = """
[profile]
repeats = 3
[topology]
rtt_ms = [10, 20, 40, 80]
[[flows]]
name = "tcp"
role = "foreground"
duration_s = 5
"""


def _cells(tmp_path: Path) -> list[PlannedCell]:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    profile = load_profile(path)
    return [PlannedCell(spec, profile.meta.repeats) for spec in profile.cells]


def test_sequential_is_cell_by_cell(tmp_path):
    jobs = schedule(_cells(tmp_path), "sequential", None, set())
    assert [(j.spec.id, j.trial) for j in jobs][:4] == [("p-001", 1), ("p-001", 2), ("p-001", 3), ("p-002", 1)]
    assert len(jobs) == 12


def test_random_is_a_reproducible_permutation(tmp_path):
    cells = _cells(tmp_path)
    a = [(j.spec.id, j.trial) for j in schedule(cells, "random", 7, set())]
    b = [(j.spec.id, j.trial) for j in schedule(cells, "random", 7, set())]
    c = [(j.spec.id, j.trial) for j in schedule(cells, "random", 8, set())]
    assert a == b and a != c
    assert sorted(a) == sorted((j.spec.id, j.trial) for j in schedule(cells, "sequential", None, set()))


def test_resume_skips_done_trials_and_keeps_the_order(tmp_path):
    cells = _cells(tmp_path)
    full = [(j.spec.id, j.trial) for j in schedule(cells, "random", 3, set())]
    done = set(full[:5])
    rest = [(j.spec.id, j.trial) for j in schedule(cells, "random", 3, done)]
    assert rest == full[5:]
