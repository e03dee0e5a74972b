"""This machine's tcp_mem for an embedded-lab session (hardware/tcp_mem.py): raised only where the
cells' buffers need it, at most to a share of the RAM, put back at the session's end and, after a
run killed before its teardown, by `longhaul clean`; here on a file standing in for
/proc/sys/net/ipv4/tcp_mem (tests/system/test_leftovers.py does it to the real one)."""

from __future__ import annotations

import json
import os
from pathlib import PosixPath

import pytest
from lab_support import write_lab_config

from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.preflight import needs_of
from longhaul.hardware import run_marker, tcp_mem

GiB = 2**30
PAGE = 4096
HERE = (287898, 383867, 575796)        # this machine's own, in pages (24 GiB of RAM)


def test_raised_only_past_the_pressure_value_and_never_lowered():
    assert tcp_mem.raised(HERE, 1 * GiB, 24 * GiB, PAGE) is None             # 1 GiB < 1.46 GiB
    # two ends of four 1 GiB streams: 8 GiB, within two thirds of half the RAM (8 GiB)
    low, pressure, high = tcp_mem.raised(HERE, 8 * GiB, 24 * GiB, PAGE)
    assert pressure == 8 * GiB // PAGE and (low, high) == (pressure * 3 // 4, pressure * 3 // 2)
    # ten streams (20 GiB) are held to the cap: TCP may take at most half the RAM
    capped = tcp_mem.raised(HERE, 20 * GiB, 24 * GiB, PAGE)
    assert capped == (low, pressure, high) and high * PAGE <= 12 * GiB
    # a machine set higher already keeps its values
    assert tcp_mem.raised((10**7, 2 * 10**7, 3 * 10**7), 20 * GiB, 24 * GiB, PAGE) is None


@pytest.fixture
def sysctl(tmp_path, monkeypatch):
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(tcp_mem, "ram_bytes", lambda: 24 * GiB)      # this machine's, whatever runs the test
    path = tmp_path / "tcp_mem"
    path.write_text("\t".join(map(str, HERE)) + "\n")
    return path


def test_a_session_raises_it_and_puts_it_back_even_when_it_fails(sysctl):
    with pytest.raises(KeyboardInterrupt):
        with tcp_mem.held("a1b2c3", 8 * GiB, sysctl) as change:
            assert tcp_mem.read(sysctl) == change.applied and change.before == HERE
            assert (run_marker.STATE_DIR / "a1b2c3.tcpmem").is_file()   # before the value was written
            record = change.record("a1b2c3")["hosts"]["machine"]["sysctl"]
            assert record["before"] == {"net.ipv4.tcp_mem": "287898 383867 575796"}
            raise KeyboardInterrupt
    assert tcp_mem.read(sysctl) == HERE and not (run_marker.STATE_DIR / "a1b2c3.tcpmem").exists()
    with tcp_mem.held("a1b2c3", 1 * GiB, sysctl) as change:     # nothing to raise: nothing touched
        assert change is None and not run_marker.STATE_DIR.joinpath("a1b2c3.tcpmem").exists()


class _ReadOnly(PosixPath):
    """/proc/sys mounted read-only, as in a container: root's writes fail too."""

    def write_text(self, *args, **kwargs):
        raise PermissionError(30, "Read-only file system", str(self))


def test_a_machine_that_cannot_write_it_runs_with_what_it_has(sysctl, caplog):
    readonly = _ReadOnly(sysctl)
    with tcp_mem.held("a1b2c3", 8 * GiB, readonly) as change:
        assert change is None
    assert tcp_mem.read(sysctl) == HERE and "cannot raise it" in caplog.text
    assert not (run_marker.STATE_DIR / "a1b2c3.tcpmem").exists()


def test_a_value_changed_by_someone_else_meanwhile_is_left_as_they_set_it(sysctl):
    with tcp_mem.held("a1b2c3", 8 * GiB, sysctl):
        sysctl.write_text("1 2 3\n")
    assert tcp_mem.read(sysctl) == (1, 2, 3)


def test_clean_puts_back_what_a_killed_run_raised_and_not_what_a_live_one_holds(sysctl):
    applied = tcp_mem.raised(HERE, 8 * GiB, 24 * GiB, PAGE)
    run_marker.STATE_DIR.mkdir()
    hold = "287898 383867 575796\n" + " ".join(map(str, applied)) + "\n"
    (run_marker.STATE_DIR / "dead01.tcpmem").write_text(hold)            # no marker: its run is gone
    (run_marker.STATE_DIR / "live01.tcpmem").write_text(hold)
    (run_marker.STATE_DIR / "live01.json").write_text(json.dumps({"pid": os.getpid(), "run_dir": "/x"}))
    sysctl.write_text(" ".join(map(str, applied)) + "\n")
    assert tcp_mem.leftovers(False, sysctl) == [f"net.ipv4.tcp_mem raised to {' '.join(map(str, applied))} "
                                                f"(was 287898 383867 575796)"]
    assert tcp_mem.read(sysctl) == applied
    tcp_mem.leftovers(True, sysctl)
    assert tcp_mem.read(sysctl) == HERE and sorted(p.name for p in run_marker.STATE_DIR.iterdir()) == [
        "live01.json", "live01.tcpmem"]
    assert tcp_mem.leftovers(False, sysctl) == []


def test_a_run_needs_what_its_largest_cell_s_tcp_streams_may_hold_at_both_ends(tmp_path):
    profile = """
[profile]
description = "buffers"
[topology]
pairs = 2
bottleneck_rate_mbps = 100
rtt_ms = 10
[tuning]
buffer = ["normal", "large"]
[[flows]]
name = "fg"
role = "foreground"
tool = "iperf3"
pair = 1
streams = 4
duration_s = 5
[[flows]]
name = "bg"
role = "background"
tool = "iperf3"
pair = 2
buffer = 1000000
duration_s = 5
[[flows]]
name = "udp"
role = "background"
tool = "paced-udp"
pair = 2
udp_rate_mbps = 5
duration_s = 5
"""
    needs = needs_of(load_config(write_lab_config(tmp_path, profile, "buffers")))
    assert needs.socket_bytes == 2 * (4 * GiB + 1000000)
