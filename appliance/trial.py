"""One trial of one cell: servers up, collectors on, flows launched on schedule, results parsed.

A flow's bursts are launched early by iperf3's set-up time ((2 + streams) round trips: control
connection, parameter exchange, one connect per stream) so that data starts at the declared time;
events.csv records when each burst was planned, launched and when its process ended.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..collectors.host_cpu import StealMeter
from ..collectors.metrics import jain, mbps, rtt_stats
from ..collectors.rtt_probe import RttProbe
from ..collectors.socket_sampler import COLUMNS as TCPINFO_COLUMNS
from ..collectors.socket_sampler import SocketSampler, control_sockets
from ..drivers import iperf3
from ..hardware.executor import Process, wait_until
from ..hardware.tuning import buffer_limit
from .patterns import Burst, bursts, span
from .profiles import CellSpec
from .schema import Flow
from .tables import write_csv

log = logging.getLogger(__name__)
BASE_PORT = 5201
# iperf3's server runs one test at a time and a burst's teardown (a few round trips) overlaps the
# next burst's early launch, so each flow rotates over this many servers (ports).
SERVERS_PER_FLOW = 3
GRACE_S = 30.0
BYTES_FLOW_LIMIT_S = 6 * 3600


@dataclass
class Launch:
    burst: Burst
    launch_at: float
    raw: Path
    proc: Process | None = None
    launched_s: float | None = None
    exited_s: float | None = None
    result: iperf3.Result | None = None


@dataclass
class FlowRun:
    flow: Flow
    cca: str
    base_port: int
    launches: list[Launch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def completed(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.result is not None]

    @property
    def ports(self) -> list[int]:
        return [self.base_port + k for k in range(SERVERS_PER_FLOW)]

    def port_for(self, burst: Burst) -> int:
        return self.ports[burst.index % SERVERS_PER_FLOW]


def setup_lead_s(flow: Flow, rtt_ms: float) -> float:
    return (2 + flow.streams) * rtt_ms / 1000.0


def run_trial(lab, spec: CellSpec, trial_no: int, trial_dir: Path, idle_rtt_ms: float | None,
              on_tick=None) -> dict:
    cell = spec.cell
    raw = trial_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rtt_for_lead = idle_rtt_ms if idle_rtt_ms is not None else cell.topology.rtt_ms
    runs = [FlowRun(f, cell.flow_cca(f), BASE_PORT + SERVERS_PER_FLOW * i) for i, f in enumerate(cell.flows)]
    servers = [_start_server(lab, run, port, raw) for run in runs for port in run.ports]
    for run in runs:
        lead = setup_lead_s(run.flow, rtt_for_lead)
        run.launches = [Launch(b, b.start_s - lead, raw / f"{run.flow.name}-b{b.index}.json") for b in bursts(run.flow)]
    offset = max(0.0, -min(l.launch_at for r in runs for l in r.launches))
    probe = RttProbe(lab.executor(f"S{cell.probe.pair}"), f"D{cell.probe.pair}", cell.probe.mode,
                     cell.probe.interval_ms, raw / "fping.txt")
    senders = {f"S{r.flow.pair}": lab.executor(f"S{r.flow.pair}") for r in runs if r.flow.protocol == "tcp"}
    sampler = SocketSampler(senders, {port: r.flow.name for r in runs for port in r.ports}, raw)
    started_wall = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic() + offset
    with StealMeter() as steal:
        probe.start(t0)
        sampler.start(t0)
        try:
            _drive(lab, runs, t0, cell, on_tick, probe, sampler)
        except TimeoutError as exc:  # this trial failed; the run goes on with the next one
            runs[0].errors.append(str(exc))
        finally:
            sampler.stop()
            probe.stop()
            for run in runs:
                for launch in run.launches:
                    if launch.proc:
                        launch.proc.stop()
            for server in servers:
                server.stop()
    duration = time.monotonic() - t0
    summary = _summarise(spec, runs, trial_no, trial_dir, probe, sampler, idle_rtt_ms, started_wall, duration)
    summary["host_cpu_steal_pct"] = steal.percent
    return summary


def _start_server(lab, run: FlowRun, port: int, raw: Path) -> Process:
    host = f"D{run.flow.pair}"
    executor = lab.executor(host)
    name = f"{run.flow.name}-server-{port}"
    proc = executor.start(iperf3.server_argv(port), label=f"iperf3-{name}",
                          stdout=raw / f"{name}.json", stderr=raw / f"{name}.err")
    probe = ["ss", "-ltnH", "sport", "=", f":{port}"]
    wait_until(lambda: proc.poll() is not None or bool(executor.run(probe, check=False).stdout.strip()),
               timeout=10, what=f"iperf3 server for {run.flow.name} on {host}:{port}")
    if proc.poll() is not None:
        raise RuntimeError(f"iperf3 server for {run.flow.name} exited: {proc.read_stderr().strip()}")
    return proc


def _client_argv(run: FlowRun, burst: Burst, cell) -> list[str]:
    flow = run.flow
    buffer = cell.flow_buffer(flow)
    window = buffer_limit(buffer) if isinstance(buffer, int) else None
    return iperf3.client_argv(f"D{flow.pair}", run.port_for(burst), protocol=flow.protocol, duration_s=burst.duration_s,
                              bytes_=burst.bytes, streams=flow.streams, cca=run.cca, window_bytes=window,
                              udp_rate_mbps=flow.udp_rate_mbps)


def _drive(lab, runs: list[FlowRun], t0: float, cell, on_tick, probe, sampler) -> None:
    pending = sorted(((l.launch_at, i, l) for i, r in enumerate(runs) for l in r.launches), key=lambda x: x[0])
    deadline = t0 + max(_planned_end(r.flow) for r in runs) + GRACE_S
    next_tick = time.monotonic()
    while True:
        now = time.monotonic()
        while pending and pending[0][0] <= now - t0:
            _, index, launch = pending.pop(0)
            run = runs[index]
            launch.proc = lab.executor(f"S{run.flow.pair}").start(
                _client_argv(run, launch.burst, cell), label=f"iperf3-{run.flow.name}-b{launch.burst.index}",
                stdout=launch.raw, stderr=launch.raw.with_suffix(".err"))
            launch.launched_s = round(time.monotonic() - t0, 3)
        running = [l for r in runs for l in r.launches if l.proc and l.exited_s is None]
        for launch in running:
            if launch.proc.poll() is not None:
                launch.exited_s = round(time.monotonic() - t0, 3)
        if not pending and all(l.exited_s is not None for r in runs for l in r.launches):
            return
        if now > deadline:
            raise TimeoutError(f"flows still running {GRACE_S:.0f}s after their planned end")
        if on_tick and now >= next_tick:
            on_tick(now - t0, sampler.current(), probe.latest())
            next_tick = now + 0.5
        until_next = t0 + pending[0][0] - time.monotonic() if pending else 0.05
        time.sleep(max(0.0, min(until_next, 0.05)))


def _planned_end(flow: Flow) -> float:
    start, stop = span(flow)
    return stop if stop is not None else start + BYTES_FLOW_LIMIT_S


def _read_result(launch: Launch) -> str | None:
    """Parse a burst's iperf3 output into launch.result; the error text if there is none."""
    text = launch.raw.read_text(errors="replace") if launch.raw.exists() else ""
    try:
        launch.result = iperf3.parse(text)
    except ValueError as exc:
        err_path = launch.raw.with_suffix(".err")
        stderr = err_path.read_text(errors="replace").strip()[:300] if err_path.exists() else ""
        return f"burst {launch.burst.index}: no iperf3 result ({exc}); stderr: {stderr}"
    return f"burst {launch.burst.index}: {launch.result.error}" if launch.result.error else None


def _throughput_rows(name: str, launch: Launch) -> list[list]:
    rows = []
    for iv in launch.result.intervals:
        t_s = round(launch.burst.start_s + iv.end_s, 3)
        rows.append([t_s, name, "all", round(mbps(iv.bytes, iv.seconds) or 0.0, 3)])
        rows += [[t_s, name, k, round(mbps(nbytes, iv.seconds) or 0.0, 3)] for k, nbytes in enumerate(iv.streams)]
    return rows


def _summarise(spec, runs, trial_no, trial_dir, probe, sampler, idle_rtt_ms, started, duration) -> dict:
    throughput_rows, event_rows = [], []
    for run in runs:
        for launch in run.launches:
            event_rows.append([run.flow.name, launch.burst.index, launch.burst.start_s, launch.launched_s,
                               launch.burst.stop_s, launch.exited_s])
            error = _read_result(launch)
            if error:
                run.errors.append(error)
            if launch.result is not None:
                throughput_rows += _throughput_rows(run.flow.name, launch)
    flows = [_flow_summary(run) for run in runs]
    ctrl = control_sockets(sampler.samples)
    tcp_rows = [s.row() for s in sampler.samples if (s.sock.src, s.sock.sport) not in ctrl]
    rtt_rows = [[s.t_s, s.rtt_ms, s.sent, s.received, s.mode] for s in probe.samples]
    write_csv(trial_dir / "throughput.csv", ["t_s", "flow", "stream", "mbps"], sorted(throughput_rows, key=lambda r: r[0]))
    write_csv(trial_dir / "rtt.csv", ["t_s", "rtt_ms", "sent", "received", "mode"], rtt_rows)
    write_csv(trial_dir / "tcpinfo.csv", TCPINFO_COLUMNS, tcp_rows)
    write_csv(trial_dir / "events.csv", ["flow", "burst", "planned_start_s", "launched_s", "planned_stop_s", "exited_s"],
              event_rows)
    errors = [f"{r.flow.name}: {e}" for r in runs for e in r.errors]
    return {
        "trial": trial_no, "status": "failed" if errors else "ok", "error": "; ".join(errors) or None,
        "started": started, "duration_s": round(duration, 3),
        "flows": flows,
        "jain": jain(f["mean_mbps"] for f in flows) if not errors else None,
        "rtt": rtt_stats((s.rtt_ms for s in probe.samples), idle_rtt_ms),
        "collector": {"socket_samples": len(sampler.samples), "sampler_ticks": sampler.ticks,
                      "rtt_rounds": len(probe.samples)},
    }


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
