"""`longhaul suite` on the fake lab (tests/support/fakes.py): no root, seconds. The first run has nothing to
compare with; `--if-kernel-changed` does nothing while the kernel is the one the newest run
recorded; the next run is compared with the first (2 repeats: too few for the level, exit 2); a
profile without a calibration cell is refused before anything runs."""
from __future__ import annotations

import pytest
from fakes import (
    TINY_PROFILE,
    FakeBackend,
    use_fake_backend,
    write_fake_config,
)

from longhaul.appliance.cli.app import main

pytestmark = pytest.mark.timeout(120)

SUITE = TINY_PROFILE + """
[[scenarios]]
name = "calibration"
calibration = true
flows = ["fg"]
set = { "topology.rtt_ms" = 0, "topology.bottleneck_rate_mbps" = 1000, "topology.queue" = "1MB" }

[[scenarios]]
name = "shared"
"""


def test_suite_runs_skips_an_unchanged_kernel_and_compares(tmp_path, monkeypatch, capsys):
    use_fake_backend(monkeypatch, FakeBackend())
    config = write_fake_config(tmp_path, SUITE, name="regression-tiny")
    runs = tmp_path / "runs"
    assert main(["suite", "regression-tiny", "--config", str(config)]) == 0
    assert "no earlier complete run" in capsys.readouterr().out
    assert len(list(runs.iterdir())) == 1
    assert main(["suite", "regression-tiny", "--config", str(config), "--if-kernel-changed"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert len(list(runs.iterdir())) == 1
    assert main(["suite", "regression-tiny", "--config", str(config)]) == 2
    out = capsys.readouterr().out
    assert "too few repeats" in out and "fingerprint: no change" in out
    assert len(list(runs.iterdir())) == 2
    # the suite edited since (one scenario fewer): the run is kept, the comparison refused
    write_fake_config(tmp_path, SUITE.split("[[scenarios]]\nname = \"shared\"")[0], name="regression-tiny")
    assert main(["suite", "regression-tiny", "--config", str(config)]) == 2
    assert "not compared with the previous run" in capsys.readouterr().out
    assert len(list(runs.iterdir())) == 3


def test_a_suite_needs_a_calibration_cell(tmp_path, monkeypatch, capsys):
    use_fake_backend(monkeypatch, FakeBackend())
    config = write_fake_config(tmp_path, TINY_PROFILE, name="regression-tiny")
    assert main(["suite", "regression-tiny", "--config", str(config)]) == 2
    assert "calibration cell" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
