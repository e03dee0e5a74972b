"""The live display's RTT in interval mode comes from the tail of fping's output so far."""
from pathlib import Path

import pytest
from lab_support import requires_lab, scratch_namespace

from longhaul.collectors.live.rtt_probe import RttProbe
from longhaul.drivers import fping

DATA = Path(__file__).parents[1] / "data" / "fping_interval.txt"


def test_latest_interval_reply_is_the_last_reply_line(tmp_path):
    out = tmp_path / "fping.txt"
    text = DATA.read_text()
    out.write_text(text)
    probe = RttProbe(executor=None, target="D1", mode="interval", raw_path=out)
    replies = [r for r in map(fping.parse_interval_line, text.splitlines()) if r]
    assert probe.latest() == replies[-1].rtt_ms


def test_nothing_yet(tmp_path):
    assert RttProbe(executor=None, target="D1", mode="interval", raw_path=tmp_path / "none").latest() is None


def test_burst_loop_output_parses_to_one_sample_per_round():
    from longhaul.collectors.live.rtt_probe import parse_burst_loop
    text = ("T 1000.500\n10.2.1.2 : 128.1 128.3 - 128.2\n"
            "T 1001.500\n10.2.1.2 : - - - -\n"
            "T 1002.500\n")                                        # cut short: no fping line yet
    samples = parse_burst_loop(text, wall0=1000.0)
    assert [(s.t_s, s.sent, s.received) for s in samples] == [(0.5, 4, 3), (1.5, 4, 0)]
    assert abs(samples[0].rtt_ms - 128.2) < 1e-9 and samples[1].rtt_ms is None


@pytest.mark.lab
@requires_lab
def test_burst_probe_runs_one_round_a_second_in_one_process(tmp_path):
    import time

    from longhaul.hardware.executors.process import NetnsExecutor, ProcessTable, wait_until

    with scratch_namespace() as ns:
        procs = ProcessTable()
        probe = RttProbe(NetnsExecutor("S1", ns, procs), "127.0.0.1", "burst", raw_path=tmp_path / "rtt.txt")
        probe.start(time.monotonic())
        wait_until(lambda: (tmp_path / "rtt.txt").read_text().count(" : ") >= 4, timeout=15, what="4 rounds")
        assert probe.latest() is not None
        samples = probe.stop()
        assert len(samples) >= 4 and all(s.received == 10 and s.rtt_ms < 5 for s in samples)
        gaps = [b.t_s - a.t_s for a, b in zip(samples, samples[1:])]
        assert all(0.9 < g < 1.3 for g in gaps), gaps                  # a 1 s grid on the host's clock
        assert not procs.pids()


def _round_starts(command: list[str], seconds: float) -> list[float]:
    """Start times of the burst loop's rounds, relative to the first, with `command` as the round."""
    import os
    import signal
    import subprocess
    import time

    from longhaul.collectors.live.rtt_probe import LOOP, burst_loop_argv

    argv = burst_loop_argv("D1")
    argv = argv[:argv.index(LOOP) + 1] + command        # the loop itself, another round command
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGTERM)
    stamps = [float(line[2:]) for line in proc.communicate(timeout=10)[0].splitlines() if line.startswith("T ")]
    return [t - stamps[0] for t in stamps]


def test_burst_loop_rounds_stay_on_a_one_second_grid():
    # sleeping "1 s minus this round" drifted by the loop's own start-up costs, round after round
    starts = _round_starts(["sleep", "0.3"], 8.5)
    assert len(starts) >= 8
    assert all(abs(t - k) < 0.15 for k, t in enumerate(starts)), starts


def test_burst_loop_skips_the_starts_an_overrunning_round_missed():
    starts = _round_starts(["sleep", "1.4"], 6.7)          # each round takes 1.4 s: rounds at 0, 2, 4, 6
    assert len(starts) >= 3
    assert all(abs(t - 2 * k) < 0.15 for k, t in enumerate(starts)), starts
