"""The runner, trial, verification and the store, end to end on the fake lab (tests/support/fakes.py):
no root, no namespaces, a few seconds. What the real lab adds (timing, kernels, tools) is
tests/system/test_lab_run.py's; here: that the middle computes and stores what the tools said."""

from __future__ import annotations

import csv
import importlib
import io
import json
from pathlib import Path

import pytest
from fake_lab import DPDK_PORT_AGENT, IPERF3_TCP, FakeExecutor, FakePath
from fakes import TINY_PROFILE, FakeBackend, use_fake_backend, write_fake_config
from rich.console import Console

from longhaul.appliance.cli import app
from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.appliance.run.verify import MIN_STREAMS, probe_ports
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.drivers import trex_stl

pytestmark = pytest.mark.timeout(60)

# what tests/data/iperf3_tcp_p2.json says the receiver got
FAKE_BYTES = 302536432
FAKE_SECONDS = 6.00012
FAKE_MBPS = FAKE_BYTES * 8 / FAKE_SECONDS / 1e6


def quiet() -> Progress:
    return Progress(Console(file=io.StringIO()), live=False)


def run(tmp_path: Path, monkeypatch, path: FakePath | None = None, profile: str = TINY_PROFILE,
        verify: str = "") -> tuple[FileRunWriter, FakeBackend]:
    backend = use_fake_backend(monkeypatch, FakeBackend(path))
    config = load_config(write_fake_config(tmp_path, profile, verify=verify))
    store = Runner(config, quiet()).run()
    return store, backend


def test_a_tiny_profile_runs_on_the_fake_lab_and_is_stored(tmp_path, monkeypatch):
    store, backend = run(tmp_path, monkeypatch)
    assert store.dir.parent == tmp_path / "runs"
    assert store.manifest.status == "complete" and store.manifest.backend == "fake"
    (cell,) = store.cells
    assert cell.status == "complete" and cell.lab.ok
    assert [t.trial for t in cell.trials] == [1, 2] and all(t.ok for t in cell.trials)
    assert [f.name for f in cell.flows] == ["fg", "bg"] and cell.flows[1].cca == "bbr"
    (lab,) = backend.labs                            # one topology: one lab, torn down at the end
    assert lab.built and lab.torn_down
    started = [argv for _, argv in lab.commands if argv[0] == "iperf3" and "-c" in argv]
    assert len(started) == MIN_STREAMS + 2 * 2       # the verification's streams (a client each), 2 flows x 2 trials
    probe = [argv for argv in started if int(argv[argv.index("-p") + 1]) in probe_ports(MIN_STREAMS)]
    assert len(probe) == MIN_STREAMS and all(argv[argv.index("-P") + 1] == "1" for argv in probe)
    phases = json.loads((store.dir / fmt.MANIFEST).read_text())["phases"]     # where the time went
    assert list(phases) == ["session", "lab build", "fingerprint", "verify rtt", "verify rate", "trial set-up",
                            "flows", "trial wind-down", "trial store", "lab teardown"]
    assert [phases[p]["n"] for p in ("lab build", "verify rate", "trial set-up", "flows", "trial wind-down")] == [1, 1, 2, 2, 2]
    assert all(p["s"] >= 0 for p in phases.values())


TUNINGS = TINY_PROFILE.replace("repeats = 2", "repeats = 1").replace('queue = "1bdp"\n', '''queue = "1bdp"

[tuning]
cca = ["cubic", "reno"]
buffer = ["large", "normal"]
''')


@pytest.mark.parametrize("retunes", [True, False], ids=["retuned", "rebuilt"])
def test_cells_that_differ_only_in_end_host_tuning_share_the_lab_where_it_retunes(tmp_path, monkeypatch, retunes):
    store, backend = run(tmp_path, monkeypatch, FakePath(retunes=retunes), profile=TUNINGS)
    assert [c.status for c in store.cells] == ["complete"] * 4
    phases = json.loads((store.dir / fmt.MANIFEST).read_text())["phases"]
    if retunes:     # one lab, one rate verification: the path is the same; each cell's tuning in turn
        (lab,) = backend.labs
        assert [(s.cca, s.buffer) for s in lab.retuned] == [("cubic", "normal"), ("reno", "large"), ("reno", "normal")]
        assert phases["lab build"]["n"] == 1 and phases["lab retune"]["n"] == 3 and phases["verify rate"]["n"] == 1
        assert all(c.lab.ok and c.lab.shared_from == store.cells[0].id for c in store.cells[1:])
    else:           # a lab that cannot is built again for each
        assert len(backend.labs) == 4 and all(lab.torn_down for lab in backend.labs)
        assert phases["lab build"]["n"] == 4 and phases["lab retune"]["n"] == 3


def test_verification_runs_one_client_for_its_streams_where_a_process_starts_slowly(tmp_path, monkeypatch):
    """A client per stream saves the round trip each further connect takes, but costs a process
    start each: where one takes longer than half a round trip (an SSH host under TCG), one client
    runs all the streams, and one server counts them."""
    store, backend = run(tmp_path, monkeypatch, FakePath(process_start_s=0.015))     # the fake path: 20 ms
    (cell,) = store.cells
    assert cell.lab.ok and cell.lab.rate_mbps.goodput is not None
    probe = [argv for _, argv in backend.labs[0].commands if argv[0] == "iperf3" and "-p" in argv
             and int(argv[argv.index("-p") + 1]) in probe_ports(MIN_STREAMS)]
    assert [argv[argv.index("-P") + 1] for argv in probe if "-c" in argv] == [str(MIN_STREAMS)]
    assert len([argv for argv in probe if "-s" in argv]) == 1


def test_trial_numbers_come_from_the_tools_output(tmp_path, monkeypatch):
    store, _ = run(tmp_path, monkeypatch, FakePath(rtt_offset_ms=0.5))
    (cell,) = store.cells
    trial = cell.trials[0]
    for flow in trial.flows:
        assert flow.bytes == FAKE_BYTES and flow.on_s == pytest.approx(FAKE_SECONDS, abs=1e-3)
        assert flow.mean_mbps == pytest.approx(FAKE_MBPS)
        assert flow.retransmits == json.loads(IPERF3_TCP.read_text())["end"]["sum_sent"]["retransmits"]
        assert flow.completed_bursts == flow.bursts == 1
    assert trial.jain == pytest.approx(1.0)          # both flows got the same
    assert trial.rtt.median_ms == pytest.approx(20.5) and trial.rtt.samples == 5
    assert trial.rtt.idle_ms == pytest.approx(20.5)  # the verification's idle RTT
    assert cell.stats.flows["fg"].n == 2 and cell.stats.flows["fg"].std_mbps == pytest.approx(0.0)
    assert cell.jain == pytest.approx(1.0)
    assert cell.lab.rate_mbps.measured == pytest.approx(100.0, rel=1e-3)
    # what the receiver's sockets got while the shaper was saturated: its payload rate
    assert cell.lab.rate_mbps.goodput == pytest.approx(100 * 1448 / 1514, rel=0.02)
    assert cell.lab.rtt_ms.measured == pytest.approx(20.5)

    trial_dir = store.trial_dir(cell.id, 1)
    with (trial_dir / fmt.THROUGHPUT_CSV).open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == fmt.THROUGHPUT_COLUMNS
    # per-second figures are what the sockets delivered (the fake's data socket: 1 MB acknowledged
    # per 0.1 s tick, 80 Mb/s, for 2 s), not iperf3's server's own seconds (29.4, 593.9, ...)
    fg = [float(r["mbps"]) for r in rows if r["flow"] == "fg" and r["stream"] == "all"]
    assert len(fg) == 2 and fg[1] == pytest.approx(80.0, abs=0.5), fg
    assert {r["stream"] for r in rows if r["flow"] == "fg"} == {"all", "0"}     # the control socket is no stream
    with (trial_dir / fmt.TCPINFO_CSV).open() as fh:
        tcp = list(csv.DictReader(fh))
    assert tuple(tcp[0]) == fmt.TCPINFO_COLUMNS
    assert {r["flow"] for r in tcp} == {"fg", "bg"} and len(tcp) == 2 * 20   # control sockets left out
    assert trial.collector.socket_samples == 2 * 2 * 20 and trial.collector.rtt_rounds == 5
    with (trial_dir / fmt.EVENTS_CSV).open() as fh:
        assert tuple(next(csv.reader(fh))) == fmt.EVENTS_COLUMNS


def test_writer_and_reader_agree(tmp_path, monkeypatch):
    store, _ = run(tmp_path, monkeypatch)
    stored = load_store(store.dir)
    assert stored.problems == [] and stored.status == "complete" and stored.run_id == store.run_id
    assert stored.entries == store.cells             # the same typed cells, trials, flows, stats
    assert stored.summary["cells"] == json.loads((store.dir / fmt.SUMMARY).read_text())["cells"]
    (cell,) = stored.entries
    for trial in cell.trials:                        # trial.json is the summary's trial
        doc = json.loads((stored.trial_dir(cell.id, trial.trial) / fmt.TRIAL_JSON).read_text())
        assert doc == trial.to_dict()
    assert json.loads((fmt.cell_dir(store.dir, cell.id) / fmt.VERIFICATION).read_text()) == cell.lab.to_dict()
    series = stored.trial_series(cell.id, 1)
    assert set(series.throughput) == {"fg", "bg"} and len(series.rtt[0]) == 5 and not series.problems
    assert [d.id for d in stored.manifest.cells] == [cell.id] and stored.manifest.cells[0].cell["topology"]["rtt_ms"] == 20


def test_verification_refuses_a_lab_whose_rtt_is_off(tmp_path, monkeypatch):
    store, backend = run(tmp_path, monkeypatch, FakePath(rtt_offset_ms=10.0))
    (cell,) = store.cells
    assert cell.status == "refused" and cell.trials == []
    assert not cell.lab.ok and "idle RTT 30.0 ms vs configured 20 ms" in cell.error
    assert store.manifest.status == "failed"
    (lab,) = backend.labs
    assert not [argv for _, argv in lab.commands if "-c" in argv and argv[0] == "iperf3" and "-t" in argv
                and argv[argv.index("-t") + 1] == "1"]   # no flow of the cell was started
    stored = load_store(store.dir)
    assert stored.entries[0].lab.ok is False and stored.entries[0].error == cell.error


def test_cells_on_one_lab_build_share_its_verification_and_recheck_their_rtt(tmp_path, monkeypatch):
    """Two scenarios on the same lab: the rate probe runs once, for the first; the second records
    that verification as shared, with the idle RTT of its own re-check."""
    two = TINY_PROFILE.replace("repeats = 2", "repeats = 1") + (
        '\n[[scenarios]]\nname = "a"\nflows = ["fg"]\n\n[[scenarios]]\nname = "b"\nflows = ["fg", "bg"]\n')
    store, backend = run(tmp_path, monkeypatch, profile=two)
    first, second = store.cells
    assert [c.status for c in store.cells] == ["complete", "complete"] and len(backend.labs) == 1
    assert first.lab.shared_from is None and second.lab.shared_from == first.id
    assert second.lab.rate_mbps == first.lab.rate_mbps and second.lab.pairs.keys() == {"1", "2"}
    assert second.lab.rtt_ms.measured == pytest.approx(20, abs=1)
    (lab,) = backend.labs
    probes = [argv for _, argv in lab.commands if argv[:1] == ["iperf3"] and "-c" in argv and "5299" in argv]
    assert len(probes) == 1, probes          # one rate probe, whose client connects to port 5299
    stored = load_store(store.dir)
    assert stored.entries[1].lab.shared_from == first.id


def test_verification_refuses_a_slow_bottleneck(tmp_path, monkeypatch):
    store, _ = run(tmp_path, monkeypatch, FakePath(rate_factor=0.8))
    (cell,) = store.cells
    assert cell.status == "refused" and "bottleneck rate 80.0 Mb/s" in cell.error


def test_a_failed_trial_is_resumed(tmp_path, monkeypatch):
    store, _ = run(tmp_path, monkeypatch, FakePath(client_output="iperf3: error - unable to connect"))
    (cell,) = store.cells
    assert cell.status == "failed" and [t.status for t in cell.trials] == ["failed", "failed"]
    assert "no iperf3 result" in cell.trials[0].error and cell.stats.flows == {}

    use_fake_backend(monkeypatch, FakeBackend())      # the lab is right again
    resume = FileRunWriter.open(store.dir)
    config = load_config(store.dir / fmt.CONFIG_SNAPSHOT, list(resume.manifest.profiles),
                         profile_dir=store.dir / fmt.PROFILES_DIR)
    resumed = Runner(config, quiet(), tmp_path / "runs", resume=resume).run()
    assert resumed.dir == store.dir
    (cell,) = load_store(store.dir).entries
    assert cell.status == "complete" and [t.trial for t in cell.trials] == [1, 2] and all(t.ok for t in cell.trials)
    manifest = json.loads((store.dir / fmt.MANIFEST).read_text())
    assert manifest["status"] == "complete" and len(manifest["resumed"]) == 1


def test_longhaul_run_on_the_fake_lab_prints_and_reports(tmp_path, monkeypatch, capsys):
    use_fake_backend(monkeypatch)
    config = write_fake_config(tmp_path)
    assert app.main(["run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run_dir = Path(out.strip().splitlines()[-1])
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert "tiny-" in out and f"{FAKE_MBPS:.1f}" in out       # the results table, from typed entries


TREX_PROFILE = """
[profile]
description = "fake lab: TRex background beside iperf3"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 100
rtt_ms = 20
queue = "1bdp"
[[flows]]
name = "fg"
role = "foreground"
tool = "iperf3"
pair = 1
duration_s = 1
[[flows]]
name = "bg"
role = "background"
tool = "trex"
protocol = "udp"
udp_rate_mbps = 40
pair = 1
duration_s = 3
[flows.options]
frame_bytes = 1024
"""


def test_a_trex_flow_sends_from_the_labs_generator_with_its_tree_and_ports(tmp_path, monkeypatch):
    store, backend = run(tmp_path, monkeypatch, FakePath(generator=True), TREX_PROFILE)
    (cell,) = store.cells
    assert cell.status == "complete" and all(t.ok for t in cell.trials)
    (lab,) = backend.labs
    runners = [(host, argv) for host, argv in lab.commands if trex_stl.RUNNER in argv]
    assert [host for host, _ in runners] == ["G1"]          # not the pair's sender
    args = json.loads(runners[0][1][-1])
    assert args["trex_path"] == "/opt/trex/v3.04" and args["ports"] == [0]
    source = args["profile_source"]
    assert "'10.1.3.2'" in source and f"'{lab.address('D1')}'" in source and "_packet(1024," in source
    meters = [(host, argv) for host, argv in lab.commands if "longhaul.drivers.agents.ifrate" in argv]
    assert [host for host, _ in meters] == ["D1"] and "d1-eth0" in meters[0][1]   # the receiver's meter
    bg = next(f for f in cell.trials[0].flows if f.name == "bg")
    assert bg.mean_mbps == pytest.approx(40.0, rel=0.01)     # what the receiver's meter counted


def test_a_trex_flow_is_refused_at_its_line_where_the_lab_has_no_generator(tmp_path, monkeypatch, capsys):
    use_fake_backend(monkeypatch, FakeBackend(FakePath(generator=False)))
    config = write_fake_config(tmp_path, TREX_PROFILE)
    assert app.main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    line = TREX_PROFILE.splitlines().index('tool = "trex"') + 1
    assert f"tiny.toml:{line}" in err, err
    assert "the fake lab has one with FakePath(generator=True)" in err, err
    assert not (tmp_path / "runs").exists()                 # refused before anything started


DPDK_PROFILE = """
[profile]
description = "fake lab: testpmd from the sender's DPDK port"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 100
rtt_ms = 20
queue = "1bdp"
[[flows]]
name = "bg"
role = "background"
tool = "dpdk"
pair = 1
duration_s = 3
"""


def test_a_dpdk_flow_binds_the_inventory_s_port_around_its_burst_and_fails_if_it_is_not_given_back(
        tmp_path, monkeypatch):
    store, backend = run(tmp_path / "a", monkeypatch, FakePath(dpdk_port=True), DPDK_PROFILE)
    (cell,) = store.cells
    assert all(t.ok for t in cell.trials), [t.error for t in cell.trials]
    (lab,) = backend.labs
    steps = [(host, "bind" if "bind" in argv else "restore" if "restore" in argv else "testpmd")
             for host, argv in lab.commands if DPDK_PORT_AGENT in argv or "dpdk-testpmd" in " ".join(argv)]
    assert steps == [("S1", "bind"), ("S1", "testpmd"), ("S1", "restore")]
    testpmd = next(argv for _, argv in lab.commands if "dpdk-testpmd" in " ".join(argv))[2]
    assert "-a 0000:00:10.0" in testpmd and "--tx-ip=10.1.1.3," in testpmd
    # a port the host keeps on DPDK's driver is the trial's failure, named
    store, _ = run(tmp_path / "b", monkeypatch, FakePath(dpdk_port=True, port_kept=True), DPDK_PROFILE)
    (trial,) = store.cells[0].trials
    assert not trial.ok and "is on uio_pci_generic, was virtio-pci" in trial.error


def test_testpmd_s_start_up_is_waited_for_beyond_the_flows_planned_end(tmp_path, monkeypatch):
    """A dpdk burst's duration is its flood's, timed from testpmd's forwarding line; its start-up
    (12-35 s under TCG) comes first, so the trial's deadline allows it (start_allowance_s). Here
    testpmd runs 1.5 s for a 0.5 s flow, with the grace after the planned end cut to 0.3 s."""
    monkeypatch.setattr(importlib.import_module("longhaul.appliance.run.trial.drive"), "GRACE_S", 0.3)
    profile = DPDK_PROFILE.replace("duration_s = 3", "duration_s = 0.5")
    store, _ = run(tmp_path, monkeypatch, FakePath(dpdk_port=True, testpmd_runs_s=1.5), profile)
    (cell,) = store.cells
    assert all(t.ok for t in cell.trials), [t.error for t in cell.trials]


def test_a_host_lost_as_its_trial_starts_is_named_and_the_run_stops(tmp_path, monkeypatch):
    """A powered-off sender: the RTT probe's SSH session to it times out before the host watch's
    periodic checks have missed twice. The trial asks every host once more (HostWatch.settle), so
    the run stops naming S1, not an anonymous tool error."""
    from longhaul.core.errors import RunError
    from longhaul.hardware.executors.process import CommandError

    real_start = FakeExecutor.start

    def start(self, argv, label="", stdout=None, stderr=None):
        if self.name == "S1" and label == "fping-bursts":
            self.lab.s1_gone = True
            raise CommandError("S1", argv, 255, "Connection timed out during banner exchange")
        return real_start(self, argv, label, stdout, stderr)

    monkeypatch.setattr(FakeExecutor, "start", start)
    monkeypatch.setattr(FakeExecutor, "remote", True)
    monkeypatch.setattr(FakeExecutor, "alive",
                        lambda self, timeout: not (self.name == "S1" and getattr(self.lab, "s1_gone", False)), raising=False)
    monkeypatch.setattr(FakeExecutor, "fence", lambda self, why: setattr(self, "lost", why), raising=False)
    with pytest.raises(RunError, match=r"S1 lost in trial 1 of .*Connection timed out.*the run stops"):
        run(tmp_path, monkeypatch)
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/summary.json")]
    (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
    assert cell["trials"][0]["lost_hosts"] == ["S1"] and cell["trials"][0]["status"] == "failed"


def test_the_host_check_is_the_configured_one(tmp_path, monkeypatch):
    """[run] host_check: S1 stops answering once its trial runs; the watch asks every 0.05 s, gives
    each check 0.05 s and names S1 lost after three misses, well before the probe's 2.5 s end."""
    from longhaul.core.errors import RunError

    def alive(self, timeout):
        assert timeout == 0.05
        return not (self.name == "S1" and getattr(self.lab, "trial_started", False))

    real_start = FakeExecutor.start

    def start(self, argv, label="", stdout=None, stderr=None):
        if label == "fping-bursts":
            self.lab.trial_started = True
        return real_start(self, argv, label, stdout, stderr)

    monkeypatch.setattr(FakeExecutor, "start", start)
    monkeypatch.setattr(FakeExecutor, "remote", True)
    monkeypatch.setattr(FakeExecutor, "alive", alive, raising=False)
    monkeypatch.setattr(FakeExecutor, "fence", lambda self, why: setattr(self, "lost", why), raising=False)
    use_fake_backend(monkeypatch, FakeBackend())
    path = write_fake_config(tmp_path, TINY_PROFILE.replace("repeats = 2", "repeats = 1") + "\n[probe]\nduration_s = 2.5\n")
    path.write_text(path.read_text().replace("[run]\n", "[run]\nhost_check = { period_s = 0.05, timeout_s = 0.05, misses = 3 }\n"))
    with pytest.raises(RunError, match="S1 lost in trial 1"):
        Runner(load_config(path), quiet()).run()
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/summary.json")]
    (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
    assert "(3 checks of 0.05 s)" in cell["trials"][0]["error"], cell["trials"][0]["error"]


def test_a_host_check_that_never_misses_is_refused_before_anything_starts(tmp_path):
    from longhaul.core.errors import ConfigError

    path = write_fake_config(tmp_path)
    path.write_text(path.read_text().replace("[run]\n", "[run]\nhost_check = { misses = 0 }\n"))
    with pytest.raises(ConfigError, match=r"misses"):
        load_config(path)


def test_a_trial_under_way_is_in_the_store_second_by_second_and_its_view_goes_when_it_is_stored(tmp_path, monkeypatch):
    """live.csv: what the console's live page reads while a trial runs (collectors/store/live_rows.py)."""
    from longhaul.collectors.store.live_rows import load_live

    seen: list[tuple[float, dict]] = []
    progress = quiet()
    tick = progress.tick

    def watching(elapsed, flows, rtt_ms):
        live = next(store_dir.glob(f"*/cells/*/trial-*/{fmt.LIVE_CSV}"), None)
        if live is not None:
            seen.append((elapsed, load_live(live.parent)))
        tick(elapsed, flows, rtt_ms)

    progress.tick = watching
    use_fake_backend(monkeypatch, FakeBackend())
    # the fake tools exit at once: the probe's 2.5 s keep the trial going long enough to tick
    config = load_config(write_fake_config(tmp_path, TINY_PROFILE.replace("repeats = 2", "repeats = 1")
                                           + "\n[probe]\nduration_s = 2.5\n"))
    store_dir = tmp_path / "runs"
    store = Runner(config, progress).run()
    assert len(seen) >= 2 and all(rows is not None for _, rows in seen)
    rates, rtt = seen[-1][1]
    assert rtt is not None and len(rtt[0]) >= 1                   # the probe's RTT, each second
    assert not list(store.dir.glob(f"cells/*/trial-*/{fmt.LIVE_CSV}"))    # stored: the view is gone


def test_a_trial_whose_hosts_ran_short_of_tcp_memory_says_so(tmp_path, monkeypatch, caplog):
    """The end hosts' kernels entered TCP memory pressure during each trial (each host's TcpExt
    counters move by 3 between two reads): the stored trial carries it, and the log warns."""
    store, _ = run(tmp_path, monkeypatch, FakePath(tcp_pressures=3))
    (cell,) = load_store(store.dir).entries
    # four end hosts (two pairs), each read before and after each trial
    assert [(t.tcp_memory_pressures, t.tcp_memory_pressure_ms) for t in cell.trials] == [(12, 1200), (12, 1200)]
    assert "entered TCP memory pressure 12 times" in caplog.text
    stored = json.loads(next((store.dir / "cells").glob("*/trial-1/trial.json")).read_text())
    assert (stored["tcp_memory_pressures"], stored["tcp_memory_pressure_ms"]) == (12, 1200)

    calm, _ = run(tmp_path / "calm", monkeypatch)
    (cell,) = load_store(calm.dir).entries
    assert [t.tcp_memory_pressures for t in cell.trials] == [0, 0]
