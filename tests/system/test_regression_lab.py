"""A planted regression on the embedded lab, end to end through `longhaul suite`: the suite runs
once with CUBIC as the end hosts' congestion control, then again with Reno, over a path whose
queue is 0.15 of its BDP (Reno halves after slow start's loss and regains one segment a round trip;
CUBIC keeps 0.7 and regrows in seconds; below, why that queue). The second run's
comparison with the first must say "regression" (exit 3) for the foreground's throughput, and the fingerprint diff
must name the congestion-control sysctl that changed on the end hosts.

Smaller TCP buffers, the other plant the issue names, cannot be run this way: verification probes
the bottleneck under the cell's own tuning, and buffers below the BDP rightly refuse the cell."""
from __future__ import annotations

import json

import pytest
from lab_support import our_namespaces, requires_lab, write_lab_config

from longhaul.appliance.cli.app import main
from longhaul.collectors.store.fingerprint import diff_fingerprints, fingerprint_of
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies.regression.compare import REGRESSION, compare_runs

# 200 Mb/s x 40 ms = 1 MB in flight = 690 segments; with the 150 KB queue, 790 before a loss. Reno
# leaves slow start with half of what it had in flight when it saw the first loss: mostly 0.6-0.7
# BDP, but about one trial in ten it sees it late and keeps 1.04 BDP. With a quarter-BDP queue such
# a trial ran at CUBIC's rate for 6 s before its next loss, and failed CI twice (at 6 s, then at
# 8 s with 7 + 7 trials). With this queue it fills the queue within 3 s and halves to 0.57 BDP.
# Measured here (2026-11-28, 10 s trials): Reno 111.8-128.7 Mb/s, CUBIC 174.5-185.6, 8 + 8 trials.
# Holm's first threshold for 3 tests is 0.0033: 7 + 7 trials reach it with one pair out of order
# (0.0012), where 6 + 6 need every Reno trial below every CUBIC one.
SUITE = """
[profile]
description = "planted regression"
repeats = 7
[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 200
rtt_ms = 40
queue = "150KB"
[tuning]
cca = "{cca}"
buffer = "large"
[probe]
pair = 1
mode = "burst"
[[flows]]
name = "fg"
role = "foreground"
tool = "iperf3"
pair = 1
duration_s = 8
[[scenarios]]
name = "calibration"
calibration = true
set = {{ "topology.rtt_ms" = 0, "topology.bottleneck_rate_mbps" = 1000, "flows.fg.duration_s" = 1 }}
[[scenarios]]
name = "cubic-alone"
"""


@requires_lab
@pytest.mark.lab
def test_reno_instead_of_cubic_is_a_regression_named_in_the_diff(tmp_path, capsys):
    config = write_lab_config(tmp_path, SUITE.format(cca="cubic"), name="regression-t")
    assert main(["suite", "regression-t", "--config", str(config)]) == 0        # nothing to compare with yet
    capsys.readouterr()
    write_lab_config(tmp_path, SUITE.format(cca="reno"), name="regression-t")
    assert main(["suite", "regression-t", "--config", str(config)]) == 3
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "tcp_congestion_control" in out
    base, new = sorted((tmp_path / "runs").iterdir())
    a, b = load_store(base), load_store(new)
    comparison = compare_runs(a, b)
    fg = next(r for r in comparison.rows if r.scenario == "cubic-alone" and r.metric == "throughput.fg")
    assert fg.verdict == REGRESSION and fg.relative < -0.05
    keys = {(c.host, c.key) for c in diff_fingerprints(fingerprint_of(a.manifest), fingerprint_of(b.manifest))}
    assert {("S1", "sysctl.net.ipv4.tcp_congestion_control"), ("D1", "sysctl.net.ipv4.tcp_congestion_control")} <= keys
    assert not any(key.startswith("kernel.") for _, key in keys)
    # the second run's report carries the verdict; the calibration cell is beside it, not in it
    html = (new / "report.html").read_text()
    assert "Regression: suite regression-t" in html and "(calibration)" in html
    assert main(["compare", str(base), str(new), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["status"] == "regression"
    assert our_namespaces() == []
