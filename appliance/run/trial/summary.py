"""A trial's record: each burst's output parsed by its tool, its per-second figures replaced by
what arrived (`ARRIVALS`: a TCP flow's sockets' delivered bytes from the socket sampler, a UDP
flow's from the receivers' arrival meter, unless the tool's receiver is a kernel counter itself),
the flows and the trial summarised, and the trial's CSVs (throughput, RTT, tcp_info, events,
decisions) written in the store's format."""

from __future__ import annotations

import logging

from longhaul.appliance.run.trial.plan import FlowRun, Launch
from longhaul.appliance.run.trial.state import Trial
from longhaul.collectors.live import acked_rate, arrivals
from longhaul.collectors.live.socket_sampler import control_sockets
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
from longhaul.drivers.result import Result
from longhaul.hardware.path_rtt import below_floor

log = logging.getLogger(__name__)


def _tcp_arrivals(launch: Launch, trial: Trial) -> list:
    topology = trial.spec.cell.topology
    # late ACKs are re-timed against what the bottleneck can pass (acked_rate.retimed)
    ceiling = payload_ceiling_mbps(topology.bottleneck_rate_mbps, topology.mtu, ("tcp",))
    return acked_rate.per_second(trial.sampler.samples, launch.spec.port, launch.burst.start_s, ceiling,
                                 _burst_sockets(launch, trial))


def _burst_sockets(launch: Launch, trial: Trial) -> set[tuple[str, int]]:
    """The sockets this burst opened: born once its launch was due (it is started then, never
    before), and before the next burst to its port (the flow's next, on the same server) was."""
    port, since = launch.spec.port, launch.launch_at
    later = [other.launch_at for run in trial.runs for other in run.launches
             if other.spec.port == port and other.launch_at > since]
    return acked_rate.burst_sockets(trial.sampler.samples, port, since, min(later, default=None))


def _udp_arrivals(launch: Launch, trial: Trial) -> list:
    # what a port counts once its burst is over (planned and its client ended, plus the path's
    # delay) is not this burst's
    ends = [t for t in (launch.exited_s, launch.burst.stop_s) if t is not None]
    until = max(ends) + ARRIVAL_TAIL_S if ends else None
    return arrivals.counted(trial.meter.series.get(launch.spec.port, []), launch.burst.start_s, until)


# A burst's per-second figures, by protocol, from what arrived (collectors/live/arrivals.py): the
# tool's own per-second view stays in its raw output
ARRIVALS = {"tcp": _tcp_arrivals, "udp": _udp_arrivals}
ARRIVAL_TAIL_S = 1.0


def _read_result(run: FlowRun, launch: Launch) -> str | None:
    """Parse a burst's outputs into launch.result; the error text if there is none."""
    text = launch.raw.read_text(errors="replace") if launch.raw.exists() else ""
    server_text = launch.server_raw.read_text(errors="replace") if launch.server_raw.exists() else ""
    try:
        launch.result = result = run.tool.parse(text, server_text, launch.spec)
    except ValueError as exc:
        err_path = launch.raw.with_suffix(".err")
        stderr = err_path.read_text(errors="replace").strip()[:300] if err_path.exists() else ""
        return f"burst {launch.burst.index}: no {run.tool.name} result ({exc}); stderr: {stderr}"
    return f"burst {launch.burst.index}: {result.error}" if result.error else None


def _throughput_rows(name: str, launch: Launch, result: Result) -> list[list]:
    rows = []
    for iv in result.intervals:
        t_s = round(launch.burst.start_s + iv.end_s, 3)
        rows.append([t_s, name, "all", round(mbps(iv.bytes, iv.seconds) or 0.0, 3)])
        rows += [[t_s, name, k, round(mbps(nbytes, iv.seconds) or 0.0, 3)] for k, nbytes in enumerate(iv.streams)]
    return rows


def summarise(trial: Trial) -> TrialSummary:
    """The trial's record, from its bursts' outputs and its collectors; its CSVs written beside it."""
    spec, runs, trial_no, trial_dir = trial.spec, trial.runs, trial.number, trial.dir
    probe, sampler, meter = trial.probe, trial.sampler, trial.meter
    throughput_rows, event_rows = [], []
    for run in runs:
        for launch in run.launches:
            event_rows.append([run.flow.name, launch.burst.index, launch.burst.start_s, launch.launched_s,
                               launch.burst.stop_s, launch.exited_s])
            error = _read_result(run, launch)
            if error:
                run.errors.append(error)
            result = launch.result
            if result is None:
                continue
            if not run.tool.counts_arrivals:
                result.receiver_intervals = ARRIVALS[run.flow.protocol](launch, trial)
                result.sender_intervals = []
            if run.flow.protocol == "tcp" and result.retransmits is None:
                result.retransmits = acked_rate.retransmits(sampler.samples, launch.spec.port, launch.burst.start_s,
                                                            _burst_sockets(launch, trial))
            throughput_rows += _throughput_rows(run.flow.name, launch, result)
    topology = spec.cell.topology
    above = seconds_above(throughput_rows, payload_ceiling_mbps(topology.bottleneck_rate_mbps, topology.mtu,
                                                                {r.flow.protocol for r in runs}))
    if above:       # a measurement or lab fault, never a result (docs/results-format.md)
        log.warning("trial %d of %s: %d seconds above the bottleneck's payload ceiling, worst %.1f Mb/s at %d s",
                    trial_no, spec.id, len(above), max(v for _, v in above), max(above, key=lambda a: a[1])[0])
    flows = [_flow_result(run, _observed_cca(sampler.samples, run.flow.name)) for run in runs]
    for f in flows:
        if f.skipped_bytes:     # its host could not keep the pace: a lower mean, for a named reason
            log.warning("trial %d of %s: flow %s's sender gave up %d bytes of its schedule after stalls",
                        trial_no, spec.id, f.name, f.skipped_bytes)
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
    errors = trial.errors + [f"{r.flow.name}: {e}" for r in runs for e in r.errors]
    pressure = trial.tcp_pressure
    if pressure and pressure.entered:   # the hosts' kernels, not the path, may have set the pace
        log.warning("trial %d of %s: the end hosts' kernels entered TCP memory pressure %d times "
                    "(net.ipv4.tcp_mem; %d ms of ended spells)", trial_no, spec.id, pressure.entered, pressure.ms)
    # keyword arguments all the way: a misspelt key fails here, where the record is made
    return TrialSummary(
        trial=trial_no, status="failed" if errors else "ok", error="; ".join(errors) or None,
        started=trial.started, duration_s=round(trial.duration_s, 3), flows=flows,
        jain=jain(f.mean_mbps for f in flows) if not errors else None,
        rtt=RttStats(**rtt_stats((s.rtt_ms for s in probe.samples), trial.idle_rtt_ms)),
        host_cpu_steal_pct=trial.steal_pct, lost_hosts=sorted(trial.lost),
        tcp_memory_pressures=pressure.entered if pressure else None,
        tcp_memory_pressure_ms=pressure.ms if pressure else None,
        collector=CollectorCounts(socket_samples=len(sampler.samples), sampler_ticks=sampler.ticks,
                                  rtt_rounds=len(probe.samples), arrival_samples=sum(map(len, meter.series.values())),
                                  seconds_above_ceiling=len(above), rtt_rounds_below_floor=low_rounds,
                                  tcpinfo_samples_below_floor=low_sockets))


def _observed_cca(samples, flow: str) -> list[str] | None:
    """The algorithms the flow's data sockets really ran (control sockets carry < 64 KB)."""
    seen = {s.sock.cca for s in samples if s.flow == flow and s.sock.cca and (s.sock.bytes_acked or 0) >= 65536}
    return sorted(seen) or None


def _flow_result(run: FlowRun, observed_cca: list[str] | None) -> FlowResult:
    flow = run.flow
    completed = run.completed
    results = [result for _, result in completed]
    received = sum(r.bytes_received for r in results)
    on_s = sum(r.seconds for r in results)
    first = min((l.burst.start_s for l in run.launches), default=0.0)
    last = max((l.burst.start_s + r.seconds for l, r in completed), default=first)
    retrans = [r.retransmits for r in results if r.retransmits is not None]
    lost = [r.lost_percent for r in results if r.lost_percent is not None]
    skipped = [r.skipped_bytes for r in results if r.skipped_bytes is not None]
    return FlowResult(
        name=flow.name, role=flow.role, tool=flow.tool, protocol=flow.protocol,
        cca=run.cca if flow.protocol == "tcp" else None, pair=flow.pair, streams=flow.streams,
        pattern=flow.pattern, bursts=len(run.launches), completed_bursts=len(results),
        bytes=received, on_s=round(on_s, 3),
        mean_mbps=mbps(received, on_s), span_mean_mbps=mbps(received, last - first),
        retransmits=sum(retrans) if retrans else None,
        lost_percent=sum(lost) / len(lost) if lost else None, observed_cca=observed_cca,
        skipped_bytes=sum(skipped) if skipped else None)
