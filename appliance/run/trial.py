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

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Protocol

from longhaul.appliance.config.profiles import CellSpec
from longhaul.appliance.config.schema import Flow
from longhaul.appliance.run.phases import Phases
from longhaul.collectors.live import acked_rate, arrivals
from longhaul.collectors.live.arrival_meter import ArrivalMeter
from longhaul.collectors.live.host_cpu import StealMeter
from longhaul.collectors.live.rtt_probe import RttProbe, RttSample
from longhaul.collectors.live.socket_sampler import SocketSampler, control_sockets
from longhaul.collectors.metrics import jain, mbps, payload_ceiling_mbps, rtt_stats, seconds_above
from longhaul.collectors.store.format import (
    DECISIONS_COLUMNS,
    DECISIONS_CSV,
    EVENTS_COLUMNS,
    EVENTS_CSV,
    RTT_COLUMNS,
    RTT_CSV,
    TCPINFO_COLUMNS,
    TCPINFO_CSV,
    THROUGHPUT_COLUMNS,
    THROUGHPUT_CSV,
)
from longhaul.collectors.store.records import CollectorCounts, FlowResult, RttStats, TrialSummary
from longhaul.core.tables import write_csv
from longhaul.drivers import ccashim
from longhaul.drivers.patterns import Burst, bursts, span
from longhaul.drivers.registry import tool_for
from longhaul.drivers.result import Result
from longhaul.drivers.tool import BurstSpec, ServerSpec, Shape, Tool
from longhaul.hardware.executors.process import Process, wait_until
from longhaul.hardware.host_watch import HostLost, HostWatch
from longhaul.hardware.path_rtt import below_floor
from longhaul.hardware.topology import GENERATOR
from longhaul.hardware.tuning import buffer_limit

log = logging.getLogger(__name__)
BASE_PORT = 5201
# Each flow owns PORTS_PER_FLOW consecutive ports. iperf3's server runs one test at a time and a
# burst's teardown (a few round trips) overlaps the next burst's early launch, so a flow rotates
# over SHARED_SERVERS of them; per-burst receivers cycle through all of them.
PORTS_PER_FLOW = 10
SHARED_SERVERS = 3
SERVER_LEAD_S = 2.0
READY_TIMEOUT_S = 15.0
PREPARE_TIMEOUT_S = 1800.0    # writing a 20 GB source file on a slow disk
GRACE_S = 30.0
BYTES_FLOW_LIMIT_S = 6 * 3600


@dataclass
class Launch:
    burst: Burst
    launch_at: float
    raw: Path
    spec: BurstSpec
    server_spec: ServerSpec | None = None
    server: Process | None = None
    proc: Process | None = None
    launched_s: float | None = None
    exited_s: float | None = None
    result: Result | None = None

    @property
    def server_raw(self) -> Path:
        return self.raw.with_name(self.raw.stem + "-server.out")


class Chooser(Protocol):
    def __call__(self, burst: Burst, rounds: list[RttSample]) -> tuple[str, dict]:
        """(the burst's congestion control, what to log about the choice)."""
        ...




@dataclass
class FlowRun:
    flow: Flow
    cca: str
    base_port: int
    tool: Tool
    launches: list[Launch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    chooser: Chooser | None = None
    decisions: list[list] = field(default_factory=list)

    @property
    def completed(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.result is not None]

    @property
    def ports(self) -> list[int]:
        count = SHARED_SERVERS if self.tool.shared_servers else PORTS_PER_FLOW
        return [self.base_port + k for k in range(count)]

    def port_for(self, burst: Burst) -> int:
        return self.ports[burst.index % len(self.ports)]


def setup_lead_s(tool: Tool, flow: Flow, rtt_ms: float) -> float:
    return (tool.setup_round_trips + flow.streams) * rtt_ms / 1000.0


def burst_spec(run: FlowRun, burst: Burst, cell, workdir: Path, facts: dict, receiver: str | None = None) -> BurstSpec:
    """facts: the lab's addressing of the flow's pair (NetnsLab.pair_facts), for layer-2 tools;
    receiver: the receiver's test-interface address (lab.address), which resolves on real hosts
    too, where the lab's names (D1) do not."""
    flow = run.flow
    buffer = cell.flow_buffer(flow)
    shape = Shape("sinusoid", flow.min_mbps, flow.max_mbps, flow.period_s) if flow.pattern == "sinusoid" else None
    return BurstSpec(receiver=receiver or f"D{flow.pair}", port=run.port_for(burst), duration_s=burst.duration_s,
                     bytes=burst.bytes, protocol=flow.protocol, streams=flow.streams,
                     cca=run.cca if flow.protocol == "tcp" else None,
                     window_bytes=buffer_limit(buffer) if isinstance(buffer, int) else None,
                     rate_mbps=flow.udp_rate_mbps, shape=shape, storage=flow.storage,
                     workdir=PurePosixPath(workdir),
                     options={**facts, "udp_port": run.port_for(burst),
                              "clients": flow.clients, "file_bytes": flow.file_bytes, **flow.options})


def run_trial(lab, spec: CellSpec, trial_no: int, trial_dir: Path, idle_rtt_ms: float | None,
              on_tick=None, choosers: dict[str, Chooser] | None = None, *, phases: Phases) -> TrialSummary:
    """phases: where the trial's time goes (the runner's, for the manifest)."""
    with phases("trial set-up"):
        ready = _set_up(lab, spec, trial_dir, idle_rtt_ms, choosers or {})
    runs, raw, undo, shared, meter, offset = ready
    cell = spec.cell
    probe = RttProbe(lab.executor(f"S{cell.probe.pair}"), lab.address(f"D{cell.probe.pair}"), cell.probe.mode,
                     cell.probe.interval_ms, raw / "fping.txt")
    senders = {f"S{r.flow.pair}": lab.executor(f"S{r.flow.pair}") for r in runs if r.flow.protocol == "tcp"}
    sampler = SocketSampler(senders, {port: r.flow.name for r in runs for port in r.ports}, raw,
                            period_s=1 / cell.probe.tcpinfo_hz)
    started_wall = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    trial_errors: list[str] = []
    lost: dict[str, str] = {}
    t0 = time.monotonic() + offset
    with StealMeter() as steal, HostWatch({h.name: lab.executor(h.name) for h in lab.topo.hosts}) as watch:
        probe.start(t0)
        sampler.start(t0)
        try:
            with phases("flows"):
                _drive(lab, runs, t0, on_tick, probe, sampler, cell.probe.duration_s or 0.0, watch)
        except HostLost as exc:     # the runner decides: stop the run, or go on ([run] on_host_failure)
            lost = exc.hosts
            trial_errors.append(f"{exc} at {time.monotonic() - t0:.1f} s of the trial")
        except (TimeoutError, RuntimeError) as exc:  # this trial failed; the run goes on with the next one
            trial_errors.append(str(exc))
        finally:
            wind_down = time.monotonic()
            sampler.stop()
            meter.stop(t0)
            trial_errors += meter.errors
            probe.stop()
            for run in runs:
                for launch in run.launches:
                    if launch.proc:
                        launch.proc.stop()
                    if launch.server:
                        _stop_server(lab, run, launch.server, launch.server_spec)
            for server in shared:
                server.stop()
            trial_errors += _undo(undo)     # a port not given back, or a file left: the trial says so
    duration = time.monotonic() - t0
    summary = _summarise(spec, runs, trial_no, trial_dir, probe, sampler, meter, idle_rtt_ms, started_wall, duration,
                         trial_errors)
    summary.host_cpu_steal_pct = steal.percent
    summary.lost_hosts = sorted(lost)
    phases.add("trial wind-down", time.monotonic() - wind_down)
    return summary


def _set_up(lab, spec: CellSpec, trial_dir: Path, idle_rtt_ms: float | None, choosers: dict[str, Chooser]):
    """Everything before the trial's clock: bursts planned, sources prepared, shared receivers and
    the arrival meter up. (runs, raw dir, undo steps, shared servers, meter, clock offset)."""
    cell = spec.cell
    raw = trial_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rtt_for_lead = idle_rtt_ms if idle_rtt_ms is not None else cell.topology.rtt_ms
    runs = [FlowRun(f, cell.flow_cca(f), BASE_PORT + PORTS_PER_FLOW * i, tool_for(f.tool), chooser=choosers.get(f.name))
            for i, f in enumerate(cell.flows)]
    for run in runs:
        facts = _facts(lab, run)
        lead = setup_lead_s(run.tool, run.flow, rtt_for_lead)
        for b in bursts(run.flow):
            work = raw / "work" / f"{run.flow.name}-b{b.index}"
            if not run.tool.shared_servers:     # file-moving tools keep their files here
                work.mkdir(parents=True, exist_ok=True)
            run.launches.append(Launch(b, b.start_s - lead, raw / f"{run.flow.name}-b{b.index}.out",
                                       burst_spec(run, b, cell, work, facts, lab.address(f"D{run.flow.pair}"))))
    undo = _prepare(lab, runs)
    meter = _arrival_meter(lab, runs, raw)
    try:
        shared = _start_servers(lab, [(run, port) for run in runs if run.tool.shared_servers for port in run.ports], raw)
        meter.start()
    except BaseException:       # started servers and meters are the run's to stop; prepared files are ours
        _undo(undo)
        raise
    first = min((l.launch_at - (0 if r.tool.shared_servers else SERVER_LEAD_S) for r in runs for l in r.launches),
                default=0.0)
    offset = max(0.0, -first)
    return runs, raw, undo, shared, meter, offset


def _arrival_meter(lab, runs: list[FlowRun], raw: Path) -> ArrivalMeter:
    """A kernel counter on each receiver for the UDP flows whose tool does not count arrivals itself."""
    ports: dict[str, list[int]] = {}
    for run in runs:
        if run.flow.protocol == "udp" and not run.tool.counts_arrivals:
            ports.setdefault(f"D{run.flow.pair}", []).extend(run.ports)
    return ArrivalMeter({host: lab.executor(host) for host in ports}, ports, raw)


def _tcp_arrivals(launch: Launch, sampler, meter) -> list:
    return acked_rate.per_second(sampler.samples, launch.spec.port, launch.burst.start_s)


def _udp_arrivals(launch: Launch, sampler, meter) -> list:
    # what a port counts once its burst is over (planned and its client ended, plus the path's
    # delay) is not this burst's
    ends = [t for t in (launch.exited_s, launch.burst.stop_s) if t is not None]
    until = max(ends) + ARRIVAL_TAIL_S if ends else None
    return arrivals.counted(meter.series.get(launch.spec.port, []), launch.burst.start_s, until)


# A burst's per-second figures, by protocol, from what arrived (collectors/live/arrivals.py): the
# tool's own per-second view stays in its raw output
ARRIVALS = {"tcp": _tcp_arrivals, "udp": _udp_arrivals}
ARRIVAL_TAIL_S = 1.0


def _sender(run: FlowRun) -> str:
    """The lab host a flow's clients run on: its pair's sender, or the lab's traffic generator."""
    return GENERATOR if run.tool.sends_from == "generator" else f"S{run.flow.pair}"


def _facts(lab, run: FlowRun) -> dict:
    if run.tool.sends_from == "generator":
        return lab.generator_facts(run.flow.pair)
    return lab.pair_facts(run.flow.pair) if run.tool.needs_link_facts else {}


def _prepare(lab, runs: list[FlowRun]) -> list[tuple]:
    """Run each burst's untimed preparation on its sender (a disk transfer's source file); return
    the steps that undo it."""
    undo = []
    try:
        for run in runs:
            executor = lab.executor(_sender(run))
            for launch in run.launches:
                before, after = run.tool.prepare(launch.spec)
                undo += [(executor, argv) for argv in after]
                for argv in before:
                    executor.run(argv, timeout=PREPARE_TIMEOUT_S)
    except BaseException:
        _undo(undo)
        raise
    return undo


def _undo(steps: list[tuple]) -> list[str]:
    """Every step runs, whatever the others did; what failed is returned."""
    failed = []
    for executor, argv in steps:
        done = executor.run(argv, check=False, timeout=PREPARE_TIMEOUT_S)
        if done.returncode != 0:
            failed.append(f"undoing preparation ({' '.join(argv[-4:])}): {(done.stderr or done.stdout).strip()[-300:]}")
    return failed


def _start_servers(lab, ports: list[tuple[FlowRun, int]], raw: Path) -> list[Process]:
    """Start the shared receivers, then wait until each listens (they come up together; shared
    servers: before the trial starts)."""
    started = []
    for run, port in ports:
        server_spec = run.tool.server(replace(run.launches[0].spec, port=port))
        out = raw / f"{run.flow.name}-server-{port}.json"
        started.append((run, server_spec, _launch_server(lab, run, server_spec, out)))
    for run, server_spec, proc in started:
        _wait_ready(lab, run, proc, server_spec)
    return [proc for _, _, proc in started]


def _with_cca(run: FlowRun, argv: list[str], cca: str | None = None) -> list[str]:
    """Tools without a CCA option get the flow's (or the burst's chosen) per socket; both ends,
    since either may open the data connections (GridFTP's passive mode)."""
    if run.flow.protocol != "tcp" or run.tool.sets_cca:
        return argv
    return ccashim.wrap(argv, cca or run.cca)


def _launch_server(lab, run: FlowRun, server_spec: ServerSpec, out: Path) -> Process:
    return lab.executor(f"D{run.flow.pair}").start(_with_cca(run, server_spec.argv), label=f"{run.tool.name}-{out.stem}",
                                                    stdout=out, stderr=out.with_suffix(".err"))


def _wait_ready(lab, run: FlowRun, proc: Process, server_spec: ServerSpec) -> None:
    host = f"D{run.flow.pair}"
    executor = lab.executor(host)
    wait_until(lambda: proc.poll() is not None or bool(executor.run(server_spec.ready, check=False).stdout.strip()),
               timeout=READY_TIMEOUT_S, what=f"{run.tool.name} receiver for {run.flow.name} on {host}")
    if proc.poll() is not None:
        raise RuntimeError(f"{run.tool.name} receiver for {run.flow.name} exited: {proc.read_stderr().strip()[:300]}")


def _stop_server(lab, run: FlowRun, server: Process, server_spec: ServerSpec | None) -> None:
    server.stop()
    for argv in (server_spec.cleanup if server_spec else []):
        lab.executor(f"D{run.flow.pair}").run(argv, check=False)


def _events(runs: list[FlowRun]) -> list[tuple[float, int, str, FlowRun, Launch]]:
    """Time-ordered actions: per-burst receivers SERVER_LEAD_S ahead of their sender."""
    events = []
    for run in runs:
        for launch in run.launches:
            if not run.tool.shared_servers:
                events.append((launch.launch_at - SERVER_LEAD_S, 0, "server", run, launch))
            events.append((launch.launch_at, 1, "client", run, launch))
    return sorted(events, key=lambda e: (e[0], e[1]))


def _drive(lab, runs: list[FlowRun], t0: float, on_tick, probe, sampler, probe_s: float, watch: HostWatch) -> None:
    pending = _events(runs)
    deadline = t0 + max([_planned_end(r.flow) for r in runs] + [probe_s]) + GRACE_S
    late = 0.0
    next_tick = time.monotonic()
    while True:
        watch.check()
        now = time.monotonic()
        while pending and pending[0][0] <= now - t0:
            _, _, kind, run, launch = pending.pop(0)
            if kind == "server":
                launch.server_spec = run.tool.server(launch.spec)
                launch.server = _launch_server(lab, run, launch.server_spec, launch.server_raw)
                continue
            if launch.server is not None:
                _wait_ready(lab, run, launch.server, launch.server_spec)
            if run.chooser is not None:
                _choose(run, launch, probe, round(time.monotonic() - t0, 3))
            launch.proc = lab.executor(_sender(run)).start(
                _with_cca(run, run.tool.client(launch.spec), launch.spec.cca), label=f"{run.tool.name}-{run.flow.name}-b{launch.burst.index}",
                stdout=launch.raw, stderr=launch.raw.with_suffix(".err"))
            launch.launched_s = round(time.monotonic() - t0, 3)
            # a burst that started late (its server slow to get ready: an NFS export on a TCG VM
            # took 26 s) moves its end, and the deadline, by as much
            late = max(late, launch.launched_s - launch.launch_at)
        running = [l for r in runs for l in r.launches if l.proc and l.exited_s is None]
        for launch in running:
            if launch.proc.poll() is not None:
                launch.exited_s = round(time.monotonic() - t0, 3)
        if not pending and all(l.exited_s is not None for r in runs for l in r.launches) and now - t0 >= probe_s:
            return
        if now > deadline + late:
            raise TimeoutError(f"flows still running {GRACE_S:.0f}s after their planned end"
                               + (f" (started {late:.0f}s late)" if late >= 1 else ""))
        if on_tick and now >= next_tick:
            on_tick(now - t0, sampler.current(), probe.latest())
            next_tick = now + 0.5
        until_next = t0 + pending[0][0] - time.monotonic() if pending else 0.05
        time.sleep(max(0.0, min(until_next, 0.05)))


def _choose(run: FlowRun, launch: Launch, probe, t_s: float) -> None:
    cca, note = run.chooser(launch.burst, probe.so_far())
    launch.spec = replace(launch.spec, cca=cca)
    run.decisions.append([run.flow.name, launch.burst.index, t_s, cca, json.dumps(note, sort_keys=True)])


def _planned_end(flow: Flow) -> float:
    start, stop = span(flow)
    return stop if stop is not None else start + BYTES_FLOW_LIMIT_S


def _read_result(run: FlowRun, launch: Launch) -> str | None:
    """Parse a burst's outputs into launch.result; the error text if there is none."""
    text = launch.raw.read_text(errors="replace") if launch.raw.exists() else ""
    server_text = launch.server_raw.read_text(errors="replace") if launch.server_raw.exists() else ""
    try:
        launch.result = run.tool.parse(text, server_text, launch.spec)
    except ValueError as exc:
        err_path = launch.raw.with_suffix(".err")
        stderr = err_path.read_text(errors="replace").strip()[:300] if err_path.exists() else ""
        return f"burst {launch.burst.index}: no {run.tool.name} result ({exc}); stderr: {stderr}"
    return f"burst {launch.burst.index}: {launch.result.error}" if launch.result.error else None


def _throughput_rows(name: str, launch: Launch) -> list[list]:
    rows = []
    for iv in launch.result.intervals:
        t_s = round(launch.burst.start_s + iv.end_s, 3)
        rows.append([t_s, name, "all", round(mbps(iv.bytes, iv.seconds) or 0.0, 3)])
        rows += [[t_s, name, k, round(mbps(nbytes, iv.seconds) or 0.0, 3)] for k, nbytes in enumerate(iv.streams)]
    return rows


def _summarise(spec, runs, trial_no, trial_dir, probe, sampler, meter, idle_rtt_ms, started, duration,
               trial_errors: list[str]) -> TrialSummary:
    throughput_rows, event_rows = [], []
    for run in runs:
        for launch in run.launches:
            event_rows.append([run.flow.name, launch.burst.index, launch.burst.start_s, launch.launched_s,
                               launch.burst.stop_s, launch.exited_s])
            error = _read_result(run, launch)
            if error:
                run.errors.append(error)
            if launch.result is not None and not run.tool.counts_arrivals:
                launch.result.receiver_intervals = ARRIVALS[run.flow.protocol](launch, sampler, meter)
                launch.result.sender_intervals = []
            if launch.result is not None and run.flow.protocol == "tcp" and launch.result.retransmits is None:
                launch.result.retransmits = acked_rate.retransmits(sampler.samples, launch.spec.port,
                                                                   launch.burst.start_s)
            if launch.result is not None:
                throughput_rows += _throughput_rows(run.flow.name, launch)
    topology = spec.cell.topology
    above = seconds_above(throughput_rows, payload_ceiling_mbps(topology.bottleneck_rate_mbps, topology.mtu,
                                                                {r.flow.protocol for r in runs}))
    if above:       # a measurement or lab fault, never a result (docs/results-format.md)
        log.warning("trial %d of %s: %d seconds above the bottleneck's payload ceiling, worst %.1f Mb/s at %d s",
                    trial_no, spec.id, len(above), max(v for _, v in above), max(above, key=lambda a: a[1])[0])
    flows = [FlowResult(**_flow_summary(run), observed_cca=_observed_cca(sampler.samples, run.flow.name)) for run in runs]
    ctrl = control_sockets(sampler.samples)
    data_samples = [s for s in sampler.samples if (s.sock.src, s.sock.sport) not in ctrl]
    tcp_rows = [s.row() for s in data_samples]
    # below the configured propagation delay: as impossible as a second above the ceiling
    low_rounds = sum(below_floor(s.rtt_ms, topology.rtt_ms) for s in probe.samples)
    low_sockets = sum(below_floor(s.sock.srtt_ms or None, topology.rtt_ms) for s in data_samples)
    if low_rounds or low_sockets:
        log.warning("trial %d of %s: %d probe rounds and %d tcp_info samples below the configured %g ms RTT",
                    trial_no, spec.id, low_rounds, low_sockets, topology.rtt_ms)
    rtt_rows = [[s.t_s, s.rtt_ms, s.sent, s.received, s.mode] for s in probe.samples]
    write_csv(trial_dir / THROUGHPUT_CSV, THROUGHPUT_COLUMNS, sorted(throughput_rows, key=lambda r: r[0]))
    write_csv(trial_dir / RTT_CSV, RTT_COLUMNS, rtt_rows)
    write_csv(trial_dir / TCPINFO_CSV, TCPINFO_COLUMNS, tcp_rows)
    write_csv(trial_dir / EVENTS_CSV, EVENTS_COLUMNS, event_rows)
    decisions = [row for r in runs for row in r.decisions]
    if decisions:
        write_csv(trial_dir / DECISIONS_CSV, DECISIONS_COLUMNS, decisions)
    errors = trial_errors + [f"{r.flow.name}: {e}" for r in runs for e in r.errors]
    # keyword arguments all the way: a misspelt key fails here, where the record is made
    return TrialSummary(
        trial=trial_no, status="failed" if errors else "ok", error="; ".join(errors) or None,
        started=started, duration_s=round(duration, 3), flows=flows,
        jain=jain(f.mean_mbps for f in flows) if not errors else None,
        rtt=RttStats(**rtt_stats((s.rtt_ms for s in probe.samples), idle_rtt_ms)),
        collector=CollectorCounts(socket_samples=len(sampler.samples), sampler_ticks=sampler.ticks,
                                  rtt_rounds=len(probe.samples), arrival_samples=sum(map(len, meter.series.values())),
                                  seconds_above_ceiling=len(above), rtt_rounds_below_floor=low_rounds,
                                  tcpinfo_samples_below_floor=low_sockets))


def _observed_cca(samples, flow: str) -> list[str] | None:
    """The algorithms the flow's data sockets really ran (control sockets carry < 64 KB)."""
    seen = {s.sock.cca for s in samples if s.flow == flow and s.sock.cca and (s.sock.bytes_acked or 0) >= 65536}
    return sorted(seen) or None


def _flow_summary(run: FlowRun) -> dict:
    flow = run.flow
    results = [launch.result for launch in run.completed]
    received = sum(r.bytes_received for r in results)
    on_s = sum(r.seconds for r in results)
    first = min((l.burst.start_s for l in run.launches), default=0.0)
    last = max((l.burst.start_s + l.result.seconds for l in run.completed), default=first)
    retrans = [r.retransmits for r in results if r.retransmits is not None]
    lost = [r.lost_percent for r in results if r.lost_percent is not None]
    return {
        "name": flow.name, "role": flow.role, "tool": flow.tool, "protocol": flow.protocol,
        "cca": run.cca if flow.protocol == "tcp" else None, "pair": flow.pair, "streams": flow.streams,
        "pattern": flow.pattern, "bursts": len(run.launches), "completed_bursts": len(results),
        "bytes": received, "on_s": round(on_s, 3),
        "mean_mbps": mbps(received, on_s), "span_mean_mbps": mbps(received, last - first),
        "retransmits": sum(retrans) if retrans else None,
        "lost_percent": sum(lost) / len(lost) if lost else None,
    }
