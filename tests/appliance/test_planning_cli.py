"""`longhaul plan`: thin CLI over the planning study; exit 0 with the plan written, 2 on bad input."""
from __future__ import annotations

import json
from pathlib import Path

from longhaul.appliance.cli.app import main
from longhaul.collectors.studies.planning.sweep import PLAN

DATA = Path(__file__).parents[1] / "data" / "planning"


def test_plan_from_a_gridftp_log_writes_the_plan_and_the_report(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["plan", str(DATA / "dtn01.transfer.log"), "--out", str(out), "--format", "html", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert PLAN.check(doc, "plan.json") == 1 and len(doc["configs"]) == 64
    assert doc["trace"]["failed"] > 0 and doc["trace"]["malformed"] > 0     # counted, listed, not planned
    assert json.loads((out / "plan.json").read_text()) == doc
    assert (out / "plan.html").is_file() and not (out / "plan.pdf").exists()


def test_no_valid_transfer_exits_2(tmp_path, capsys):
    junk = tmp_path / "junk.log"
    junk.write_text("DATE=nonsense NBYTES=12\nhello\n")
    assert main(["plan", str(junk), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "junk.log" in err
    assert not (tmp_path / "p").exists()


def test_bad_plan_file_exits_2_naming_the_line(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text("[sweep]\nseed = 1\ninterval_s = 0\n")
    assert main(["plan", str(DATA / "flows.csv"), "--config", str(plan), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "plan.toml:3" in err and "interval_s" in err


def test_logs_or_synthetic_not_both(tmp_path, capsys):
    assert main(["plan", "--out", str(tmp_path / "p")]) == 2
    assert main(["plan", str(DATA / "flows.csv"), "--synthetic", "1"]) == 2
