"""The replay's leg agent (drivers/agents/replay_leg.py) without a lab: its launch loop and ticks
with processes and tc that only record, on real time at a tenth of a second a tick. The same agent
runs the real transfers in test_planning_replay.py's lab replay."""

from __future__ import annotations

import io
import json
import time

import pytest

from longhaul.drivers.agents.htb_caps import BE_CLASS, OD_CLASS
from longhaul.drivers.agents.replay_leg import PORT, SCHEDULE, Emitter, Leg, check_schedule


class FakeClient:
    """A client that exits `runs_s` after it started with `code`, its output already written."""

    def __init__(self, runs_s: float, code: int):
        self.ends, self.code, self.returncode = time.monotonic() + runs_s, code, None

    def poll(self):
        if self.returncode is None and time.monotonic() >= self.ends:
            self.returncode = self.code
        return self.returncode

    def terminate(self):
        if self.poll() is None:
            self.returncode = -15

    def wait(self, timeout=None):
        return self.poll()

    kill = terminate


class Host:
    """spawn and tc for the agent: clients per a script keyed by the transfer's bytes; the class
    counters grow 1000 bytes a read."""

    def __init__(self, script: dict[str, list[tuple[float, int, str]]]):
        self.script = script
        self.spawned: list[list[str]] = []
        self.tc_calls: list[list[str]] = []
        self.reads = 0

    def spawn(self, argv, out, err):
        self.spawned.append(argv)
        runs_s, code, text = self.script[argv[argv.index("-n") + 1]].pop(0)
        out.write_text(text)
        err.write_text("")
        return FakeClient(runs_s, code)

    def tc(self, argv):
        self.tc_calls.append(argv)
        if argv[1] == "-s":
            self.reads += 1
            return (f"class htb {OD_CLASS} parent 7e:1\n Sent {1000 * self.reads} bytes 1 pkt\n"
                    f"class htb {BE_CLASS} parent 7e:1\n Sent {2000 * self.reads} bytes 1 pkt\n")
        return ""


def schedule(transfers, caps=True, deadline_s=5.0) -> dict:
    return {**SCHEDULE.stamp(), "name": "t", "interval_s": 0.1, "lead_s": 0.0, "deadline_s": deadline_s,
            "cooldown_s": 0.05, "max_attempts": 3, "busy_marker": "busy",
            "transfers": [{"arrival_s": t, "od": od, "argv": ["client", "-p", PORT, "-n", name]}
                          for t, od, name in transfers],
            "ports": {"od": [20000, 20001], "be": [20004, 20005]},
            "shaper": {"ifname": "eth0", "root_bps": 1e9, "mtu": 1500, "min_step_bps": 1e6},
            "caps": {"capacity_bps": 100e6, "od_share": 0.4, "headroom": 0.05} if caps else None}


def run(doc, host, tmp_path) -> tuple[str, list[dict]]:
    check_schedule(doc)
    stream = io.StringIO()
    reason = Leg(doc, Emitter(stream), tmp_path, spawn=host.spawn, tc=host.tc).run()
    return reason, [json.loads(line) for line in stream.getvalue().splitlines()]


def test_transfers_launch_at_their_arrivals_and_a_busy_server_is_tried_again(tmp_path):
    host = Host({"a": [(0.05, 1, '{"error": "the server is busy running a test. try again later"}'),
                       (0.1, 0, "{}")],
                 "b": [(0.1, 0, "{}")], "c": [(0.1, 0, "{}")]})
    reason, events = run(schedule([(0.0, False, "a"), (0.2, True, "b"), (0.3, False, "c")]), host, tmp_path)
    assert reason == "done"
    launches = [e for e in events if e["ev"] == "launch"]
    assert [(e["i"], e["attempt"]) for e in launches] == [(0, 1), (0, 2), (1, 1), (2, 1)]
    assert launches[0]["port"] != launches[1]["port"]                     # the retry took another server
    assert {e["port"] for e in launches if e["i"] == 1} <= {20000, 20001}    # OD on OD's servers
    for e in launches:
        arrival = (0.0, 0.2, 0.3)[e["i"]]
        assert arrival <= e["t"] < arrival + (0.2 if e["attempt"] > 1 else 0.05)
    exits = [e for e in events if e["ev"] == "exit"]
    assert [(e["i"], e["retry"]) for e in exits] == [(0, True), (0, False), (1, False), (2, False)]
    assert "busy" in exits[0]["stdout"]
    # the OD arrival capped BE at (1 - 0.4) x 100 Mb/s at once; without OD the cap is lifted
    caps = [e["bps"] for e in events if e["ev"] == "cap"]
    assert caps[0] == pytest.approx(60e6) and caps[-1] is None
    cap_calls = [argv for argv in host.tc_calls if argv[:3] == ["tc", "class", "change"]]
    assert cap_calls[0][cap_calls[0].index("rate") + 1] == "60000000bit"
    samples = [e for e in events if e["ev"] == "sample"]
    assert len(samples) >= 4 and [s["od"] for s in samples] == sorted(s["od"] for s in samples)
    assert samples[-1]["t"] >= max(e["t"] for e in exits) - 0.01            # the last read after the last exit


def test_the_deadline_stops_what_still_runs(tmp_path):
    host = Host({"slow": [(60.0, 0, "")]})
    reason, events = run(schedule([(0.0, False, "slow")], caps=False, deadline_s=0.3), host, tmp_path)
    assert reason == "deadline"
    exit_ = next(e for e in events if e["ev"] == "exit")
    assert exit_["code"] == -15 and 0.3 <= exit_["t"] < 1.0
    assert not [e for e in events if e["ev"] == "cap"]                      # the baseline: never capped


def test_a_schedule_is_checked_before_anything_runs():
    doc = schedule([(1.0, False, "a"), (0.5, False, "b")])
    with pytest.raises(ValueError, match="arrival order"):
        check_schedule(doc)
    with pytest.raises(ValueError, match="format"):
        check_schedule({**doc, "format": "x/1"})
    doc = schedule([(0.0, True, "a")])
    doc["ports"]["od"] = []
    with pytest.raises(ValueError, match="no server port"):
        check_schedule(doc)


def test_a_tc_that_fails_fails_the_leg(tmp_path):
    host = Host({"a": [(5.0, 0, "{}")]})

    def broken(argv):
        if argv[1] == "class":
            raise RuntimeError("RTNETLINK answers: No such file or directory")
        return host.tc(argv)

    doc = schedule([(0.0, True, "a")])
    check_schedule(doc)
    stream = io.StringIO()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="RTNETLINK"):
        Leg(doc, Emitter(stream), tmp_path, spawn=host.spawn, tc=broken).run()
    assert time.monotonic() - started < 2.0            # at once, not after the transfer's 5 s
    assert [json.loads(line)["ev"] for line in stream.getvalue().splitlines()][-1] == "exit"   # client stopped
