"""A trial's plan, before anything starts: each flow's run (its tool, ports and bursts), each
burst's launch time and BurstSpec, and the time-ordered events that start them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from longhaul.appliance.config.schema import Flow
from longhaul.collectors.live.rtt_probe import RttSample
from longhaul.drivers.patterns import PATTERNS, Burst, bursts, span
from longhaul.drivers.registry import tool_for
from longhaul.drivers.result import Result
from longhaul.drivers.tool import BurstSpec, ServerSpec, Tool
from longhaul.hardware.executors.process import Process
from longhaul.hardware.topology import GENERATOR
from longhaul.hardware.tuning import buffer_limit

BASE_PORT = 5201
# Each flow owns PORTS_PER_FLOW consecutive ports. iperf3's server runs one test at a time and a
# burst's teardown (a few round trips) overlaps the next burst's early launch, so a flow rotates
# over SHARED_SERVERS of them; per-burst receivers cycle through all of them.
PORTS_PER_FLOW = 10
SHARED_SERVERS = 3
SERVER_LEAD_S = 2.0
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
    def completed(self) -> list[tuple[Launch, Result]]:
        """The bursts that gave a result, each with it."""
        return [(launch, result) for launch in self.launches if (result := launch.result) is not None]

    @property
    def ports(self) -> list[int]:
        count = SHARED_SERVERS if self.tool.shared_servers else PORTS_PER_FLOW
        return [self.base_port + k for k in range(count)]

    def port_for(self, burst: Burst) -> int:
        return self.ports[burst.index % len(self.ports)]

    @property
    def sender(self) -> str:
        """The lab host its clients run on: its pair's sender, or the lab's traffic generator."""
        return GENERATOR if self.tool.sends_from == "generator" else f"S{self.flow.pair}"

    @property
    def receiver(self) -> str:
        return f"D{self.flow.pair}"


def setup_lead_s(tool: Tool, flow: Flow, rtt_ms: float) -> float:
    return (tool.setup_round_trips + flow.streams) * rtt_ms / 1000.0


def burst_spec(run: FlowRun, burst: Burst, cell, workdir: Path, facts: dict, receiver: str | None = None) -> BurstSpec:
    """facts: the lab's addressing of the flow's pair (NetnsLab.pair_facts), for layer-2 tools;
    receiver: the receiver's test-interface address (lab.address), which resolves on real hosts
    too, where the lab's names (D1) do not."""
    flow = run.flow
    buffer = cell.flow_buffer(flow)
    shape = PATTERNS[flow.pattern].shape_of(flow)
    return BurstSpec(receiver=receiver or run.receiver, port=run.port_for(burst), duration_s=burst.duration_s,
                     bytes=burst.bytes, protocol=flow.protocol, streams=flow.streams,
                     cca=run.cca if flow.protocol == "tcp" else None,
                     window_bytes=buffer_limit(buffer) if isinstance(buffer, int) else None,
                     rate_mbps=flow.udp_rate_mbps, shape=shape, storage=flow.storage,
                     workdir=PurePosixPath(workdir),
                     options={**facts, "udp_port": run.port_for(burst),
                              "clients": flow.clients, "file_bytes": flow.file_bytes, **flow.options})


def plan_runs(lab, cell, raw: Path, rtt_ms: float, choosers: dict[str, Chooser]) -> list[FlowRun]:
    """Every flow's run with its bursts, each launched early by its tool's set-up time at rtt_ms."""
    runs = [FlowRun(f, cell.flow_cca(f), BASE_PORT + PORTS_PER_FLOW * i, tool_for(f.tool), chooser=choosers.get(f.name))
            for i, f in enumerate(cell.flows)]
    for run in runs:
        facts = _facts(lab, run)
        lead = setup_lead_s(run.tool, run.flow, rtt_ms)
        for b in bursts(run.flow):
            work = raw / "work" / f"{run.flow.name}-b{b.index}"
            if not run.tool.shared_servers:     # file-moving tools keep their files here
                work.mkdir(parents=True, exist_ok=True)
            run.launches.append(Launch(b, b.start_s - lead, raw / f"{run.flow.name}-b{b.index}.out",
                                       burst_spec(run, b, cell, work, facts, lab.address(run.receiver))))
    return runs


def _facts(lab, run: FlowRun) -> dict:
    if run.tool.sends_from == "generator":
        return lab.generator_facts(run.flow.pair)
    return lab.pair_facts(run.flow.pair) if run.tool.needs_link_facts else {}


def clock_offset(runs: list[FlowRun]) -> float:
    """How far the trial's clock starts after now: the earliest launch (or per-burst receiver,
    SERVER_LEAD_S ahead of it) at 0 or later."""
    first = min((l.launch_at - (0 if r.tool.shared_servers else SERVER_LEAD_S) for r in runs for l in r.launches),
                default=0.0)
    return max(0.0, -first)


def events(runs: list[FlowRun]) -> list[tuple[float, int, str, FlowRun, Launch]]:
    """Time-ordered actions: per-burst receivers SERVER_LEAD_S ahead of their sender."""
    out = []
    for run in runs:
        for launch in run.launches:
            if not run.tool.shared_servers:
                out.append((launch.launch_at - SERVER_LEAD_S, 0, "server", run, launch))
            out.append((launch.launch_at, 1, "client", run, launch))
    return sorted(out, key=lambda e: (e[0], e[1]))


def planned_end(flow: Flow) -> float:
    start, stop = span(flow)
    return stop if stop is not None else start + BYTES_FLOW_LIMIT_S
