"""The bottleneck meter samples a real tbf through one long-lived loop on its host."""
from __future__ import annotations

import subprocess

import pytest
from lab_support import requires_lab, scratch_namespace

from longhaul.collectors.live.shaper_meter import ShaperMeter, parse_samples
from longhaul.hardware.executors.process import NetnsExecutor, ProcessTable, wait_until


def test_parse_drops_a_block_cut_short():
    tbf = '[{"kind":"tbf","handle":"1:","bytes":1500,"packets":1,"backlog":3000,"overlimits":7}]'
    text = f"1795358148.100000000\n{tbf}\n1795358148.300000000\n{tbf.replace('1500', '4500')}\n1795358148.5\n[{{\"kind\""
    assert parse_samples(text) == [(1795358148.1, 1500, 3000, 7), (1795358148.3, 4500, 3000, 7)]


def test_parse_times_a_sample_between_its_two_stamps():
    tbf = '[{"kind":"tbf","bytes":1500,"backlog":0,"overlimits":2}]'
    text = f"100.0\n{tbf}\n=100.8\n101.0\n{tbf}\n=101.2\n101.4\n{tbf}\n"
    assert [s[0] for s in parse_samples(text)] == [pytest.approx(100.4), pytest.approx(101.1)]


@pytest.mark.lab
@requires_lab
def test_meter_reads_a_real_tbf_every_period(tmp_path):
    with scratch_namespace() as ns:
        for argv in (["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"],
                     ["ip", "-n", ns, "link", "set", "d0", "up"], ["ip", "-n", ns, "link", "set", "d1", "up"],
                     ["tc", "-n", ns, "qdisc", "add", "dev", "d0", "root", "tbf", "rate", "10mbit", "burst", "10k",
                      "limit", "20k"]):
            subprocess.run(argv, check=True)
        procs = ProcessTable()
        with ShaperMeter(NetnsExecutor("R1", ns, procs), "d0", tmp_path / "meter.txt", period_s=0.1) as meter:
            # whole samples: a block the loop is still writing counts once it is closed (CI saw 5 "tbf"
            # in the file and 4 samples)
            wait_until(lambda: (tmp_path / "meter.txt").exists() and len(meter.read()) >= 5, timeout=10,
                       what="5 samples")
        assert len(meter.samples) >= 5
        times = [s[0] for s in meter.samples]
        assert all(0.05 < b - a < 1.0 for a, b in zip(times, times[1:]))    # the host's clock, ~0.1 s apart
        assert not procs.pids()                                              # the loop is gone
