"""One leg of a replay: every transfer of the trace a real flow S1 -> D1 (GridFTP or iperf3,
tools.py), launched at its arrival, with or without section 7's BE cap, measured from the lab.

Who does what. The controller (here) installs the class shaper on S1 (shaper.py), starts a pool of
servers on D1 (one transfer each at a time, OD and BE in separate port ranges, which the shaper
classifies by) and a meter of R1's bottleneck counters (collectors/live/shaper_meter.py), then
hands the leg to the agent on S1 (drivers/agents/replay_leg.py): it launches each transfer at its
arrival on a free port of its class, reads the class counters and moves BE's cap once an interval,
and prints what happened as JSON events, timed on S1's own clock. Commands to a slow host (a VM
under TCG answers each in 1-3 s) then delay nothing; the controller only reads the events.

A transfer's socket is paced at its requested rate (the trace's rate, the paper's requestRate), a
hard cap as the paper's testbed capped each transfer (iperf3's -b would let a transfer that fell
behind catch up above it).

Times. arrival = the scheduled start from the leg's t0; finish = when the agent saw the client exit
(polled every 10 ms): after its last byte left the socket buffer (S1's tcp_notsent_lowat keeps
what is still unsent small, replay.py) and the tool's closing exchange, a few round trips.
runtime = finish - arrival, slowdown = max(runtime, bound) / max(reference, bound), bound = the
interval (1 s), as the simulation's. R1's counters are timed by R1's clock and placed against the
agent's t0 by its wall-clock time: the hosts' clocks must agree to well under an interval (the
qemu fleet sets its VMs' clocks from the host's).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from longhaul.appliance.plan.shaper import install, port_ranges
from longhaul.appliance.plan.tools import ClientSide
from longhaul.collectors.live.shaper_meter import ShaperMeter
from longhaul.collectors.studies.planning.replay_record import LegResult
from longhaul.collectors.studies.planning.sim import SimResult, simulate
from longhaul.collectors.studies.planning.trace import Trace
from longhaul.drivers.agents.replay_leg import MODULE, SCHEDULE
from longhaul.drivers.tool import LISTENING_TCP, listening_ports
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import wait_until, write_file

log = logging.getLogger(__name__)
COOLDOWN_S = 0.5          # a port is handed out again this long after its client exited (the server re-listens)
LEAD_S = 1.0              # t0 this far after the agent read its schedule: the first tick reads the counters at rest
READY_TIMEOUT_S = 15.0
MAX_ATTEMPTS = 3
GRACE_S = 30.0
STOP_MARGIN_S = 60.0      # the agent ends itself at its deadline; the controller stops it this much later
PROGRESS_S = 10.0
MIN_POOL, MAX_POOL = 4, 256


@dataclass(frozen=True)
class Leg:
    name: str
    od: np.ndarray            # bool per transfer, trace order
    od_share: float
    load_ratio: float = 1.0
    capped: bool = True       # section 7's BE cap; False: the all-BE baseline's plain lab


@dataclass(frozen=True)
class LegLab:
    """What a leg needs of the lab and the replay's settings."""

    sender: object            # executors
    receiver: object
    receiver_address: str
    ifname: str               # the sender's test interface
    router: object            # R1's executor, its bottleneck port and OS: what crossed the bottleneck
    router_ifname: str
    router_os: object
    access_bps: float
    bottleneck_bps: float     # frame bits/s: the caps' unit
    capacity_bps: float       # goodput: the simulation's netCap
    goodput_factor: float
    pacing_overhead: float
    mtu: int
    cca: str
    headroom: float
    interval_s: float
    bin_s: float
    tool: object              # tools.py's contract
    receiver_workdir: str     # scratch on D1 for the servers (GridFTP's transfer logs)


def pool_sizes(sim: SimResult) -> tuple[int, int]:
    """Servers per class: the simulation's peak concurrency of the class, x1.5 + 2 (the lab's
    runtimes differ, a port cools down between clients), within MIN_POOL..MAX_POOL."""
    def peak(mask: np.ndarray) -> int:
        if not mask.any():
            return 0
        events = sorted([(t, 1) for t in sim.arrival_s[mask]] + [(t, -1) for t in sim.finish_s[mask]],
                        key=lambda e: (e[0], e[1]))
        level = best = 0
        for _, step in events:
            level += step
            best = max(best, level)
        return best

    def size(n: int) -> int:
        return int(min(MAX_POOL, max(MIN_POOL, math.ceil(n * 1.5) + 2)))

    return size(peak(sim.od)), size(peak(~sim.od))


def run_leg(lab: LegLab, leg: Leg, trace: Trace, raw: Path, say: Callable[[str], None] = log.info) -> LegResult:
    start, seconds, nbytes = trace.arrays()
    od = np.asarray(leg.od, dtype=bool)
    size = np.maximum(1, np.round(nbytes * leg.load_ratio)).astype(np.int64)
    reference = seconds * leg.load_ratio
    rate_bps = nbytes * 8 / seconds                      # the requested rate; the load ratio keeps it
    sim = simulate(trace, od, lab.capacity_bps, leg.od_share if leg.capped else 0.0, leg.load_ratio, lab.interval_s)
    od_range, be_range = port_ranges(*pool_sizes(sim))
    deadline = float(np.nanmax(sim.finish_s, initial=0.0)) * 1.5 + GRACE_S
    schedule = leg_schedule(lab, leg, start, size, rate_bps, od, [lab.tool.pool_port(p) for p in od_range.ports],
                            [lab.tool.pool_port(p) for p in be_range.ports], deadline)
    raw.mkdir(parents=True, exist_ok=True)
    events_path = raw / "agent.jsonl"
    began = time.monotonic()
    with CleanupStack() as cleanup:
        install(lab.sender, lab.ifname, lab.access_bps, lab.mtu, od_range, be_range, cleanup)
        servers = []
        cleanup.push(f"stop the replay's {lab.tool.name} servers", lambda: lab.receiver.stop_processes(servers))
        data_ports = od_range.ports + be_range.ports
        for port in data_ports:
            servers.append(lab.receiver.start(lab.tool.server(port, lab.receiver_address, lab.receiver_workdir),
                                              label=f"{lab.tool.name}-server-{port}",
                                              stdout=raw / f"server-{port}.log", stderr=raw / f"server-{port}.err"))
        _wait_listening(lab.receiver, servers, [lab.tool.pool_port(port) for port in data_ports])
        path = _put_schedule(lab.sender, schedule, cleanup)
        with ShaperMeter(lab.router, lab.router_ifname, raw / "bottleneck.txt", period_s=lab.interval_s,
                         router=lab.router_os) as meter:
            # the interpreter with longhaul on the sender: this one's path (the SSH path map applies)
            agent = lab.sender.start([sys.executable, "-m", MODULE, path], label=f"replay-leg-{leg.name}",
                                     stdout=events_path, stderr=raw / "agent.err")
            cleanup.push("stop the replay's leg agent", agent.stop)
            events = _follow(agent, EventReader(events_path), LEAD_S + deadline + STOP_MARGIN_S, leg.name,
                             len(start), say)
    server_logs = {lab.tool.pool_port(port): _text(raw / f"server-{port}.log") for port in data_ports}
    outcome = leg_outcome(events, len(start), raw, lab.tool, server_logs)
    if not outcome.ended or outcome.failure:   # it crashed, or tc failed: its measures cannot be trusted
        raise RuntimeError(f"replay {leg.name}: the leg agent on {lab.sender.name} failed (exit {agent.poll()}): "
                           f"{outcome.failure or _tail(raw / 'agent.err')}")
    errors = list(outcome.errors)
    finish = outcome.finish_s
    runtime = finish - start
    transfers = {
        "arrival_s": start, "launched_s": outcome.launched_s, "finish_s": finish,
        "runtime_s": runtime, "reference_s": reference,
        "slowdown": np.maximum(runtime, lab.interval_s) / np.maximum(reference, lab.interval_s),
        "od": od, "nbytes": size, "requested_bps": rate_bps, "received_bytes": outcome.received_bytes,
        "attempts": outcome.attempts, "port": outcome.port,
    }
    neck = [(t - outcome.epoch, b) for t, b, *_ in meter.samples] if outcome.epoch is not None else []
    return LegResult(name=leg.name, load_ratio=leg.load_ratio, od_share=leg.od_share, capped=leg.capped,
                     headroom=lab.headroom, interval_s=lab.interval_s, bin_s=lab.bin_s, transfers=transfers,
                     series=leg_series(outcome.samples, neck, lab.interval_s, lab.goodput_factor),
                     ports={"od": [od_range.base, od_range.size], "be": [be_range.base, be_range.size]},
                     cap_changes=outcome.cap_changes, duration_s=time.monotonic() - began, errors=errors,
                     simulated=sim)


def leg_schedule(lab: LegLab, leg: Leg, start, size, rate_bps, od, od_ports: list[int], be_ports: list[int],
                 deadline_s: float) -> dict:
    """What the agent on the sender runs (drivers/agents/replay_leg.py SCHEDULE); the ports
    are the ones the clients name."""
    side = ClientSide(lab.receiver_address, lab.cca, lab.pacing_overhead)
    return {
        **SCHEDULE.stamp(), "name": leg.name, "interval_s": lab.interval_s, "lead_s": LEAD_S,
        "deadline_s": deadline_s, "cooldown_s": COOLDOWN_S, "max_attempts": MAX_ATTEMPTS,
        "busy_marker": lab.tool.busy_marker,
        "transfers": [{"arrival_s": float(start[i]), "od": bool(od[i]), "argv": lab.tool.client(side, size[i], rate_bps[i])}
                      for i in range(len(start))],
        "ports": {"od": list(od_ports), "be": list(be_ports)},
        "shaper": {"ifname": lab.ifname, "root_bps": lab.access_bps, "mtu": lab.mtu,
                   "min_step_bps": 0.01 * lab.bottleneck_bps},
        "caps": ({"capacity_bps": lab.bottleneck_bps, "od_share": leg.od_share, "headroom": lab.headroom}
                 if leg.capped else None),
    }


def _wait_listening(executor, servers: list, ports: list[int]) -> None:
    """All servers listening, seen in one `ss` a poll (a command to a VM under TCG takes seconds)."""
    def ready() -> bool:
        if any(server.poll() is not None for server in servers):
            return True
        return set(ports) <= listening_ports(executor.run(LISTENING_TCP, check=False).stdout)

    wait_until(ready, timeout=READY_TIMEOUT_S + 0.5 * len(ports), interval=0.2, what=f"{len(ports)} servers")
    for server, port in zip(servers, ports):
        if server.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited: {server.read_stderr().strip()[:300]}")


def _put_schedule(executor, schedule: dict, cleanup: CleanupStack) -> str:
    """The schedule as a file on the sender (the agent gets no stdin; argv is too small for a day)."""
    path = executor.run(["mktemp", "/tmp/longhaul-leg.XXXXXX"]).stdout.strip()
    if not path:
        raise RuntimeError(f"mktemp on {executor.name} gave no path")
    cleanup.push(f"remove the leg's schedule on {executor.name}", lambda: executor.run(["rm", "-f", path], check=False))
    write_file(executor, path, json.dumps(schedule))
    return path


def _follow(agent, reader: EventReader, timeout_s: float, name: str, n: int, say) -> list[dict]:
    """Until the agent exits (it ends itself at its deadline; this stops it if it does not); its
    events, each line read and parsed once."""
    began = last = time.monotonic()
    while agent.poll() is None:
        now = time.monotonic()
        if now - began > timeout_s:
            agent.stop()
            raise TimeoutError(f"replay {name}: the leg agent still ran {timeout_s:.0f} s after it started")
        if now - last >= PROGRESS_S:
            last = now
            say(progress_line(name, reader.read(), n))
        time.sleep(0.2)
    return reader.read()


class EventReader:
    """The agent's events file as it grows: each read parses only the complete lines added since
    the last (a line still being written is left for the next read); read() returns them all."""

    def __init__(self, path: Path):
        self.path, self.offset, self.events = path, 0, []

    def read(self) -> list[dict]:
        if self.path.exists():
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self.offset += len(complete)
            self.events += [json.loads(line) for line in complete.decode(errors="replace").splitlines()
                            if line.startswith("{")]
        return self.events


def progress_line(name: str, events: list[dict], n: int) -> str:
    done = {e["i"] for e in events if e["ev"] == "exit" and not e["retry"]}
    launched = {e["i"] for e in events if e["ev"] == "launch"}
    t = max((e.get("t", 0.0) for e in events), default=0.0)
    caps = [e["bps"] for e in events if e["ev"] == "cap"]
    cap = "none" if not caps or caps[-1] is None else f"{caps[-1] / 1e6:.1f} Mb/s"
    return (f"replay {name}: {t:.0f} s, {len(done)}/{n} transfers done, {len(launched - done)} running, "
            f"BE cap {cap}")


@dataclass
class LegOutcome:
    """What the agent's events say, per transfer (trace order) and per sample."""

    launched_s: np.ndarray
    finish_s: np.ndarray
    received_bytes: np.ndarray
    attempts: np.ndarray
    port: np.ndarray
    samples: list[tuple]            # (t, od, be, other, cap, od_rate), counters cumulative
    cap_changes: int
    epoch: float | None             # t0 on the sender's wall clock
    ended: bool
    errors: list[str]
    failure: str | None = None      # the agent's own error, when it ended as failed


def leg_outcome(events: list[dict], n: int, raw: Path, tool, server_logs: dict[int, str]) -> LegOutcome:
    """Per transfer: first launch, the exit of its last attempt (a busy server's turn-away is
    retried, not a finish), the bytes that arrived (the client's output, or the server's log:
    its port's records in order against the clients that ended there); every client's output
    kept in raw/."""
    out = LegOutcome(np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=int),
                     np.full(n, -1), [], 0, None, False, [])
    problems: dict[int, str] = {}
    served: dict[int, list[int]] = {}                # port -> transfers whose last attempt ended there
    for ev in events:
        kind = ev["ev"]
        if kind == "start":
            out.epoch = ev["epoch"]
        elif kind == "launch":
            i = ev["i"]
            if math.isnan(out.launched_s[i]):
                out.launched_s[i] = ev["t"]
            out.attempts[i], out.port[i] = ev["attempt"], ev["port"]
        elif kind == "exit":
            i = ev["i"]
            stem = raw / f"t{i:05d}-{ev['attempt']}"
            stem.with_suffix(".out").write_text(ev["stdout"])
            if ev["stderr"]:
                stem.with_suffix(".err").write_text(ev["stderr"])
            if ev["retry"]:
                continue
            problems.pop(i, None)
            if ev["code"] == 0:        # a session turned away before its data moved leaves no record
                served.setdefault(int(out.port[i]), []).append(i)
            received, error = tool.client_result(ev["stdout"])
            if ev["code"] == 0:
                out.finish_s[i] = ev["t"]
            if received is not None:
                out.received_bytes[i] = received
            if error:
                problems[i] = error
            if ev["code"] != 0:
                problems[i] = f"{tool.name} exited {ev['code']}" + (f": {problems[i]}" if i in problems else "")
        elif kind == "sample":
            out.samples.append((ev["t"], ev["od"], ev["be"], ev["other"], ev["cap"], ev["od_rate"]))
        elif kind == "cap":
            out.cap_changes += 1
        elif kind == "end":
            out.ended = True
            if ev["reason"] == "failed":
                out.failure = ev.get("error") or "failed"
            elif ev["reason"] != "done":
                out.errors.append(f"the leg agent ended: {ev['reason']}" + (f" ({ev['error']})" if ev.get("error") else ""))
    for port, indices in served.items():
        records = tool.server_received(server_logs.get(port, ""))
        if not records:
            continue
        if len(records) != len(indices):
            out.errors.append(f"port {port}: the server logged {len(records)} transfers for {len(indices)} "
                              "clients that ended well")
            continue
        for i, (nbytes, code) in zip(indices, records):
            out.received_bytes[i] = nbytes
            if code not in (None, 226):
                problems[i] = problems.get(i) or f"the server ended the transfer with code {code}"
    for i in range(n):
        if out.attempts[i] == 0:
            problems.setdefault(i, "never launched")
    out.errors += [f"transfer {i}: {why}" for i, why in sorted(problems.items())]
    return out


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip() if path.exists() else ""
    return text.splitlines()[-1][:300] if text else "(no stderr)"


def _spread(points: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """A cumulative counter read at times t: each read-to-read growth spread over the intervals
    between the two reads, in proportion to the time each covers."""
    out = np.zeros(len(edges) - 1)
    for (t_a, v_a), (t_b, v_b) in zip(points, points[1:]):
        share = np.clip(np.minimum(edges[1:], t_b) - np.maximum(edges[:-1], t_a), 0, None) / max(t_b - t_a, 1e-9)
        out += share * (v_b - v_a)
    return out


def leg_series(samples: list[tuple], neck: list[tuple[float, float]], interval_s: float,
               goodput_factor: float) -> dict[str, np.ndarray]:
    """Per interval from t0. samples: the agent's (t, od, be, other, cap, od_rate); neck: R1's
    (t, bytes), both cumulative. A read's growth is spread over the time since the previous read,
    not put in one interval: a read that came late (a slow host answers tc in seconds) would
    otherwise show seconds of bytes as one second's, above what the link passes."""
    n = math.ceil(max((s[0] for s in samples), default=0.0) / interval_s)
    edges = np.arange(n + 1) * interval_s
    series = {key: _spread([(s[0], s[col]) for s in samples], edges)
              for col, key in ((1, "od_bytes"), (2, "be_bytes"), (3, "other_bytes"))}
    series["bottleneck_bytes"] = _spread(neck, edges)
    series["be_cap_bps"] = np.full(n, np.nan)
    series["od_rate_bps"] = np.full(n, np.nan)
    for t, _, _, _, cap, od_rate in samples:
        i = min(n - 1, int(t // interval_s))
        if i >= 0:
            series["be_cap_bps"][i] = np.nan if cap is None else cap
            series["od_rate_bps"][i] = np.nan if od_rate is None else od_rate
    # delivered: what crossed the bottleneck (the sender's classes also count what the
    # bottleneck then dropped); the sender's sum where the router's shaper has no tbf counter
    neck_bytes = series["bottleneck_bytes"]
    sent = series["od_bytes"] + series["be_bytes"] + series["other_bytes"]
    series["delivered_bytes"] = (neck_bytes if neck_bytes.any() else sent) * goodput_factor
    series["t_s"] = (np.arange(n) + 1) * interval_s
    return series
