"""The SSH backend's undo journal (hardware/backends/ssh/undo.py) without hosts: what is written
before a change, what a finished teardown takes out, and what `longhaul clean` is left to do. The
journal replayed over SSH after a SIGKILL is tests/system/test_host_killed_run.py's."""

from __future__ import annotations

import json
import os

import pytest

from longhaul.hardware import run_marker
from longhaul.hardware.backends.ssh import undo as undo_journal
from longhaul.hardware.backends.ssh.undo import UndoJournal, read


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "markers")
    return run_marker.STATE_DIR


def test_a_finished_teardown_takes_out_only_its_own_lab(state, tmp_path):
    first = UndoJournal("a1b2c3", tmp_path / "inv.toml")
    first.add("a1b2c31", "S1", "s1", "restore sysctls", [["sysctl", "-w", "a=1"], ["sysctl", "-w", "b=2"]])
    first.add("a1b2c32", "R1", "r1", "undo the shaping of wan", [["tc", "qdisc", "del", "dev", "wan", "root"]])
    # a resumed run has the same tag and numbers its labs from 1 again
    resumed = UndoJournal("a1b2c3", tmp_path / "inv.toml")
    resumed.add("a1b2c31", "S1", "s1", "restore sysctls", [["sysctl", "-w", "a=0"]])
    inventory, undos = read(state / "a1b2c3.undo")
    assert inventory == tmp_path / "inv.toml" and [u.argv[-1] for u in undos] == ["a=1", "b=2", "root", "a=0"]

    resumed.done("a1b2c31")
    assert [u.argv[-1] for u in read(state / "a1b2c3.undo")[1]] == ["a=1", "b=2", "root"]
    first.done("a1b2c31")
    first.done("a1b2c32")
    assert not (state / "a1b2c3.undo").exists()


def test_a_line_cut_by_the_kill_is_skipped(state, tmp_path):
    journal = UndoJournal("d4e5f6", tmp_path / "inv.toml")
    journal.add("d4e5f61", "D1", "d1", "restore sysctls", [["sysctl", "-w", "x=1"]])
    with journal.path.open("a") as fh:
        fh.write('{"lab": "d4e5f61", "host": "D1", "mach')
    assert [u.what for u in read(journal.path)[1]] == ["restore sysctls"]


def test_clean_leaves_a_live_run_alone_and_keeps_what_it_cannot_undo(state, tmp_path):
    live = UndoJournal("aaaaaa", tmp_path / "inv.toml")
    live.add("aaaaaa1", "S1", "s1", "restore sysctls", [["sysctl", "-w", "a=1"]])
    (state / "aaaaaa.json").write_text(json.dumps({"pid": os.getpid(), "run_dir": str(tmp_path)}))
    killed = UndoJournal("bbbbbb", tmp_path / "gone.toml")      # its inventory since removed
    killed.add("bbbbbb1", "R2", "r2", "undo the shaping of wan", [["tc", "qdisc", "del", "dev", "wan", "root"]])

    assert undo_journal.leftovers(remove=False) == [
        "R2 (r2): undo the shaping of wan (run bbbbbb ended without its teardown)"]
    found = undo_journal.leftovers(remove=True)
    assert found[-1] == "R2 (r2): could not undo the shaping of wan; left for the next clean"
    assert [u.what for u in read(killed.path)[1]] == ["undo the shaping of wan"]
    assert read(live.path)[1]                                    # the live run's, untouched
