"""hardware/host_watch.py: a remote lab host that stops answering is named lost within a bounded
time and fenced (every later command fails at once); hosts of this machine are never watched."""

from __future__ import annotations

import time

import pytest

from longhaul.hardware.executors.process import CommandError, Executor, LocalExecutor, ProcessTable
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.host_watch import HostLost, HostWatch


class Remote(Executor):
    remote = True

    def __init__(self, name: str, answers_until: float):
        super().__init__(name, ProcessTable())
        self.answers_until = answers_until
        self.checks = 0

    def alive(self, timeout: float) -> bool:
        self.checks += 1
        if time.monotonic() < self.answers_until:
            return True
        time.sleep(min(timeout, 0.05))         # a dead host: the check runs into its timeout
        return False


def test_a_host_that_stops_answering_is_lost_within_its_bound_and_fenced():
    t0 = time.monotonic()
    s1, d1 = Remote("S1", t0 + 0.3), Remote("D1", t0 + 60)
    local = LocalExecutor("controller", ProcessTable())
    with HostWatch({"S1": s1, "D1": d1, "here": local}, period_s=0.05, timeout_s=0.05, misses=3) as watch:
        assert set(watch.executors) == {"S1", "D1"}           # this machine's hosts cannot be lost apart from it
        while not watch.lost() and time.monotonic() - t0 < 5:
            watch.check()
            time.sleep(0.01)
        took = time.monotonic() - t0
        with pytest.raises(HostLost) as exc:
            watch.check()
    assert list(exc.value.hosts) == ["S1"] and "3 checks" in str(exc.value), exc.value
    assert 0.3 < took < 0.3 + 3 * (0.05 + 0.05) + 0.5, took       # misses x (period + timeout), and a margin
    assert s1.lost is not None and d1.lost is None


def test_a_trial_that_failed_before_the_watch_noticed_names_the_host_that_went_with_it():
    """A power cut breaks the flow's SSH session (or times out a new one) before the watch's
    periodic checks have missed twice: settle() asks every host now, so the failure is named for
    what it was; hosts that answer are left alone."""
    t0 = time.monotonic()
    s1, d1 = Remote("S1", t0), Remote("D1", t0 + 60)
    with HostWatch({"S1": s1, "D1": d1}, period_s=60, timeout_s=0.05, misses=2) as watch:
        assert watch.lost() == {}                       # the periodic checks have not missed twice yet
        lost = watch.settle()
        took = time.monotonic() - t0
    assert list(lost) == ["S1"] and "2 checks" in lost["S1"] and s1.lost is not None and d1.lost is None
    assert took < 2 * 0.05 + 0.5, took
    assert HostWatch({"D1": Remote("D1", t0 + 60)}).settle() == {}


def test_a_fenced_ssh_host_refuses_every_command_at_once(tmp_path):
    ssh = SshExecutor("S1", ProcessTable(), host="192.0.2.1", user="root", key=tmp_path / "k",
                      known_hosts=tmp_path / "kh")
    ssh.fence("no answer over SSH for 20 s")
    t0 = time.monotonic()
    for attempt in (lambda: ssh.run(["sysctl", "-w", "x=1"]), lambda: ssh.start(["iperf3", "-c", "x"])):
        with pytest.raises(CommandError, match="host lost: no answer over SSH for 20 s"):
            attempt()
    done = ssh.run(["tc", "qdisc", "del", "dev", "wan", "root"], check=False)      # teardown's way: no raise
    assert (done.returncode, done.stderr) == (255, "host lost: no answer over SSH for 20 s")
    assert ssh.alive(1.0) is False and time.monotonic() - t0 < 0.5
