"""The lab replay of a trace (appliance/plan/): its orchestration on the fake lab, its pieces
without a lab, and a real replay on the netns lab held to the simulation of the same trace."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import TINY_PROFILE, FakeBackend, use_fake_backend, write_fake_config
from lab_support import requires_lab, write_lab_config

from longhaul.appliance.config.load import load_config
from longhaul.appliance.plan.leg import EventReader, leg_series, pool_sizes
from longhaul.appliance.plan.replay import ReplayLab, choose_tool, default_bin_s, plan_legs, replay
from longhaul.appliance.plan.shaper import (
    BE_CLASS,
    OD_CLASS,
    PortRange,
    ShaperError,
    attach_point,
    install_plan,
    port_ranges,
)
from longhaul.appliance.plan.tools import REPLAY_TOOLS
from longhaul.collectors.studies.planning.compress import compress
from longhaul.collectors.studies.planning.replay_record import REPLAY, read_replay, unfaithful_legs
from longhaul.collectors.studies.planning.sim import simulate
from longhaul.collectors.studies.planning.trace import Trace, Transfer
from longhaul.core.errors import RunError
from longhaul.drivers.agents.htb_caps import cap_argv, class_bytes
from longhaul.hardware.executors.process import Completed

# --- pieces ---------------------------------------------------------------------------------


def test_port_ranges_are_aligned_powers_of_two_and_disjoint():
    od, be = port_ranges(5, 20)
    assert (od.size, be.size) == (8, 32)
    assert od.base % 8 == 0 and be.base % 32 == 0
    assert not set(od.ports) & set(be.ports)
    assert od.mask == "0xfff8" and be.mask == "0xffe0"
    with pytest.raises(ValueError):
        PortRange(20001, 8)


def test_attach_point_by_what_the_interface_has():
    default = attach_point("eth0", [{"kind": "fq_codel", "handle": "0:", "root": True}])
    assert default.parent == ["root"] and default.undo == [["tc", "qdisc", "del", "dev", "eth0", "root"]]
    # the netns lab's access tbf: the htb replaces its FIFO, whose limit comes back on undo
    tbf = [{"kind": "tbf", "handle": "1:", "root": True, "options": {"rate": 125000000, "burst": 1250000, "lat": 67000}},
           {"kind": "bfifo", "handle": "8001:", "parent": "1:1", "options": {"limit": 8388608}}]
    graft = attach_point("eth0", tbf)
    assert graft.parent == ["parent", "1:1"]
    assert graft.undo == [["tc", "qdisc", "replace", "dev", "eth0", "parent", "1:1", "bfifo", "limit", "8388608"]]
    # no child listed: the limit from the tbf's rate and latency
    assert attach_point("eth0", tbf[:1]).undo[0][-1] == str(int(125000000 * 67000 / 1e6 + 1250000))
    with pytest.raises(ShaperError, match="htb handle 1:"):
        attach_point("eth0", [{"kind": "htb", "handle": "1:", "root": True}])


def test_install_plan_classifies_by_port_and_caps_be():
    od, be = port_ranges(4, 4)
    plan = install_plan("eth0", attach_point("eth0", []), 1e9, od, be, 1500, 30e6)
    text = [" ".join(argv) for argv in plan]
    assert text[0] == "tc qdisc add dev eth0 root handle 7e: htb default 30"
    assert any(f"match ip dport {od.base} {od.mask} flowid {OD_CLASS}" in t for t in text)
    assert any(f"match ip dport {be.base} {be.mask} flowid {BE_CLASS}" in t for t in text)
    assert any(f"classid {BE_CLASS} htb rate 30000000bit ceil 30000000bit" in t for t in text)
    assert " ".join(cap_argv("eth0", None, 1e9, 1500)).count("1000000000bit") == 2   # uncapped: the link


TC_CLASSES = """class tbf 1:1 parent 1: leaf 7e:

class htb 7e:1 root rate 1Gbit ceil 1Gbit burst 1250000b cburst 1250000b
 Sent 4242 bytes 3 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0

class htb 7e:20 parent 7e:1 leaf 7e20: prio 1 rate 30Mbit ceil 30Mbit burst 67050b cburst 67050b
 Sent 1234 bytes 2 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_class_bytes_reads_tc_output():
    assert class_bytes(TC_CLASSES) == {"7e:1": 4242, "7e:20": 1234}      # iproute2 6.1's text, -j or not
    text = json.dumps([{"class": "htb", "handle": "7e:10", "bytes": 1234, "packets": 3},
                       {"class": "htb", "handle": "7e:20", "stats": {"bytes": 99}}])
    assert class_bytes(text) == {"7e:10": 1234, "7e:20": 99}
    assert class_bytes("") == {}


def test_plan_legs_and_bins():
    od = np.array([True, False, False])
    legs = plan_legs(od, 0.4, (1.0, 2.0))
    assert [leg.name for leg in legs] == ["baseline-x1", "scheduled-x1", "baseline-x2", "scheduled-x2"]
    assert not legs[0].capped and not legs[0].od.any() and legs[1].od.tolist() == od.tolist()
    trace = compress(Trace([Transfer(0, 10, 1000), Transfer(86_390, 10, 1000)]), keep_one_in=1, span_s=7200,
                     period_s=86_400)
    assert default_bin_s(trace) == pytest.approx(5.0)          # the paper's minute, compressed 12x
    assert default_bin_s(Trace([Transfer(0, 1, 1)])) == 60.0


def test_lab_units():
    lab = ReplayLab(bottleneck_rate_mbps=50)
    assert lab.capacity_bps == pytest.approx(50e6 * 1448 / 1514)
    assert lab.pacing_overhead == 1.0
    assert lab.spec().link.queue_bytes == lab.queue_bytes == 62_500


def test_pool_sizes_follow_the_simulated_concurrency():
    trace = Trace([Transfer(i * 0.1, 5, 1_000_000) for i in range(10)])
    od = np.arange(10) < 3
    sim = simulate(trace, od, 100e6, 0.4)
    assert pool_sizes(sim) == (int(np.ceil(3 * 1.5)) + 2, int(np.ceil(7 * 1.5)) + 2)


# --- the orchestration on the fake lab ------------------------------------------------------


def short_trace() -> Trace:
    return Trace([Transfer(0.2 * i, 2.0, 2_000_000 + 100_000 * i, where=f"t:{i}") for i in range(8)], name="short")


@pytest.mark.parametrize(("setting", "tool", "program"), [("auto", "gridftp", "globus-url-copy"),
                                                          ("iperf3", "iperf3", "iperf3")])
def test_replay_on_the_fake_lab(tmp_path, monkeypatch, setting, tool, program):
    backend = use_fake_backend(monkeypatch, FakeBackend())
    config = load_config(write_fake_config(tmp_path))
    trace = short_trace()
    od = np.arange(8) % 3 == 0
    messages = []
    result = replay(config, trace, od, 0.4, tmp_path / "replay", lab=ReplayLab(bottleneck_rate_mbps=50, tool=setting),
                    progress=messages.append)
    doc = read_replay(result.path)
    assert doc["format"] == REPLAY.name and doc["status"] == "complete" and doc["backend"] == "fake"
    assert doc["tool"] == tool          # the fake hosts have every program: auto takes GridFTP
    assert doc["trace"]["transfers"] == 8 and doc["lab"]["capacity_bps"] == pytest.approx(50e6 * 1448 / 1514)
    assert [leg["name"] for leg in doc["legs"]] == ["baseline", "scheduled"]
    for leg in doc["legs"]:
        assert None not in leg["transfers"]["finish_s"]                   # every client exited
        assert leg["summary"]["finished"] == 8 and leg["simulated"]["avg_bs_all"] >= 1.0
        assert leg["errors"] == []
        offset = 10_000 if tool == "gridftp" else 0           # a GridFTP client names the control port
        for port, is_od in zip(leg["transfers"]["port"], leg["transfers"]["od"]):
            base, size = leg["ports"]["od" if is_od else "be"]
            assert base + offset <= port < base + size + offset
    baseline, scheduled = doc["legs"]
    assert baseline["cap_changes"] == 0 and scheduled["cap_changes"] >= 1   # an OD arrival capped BE
    lab = backend.labs[0]
    commands = [" ".join(argv) for host, argv in lab.commands if host == "S1"]
    assert sum("htb default 30" in c for c in commands) == 2               # one htb a leg
    assert sum(c == "tc qdisc del dev eth0 root" for c in commands) == 2   # and each removed
    assert any(c.startswith("sysctl -q -w net.ipv4.tcp_notsent_lowat=") for c in commands)
    schedules = [json.loads(text) for text in lab.files.values()]            # one agent a leg, on S1
    assert [s["caps"] is None for s in schedules] == [True, False]
    clients = [t["argv"] for s in schedules for t in s["transfers"]]
    assert len(clients) == 16
    assert all(program in argv for argv in clients)
    rate = trace.transfers[0].nbytes * 8 / trace.transfers[0].seconds          # each paced at its own rate
    assert f"{rate:.0f}" in clients[0] or f"LONGHAUL_MAX_PACING_RATE={rate / 8:.0f}" in clients[0]
    assert sum(c == "rm -f " + path for c in commands for path in lab.files) == 2    # schedules removed
    assert lab.torn_down
    assert any("scheduled" in m for m in messages)


def test_a_failed_replay_still_writes_its_record_and_tears_down(tmp_path, monkeypatch):
    backend = use_fake_backend(monkeypatch, FakeBackend())
    config = load_config(write_fake_config(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("the lab fell over")

    monkeypatch.setattr("longhaul.appliance.plan.replay.run_leg", broken)
    with pytest.raises(RuntimeError, match="fell over"):
        replay(config, short_trace(), np.zeros(8, bool), 0.4, tmp_path / "replay")
    doc = read_replay(tmp_path / "replay" / "replay.json")
    assert doc["status"] == "failed" and "fell over" in doc["error"] and doc["finished"]
    assert backend.labs[0].torn_down


def test_read_replay_refuses_another_format(tmp_path):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"format": "something/9"}))
    with pytest.raises(ValueError, match="something/9"):
        read_replay(path)


# --- a real replay -----------------------------------------------------------------------


def lab_trace(seed: int = 1) -> Trace:
    """40 transfers arriving over 60 s, 3-10 s each at 4-16 Mb/s: a mean demand of 39 Mb/s and
    peaks of 107 Mb/s for a 50 Mb/s bottleneck (the simulation: all-BE average bounded slowdown
    1.30; 30 % OD with 40 % of the link: OD 1.07, BE 1.36)."""
    rng = np.random.default_rng(seed)
    n = 40
    starts = np.sort(rng.uniform(0, 60, n))
    seconds = rng.uniform(3, 10, n)
    rates = rng.uniform(4e6, 16e6, n)
    return Trace([Transfer(float(s), float(d), int(r * d / 8), where=f"lab:{i}")
                  for i, (s, d, r) in enumerate(zip(starts, seconds, rates))], name="lab-short")


# The replay's average bounded slowdowns against the simulation's of the same trace, per class:
# within TOLERANCE_ABS. TCP shares a class max-min fairly where Listing 1 shares it in proportion
# to the requested rates (so slow transfers keep their rate in the lab: the all-BE average came
# out 0.08 under the simulation's in two runs), a flow's set-up and closing round trips are not
# simulated, and the cap follows OD's rate one interval late. Measured on the netns lab, iperf3
# (five runs): baseline 1.216-1.222 vs 1.299; OD 1.033-1.049 vs 1.074; BE 1.347-1.360 vs 1.360;
# GridFTP (what auto takes here): baseline 1.247, OD 1.056, BE 1.370. This
# holds for a load under the link's capacity; overloaded (this trace at load ratio 1.5 and 2) the
# lab's slowdowns came out 0.1-0.8 under the simulation's, OD's the most.
TOLERANCE_ABS = 0.2


@pytest.mark.lab
@requires_lab
@pytest.mark.timeout(420)
def test_lab_replay_matches_the_simulation(tmp_path):
    config = load_config(write_lab_config(tmp_path, TINY_PROFILE))
    trace = lab_trace()
    od = np.random.default_rng(1).permutation(len(trace.transfers)) < round(0.3 * len(trace.transfers))
    lab = ReplayLab(bottleneck_rate_mbps=50, rtt_ms=10, queue="1bdp")
    result = replay(config, trace, od, 0.4, tmp_path / "replay", lab=lab)
    lines = []
    for leg in result.legs:
        got, want = leg.summary(), leg.simulated_summary()
        assert got["finished"] == len(trace.transfers), leg.errors
        for key in ("avg_bs_od", "avg_bs_be", "avg_bs_all"):
            if want[key] is None:
                continue
            lines.append(f"{leg.name} {key}: lab {got[key]:.3f} sim {want[key]:.3f}")
            assert abs(got[key] - want[key]) <= TOLERANCE_ABS, "\n".join(lines)
    print("\n".join(lines))
    # the paper's pattern (sections 5.4, 6.3): OD below the all-BE baseline, BE above it. The
    # simulation holds all of it; in the lab OD's gain (0.23 simulated) is beyond a run's noise,
    # BE's cost (0.06 simulated) is not: one CI run's baseline came out 1.402 where five runs here
    # gave 1.216-1.222, so the lab's BE is held only to not below the baseline by more than that.
    baseline, scheduled = result.leg("baseline"), result.leg("scheduled")
    sim_base, sim_sched = baseline.simulated_summary(), scheduled.simulated_summary()
    assert sim_sched["avg_bs_od"] < sim_base["avg_bs_all"] < sim_sched["avg_bs_be"]
    lab_base, lab_sched = baseline.summary(), scheduled.summary()
    assert lab_sched["avg_bs_od"] < lab_base["avg_bs_all"] - 0.1, "\n".join(lines)
    assert lab_sched["avg_bs_be"] > lab_base["avg_bs_all"] - TOLERANCE_ABS, "\n".join(lines)
    assert result.leg("scheduled").cap_changes > 0 and result.leg("baseline").cap_changes == 0
    # what crossed the bottleneck is the bytes of the transfers, give or take the last interval's
    delivered = result.leg("baseline").series["delivered_bytes"].sum()
    assert delivered == pytest.approx(result.leg("baseline").transfers["nbytes"].sum(), rel=0.05)


def test_a_late_read_spreads_its_bytes_over_the_seconds_it_covers():
    """A slow host answered tc 3 s late: its 3 s of bytes are three seconds' worth, not one second's
    (which would read as three times what the link passes)."""
    samples = [(0.0, 0, 0, 0, None, None), (1.0, 0, 100, 0, None, None), (4.0, 0, 400, 0, 5e6, None)]
    neck = [(-0.5, 0), (0.5, 50), (1.0, 100), (4.0, 400)]        # R1's reads, one before t0
    series = leg_series(samples, neck, 1.0, 1.0)
    assert list(series["be_bytes"]) == [100, 100, 100, 100]
    assert list(series["bottleneck_bytes"]) == [75, 100, 100, 100]   # only what came after t0
    assert list(series["delivered_bytes"]) == list(series["bottleneck_bytes"])
    assert series["be_cap_bps"][3] == 5e6 and np.isnan(series["be_cap_bps"][0])


class _Host:
    """An executor whose programs are `has`, and whose name lookups fail unless `resolves`."""

    def __init__(self, name, has=(), resolves=True):
        self.name, self.has, self.resolves = name, set(has), resolves

    def run(self, argv, check=True, timeout=30.0):
        if argv[0] == "getent":
            return Completed(argv, 0 if self.resolves else 2, "", "")
        needed = argv[4:]                            # sh -c SCRIPT sh NEEDED...
        return Completed(argv, 0, "\n".join(n for n in needed if n not in self.has), "")


def test_auto_takes_gridftp_where_it_runs_and_says_why_not_elsewhere():
    shim = REPLAY_TOOLS["gridftp"].sender_files()
    sender = _Host("S1", {"iperf3", "globus-url-copy", *shim})
    receiver = _Host("D1", {"iperf3", "globus-gridftp-server", *shim})
    assert choose_tool("auto", sender, receiver, "10.2.1.2")[0].name == "gridftp"
    receiver.resolves = False                        # a VM with no resolver
    tool, passed_over = choose_tool("auto", sender, receiver, "10.2.1.2")
    assert tool.name == "iperf3" and "10.2.1.2 has no name" in passed_over[0]
    with pytest.raises(RunError, match="gridftp: D1: 10.2.1.2 has no name"):
        choose_tool("gridftp", sender, receiver, "10.2.1.2")
    with pytest.raises(RunError, match="S1: iperf3"):
        choose_tool("iperf3", _Host("S1"), receiver, "10.2.1.2")


def test_a_leg_that_measured_the_lab_is_named_with_why():
    def leg(name, lag, excess):
        return {"name": name, "summary": {"launch_lag_median_s": lag, "uncontended_excess_median_s": excess}}
    doc = {"legs": [leg("baseline", 0.002, 0.2), leg("scheduled", 0.9, 2.4), leg("old", None, None)]}
    assert unfaithful_legs(doc) == ["scheduled: launches 0.90 s after their arrivals (median)",
                                    "scheduled: uncontended transfers 2.40 s longer than their runtime (median)"]


def test_the_events_file_is_read_as_it_grows(tmp_path):
    path = tmp_path / "agent.jsonl"
    reader = EventReader(path)
    assert reader.read() == []                                   # not there yet
    path.write_text('{"ev": "start", "epoch": 1.0}\n{"ev": "lau')   # the agent is mid-line
    assert reader.read() == [{"ev": "start", "epoch": 1.0}]
    with open(path, "a") as fh:
        fh.write('nch", "i": 0}\n')
    assert [e["ev"] for e in reader.read()] == ["start", "launch"]
