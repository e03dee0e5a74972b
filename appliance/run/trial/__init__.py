"""One trial of one cell: receivers up, collectors on, flows launched on schedule, results parsed.

Any traffic tool runs through its driver (drivers/tool.py): iperf3's long-lived servers are shared
by a flow's bursts; other tools get a receiver per burst, started SERVER_LEAD_S ahead. A burst is
launched early by the tool's set-up time (its `setup_round_trips` plus one connect per stream: iperf3's
control connection, cookie, parameter exchange and test start take 4) so that data starts at the
declared time; events.csv records when each burst was planned, launched and when its process ended.

A flow may have a chooser (`Chooser`): just before each of its bursts starts, it is handed the RTT
probe's rounds so far and returns the congestion control for that burst with a note of why
(seed 000's OPS decides from the probe window before each transfer); decisions.csv keeps them.
A cell with no flows runs the probe alone for probe.duration_s (the idle path).

A burst's totals are its tool's; its per-second figures are what arrived (`ARRIVALS`): a TCP
flow's sockets' delivered bytes from the socket sampler, a UDP flow's from the receivers' arrival
meter, unless the tool's receiver is a kernel counter itself (`counts_arrivals`).
"""

from __future__ import annotations

import time
from pathlib import Path

from longhaul.appliance.config.load import HostCheck
from longhaul.appliance.config.profiles import CellSpec
from longhaul.appliance.run.phases import Phases
from longhaul.appliance.run.trial import endpoints
from longhaul.appliance.run.trial.drive import drive
from longhaul.appliance.run.trial.plan import BASE_PORT, PORTS_PER_FLOW, Chooser, clock_offset, plan_runs
from longhaul.appliance.run.trial.state import Trial
from longhaul.appliance.run.trial.summary import summarise
from longhaul.collectors.live.host_cpu import StealMeter
from longhaul.collectors.live.rtt_probe import RttProbe
from longhaul.collectors.live.socket_sampler import SocketSampler
from longhaul.collectors.live.tcp_memory import PressureMeter
from longhaul.collectors.store.records import TrialSummary
from longhaul.hardware.host_watch import HostLost, HostWatch

__all__ = ["BASE_PORT", "PORTS_PER_FLOW", "Chooser", "Trial", "run_trial", "watch_hosts"]


def run_trial(lab, spec: CellSpec, trial_no: int, trial_dir: Path, idle_rtt_ms: float | None,
              on_tick=None, choosers: dict[str, Chooser] | None = None, *, phases: Phases,
              host_check: HostCheck = HostCheck()) -> TrialSummary:
    """phases: where the trial's time goes (the runner's, for the manifest); host_check: how its
    remote hosts are watched ([run] host_check)."""
    memory = PressureMeter({h.name: lab.executor(h.name) for h in lab.topo.hosts if h.role in ("sender", "receiver")})
    with phases("trial set-up"):
        trial = set_up(lab, spec, trial_no, trial_dir, idle_rtt_ms, choosers or {})
        memory.start()      # before the trial's clock: on SSH hosts a read takes a round trip or more
    trial.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic() + trial.offset_s
    with StealMeter() as steal, watch_hosts(lab, host_check) as watch:
        try:
            trial.probe.start(t0)           # a host lost as its probe starts is named like one lost later
            trial.sampler.start(t0)
            with phases("flows"):
                drive(trial, t0, on_tick, watch)
        except HostLost as exc:     # the runner decides: stop the run, or go on ([run] on_host_failure)
            trial.lost = exc.hosts
            trial.errors.append(f"{exc} at {time.monotonic() - t0:.1f} s of the trial")
        except (TimeoutError, RuntimeError) as exc:  # this trial failed; the run goes on with the next one
            trial.errors.append(str(exc))
            trial.lost = watch.settle()     # unless a host that went with it is why: then that host is named
        finally:
            wind_down = time.monotonic()
            wind_down_trial(trial, t0)
    trial.duration_s = time.monotonic() - t0
    trial.steal_pct = steal.percent
    trial.tcp_pressure = memory.stop()
    summary = summarise(trial)
    phases.add("trial wind-down", time.monotonic() - wind_down)
    return summary


def watch_hosts(lab, check: HostCheck) -> HostWatch:
    return HostWatch({h.name: lab.executor(h.name) for h in lab.topo.hosts}, check.period_s, check.timeout_s,
                     check.misses)


def set_up(lab, spec: CellSpec, trial_no: int, trial_dir: Path, idle_rtt_ms: float | None,
           choosers: dict[str, Chooser]) -> Trial:
    """Everything before the trial's clock: bursts planned, sources prepared, shared receivers and
    the arrival meter up, the probe and the socket sampler made."""
    cell = spec.cell
    raw = trial_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    runs = plan_runs(lab, cell, raw, idle_rtt_ms if idle_rtt_ms is not None else cell.topology.rtt_ms, choosers)
    undo = endpoints.prepare(lab, runs)
    meter = endpoints.arrival_meter(lab, runs, raw)
    try:
        shared = endpoints.start_shared_servers(lab, runs, raw)
        meter.start()
    except BaseException:       # started servers and meters are the run's to stop; prepared files are ours
        endpoints.undo(undo)
        raise
    probe = RttProbe(lab.executor(f"S{cell.probe.pair}"), lab.address(f"D{cell.probe.pair}"), cell.probe.mode,
                     cell.probe.interval_ms, raw / "fping.txt")
    senders = {run.sender: lab.executor(run.sender) for run in runs if run.flow.protocol == "tcp"}
    sampler = SocketSampler(senders, {port: r.flow.name for r in runs for port in r.ports}, raw,
                            period_s=1 / cell.probe.tcpinfo_hz)
    return Trial(lab=lab, spec=spec, number=trial_no, dir=trial_dir, idle_rtt_ms=idle_rtt_ms, runs=runs,
                 probe=probe, sampler=sampler, meter=meter, undo=undo, shared=shared, offset_s=clock_offset(runs))


def wind_down_trial(trial: Trial, t0: float) -> None:
    """Collectors stopped, every burst's processes and receivers ended, sources un-prepared: all of
    it, whatever failed; what did fail is the trial's error."""
    trial.sampler.stop()
    trial.meter.stop(t0)
    trial.errors += trial.meter.errors
    trial.probe.stop()
    for run in trial.runs:
        for launch in run.launches:
            if launch.proc:
                launch.proc.stop()
            if launch.server:
                endpoints.stop_server(trial.lab, run, launch.server, launch.server_spec)
    for server in trial.shared:
        server.stop()
    trial.errors += endpoints.undo(trial.undo)     # a port not given back, or a file left: the trial says so
