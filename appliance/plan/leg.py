"""One leg of a replay: every transfer of the trace a real iperf3 flow S1 -> D1, launched at its
arrival, with or without section 7's BE cap, measured from the lab.

Flows. A pool of iperf3 servers on D1, one test each at a time, OD and BE in separate port ranges
(shaper.py classifies by them). A transfer takes a free port of its class at its arrival and runs
`iperf3 -c D1 -p PORT -n BYTES --fq-rate RATE`: the pacing rate is its requested rate (the trace's
rate, the paper's requestRate), a hard cap on the socket as the paper's testbed capped each
transfer (iperf3's -b would let a transfer that fell behind catch up above it). A port is handed
out again only COOLDOWN_S after its last client exited (the server needs a moment to listen again),
least recently used first; a client the server turned away as busy is relaunched on another port.

Times. arrival = the scheduled start from the leg's t0; finish = when the controller saw the
client exit (polled every POLL_S): after its last byte left the socket buffer (S1's
tcp_notsent_lowat keeps what is still unsent small, replay.py) and iperf3's closing exchange, a
few round trips. runtime = finish - arrival, slowdown = max(runtime, bound) / max(reference,
bound), bound = the interval (1 s), as the simulation's.

Measures and caps, once an interval (1 s, the paper's scheduling interval): the shaper's class
counters give the bytes each class sent in the interval; the OD count is the controller's
measured OD rate (caps.py) and a new OD arrival resets the cap at once.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longhaul.appliance.plan.caps import CapController, CapPolicy
from longhaul.appliance.plan.shaper import BE_CLASS, OD_CLASS, OTHER_CLASS, ClassShaper, port_ranges
from longhaul.collectors.live.shaper_meter import tbf_counters
from longhaul.collectors.studies.planning.replay_record import LegResult
from longhaul.collectors.studies.planning.sim import SimResult, simulate
from longhaul.collectors.studies.planning.trace import Trace
from longhaul.drivers import iperf3
from longhaul.drivers.tool import listening
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import wait_until

log = logging.getLogger(__name__)
POLL_S = 0.01
COOLDOWN_S = 0.5
LEAD_S = 1.0              # t0 this far after the servers are up: the first tick reads the counters at rest
READY_TIMEOUT_S = 15.0
MAX_ATTEMPTS = 3
GRACE_S = 30.0
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
    router: object            # R1's executor and its bottleneck port: what crossed the bottleneck
    router_ifname: str
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


@dataclass
class _Flow:
    index: int
    port: int | None = None
    proc: object = None
    launched_s: float = math.nan
    finish_s: float = math.nan
    attempts: int = 0
    received: float = math.nan
    error: str | None = None


@dataclass
class _Ports:
    """A class's free ports, least recently used first, each with the time it may be used again."""

    free: deque = field(default_factory=deque)

    def take(self, now: float) -> int | None:
        if self.free and self.free[0][1] <= now:
            return self.free.popleft()[0]
        return None

    def give(self, port: int, at: float) -> None:
        self.free.append((port, at))


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
    raw.mkdir(parents=True, exist_ok=True)
    flows = [_Flow(i) for i in range(len(start))]
    policy = CapPolicy(lab.bottleneck_bps, leg.od_share, lab.headroom)
    controller = CapController(policy) if leg.capped else None
    shaper = ClassShaper(lab.sender, lab.ifname, lab.access_bps, lab.mtu, od_range, be_range,
                         min_step_bps=0.01 * lab.bottleneck_bps)
    ticks: list[tuple] = []
    errors: list[str] = []
    began = time.monotonic()
    with CleanupStack() as cleanup:
        shaper.install(cleanup)
        ports = {True: _Ports(), False: _Ports()}
        servers = []
        cleanup.push("stop the replay's iperf3 servers", lambda: [s.stop() for s in servers])
        for is_od, prange in ((True, od_range), (False, be_range)):
            for port in prange.ports:
                servers.append(lab.receiver.start(["iperf3", "-s", "-p", str(port)], label=f"iperf3-server-{port}",
                                                  stdout=raw / f"server-{port}.log",
                                                  stderr=raw / f"server-{port}.err"))
                ports[is_od].give(port, 0.0)
        for server, port in zip(servers, od_range.ports + be_range.ports):
            _wait_listening(lab.receiver, server, port)
        cleanup.push("stop the replay's iperf3 clients", lambda: [f.proc.stop() for f in flows if f.proc])
        t0 = time.monotonic() + LEAD_S
        deadline = float(np.nanmax(sim.finish_s, initial=0.0)) * 1.5 + GRACE_S
        try:
            _drive(lab, flows, start, size, rate_bps, od, ports, shaper, controller, ticks, t0, deadline, raw, say,
                   leg.name)
        except TimeoutError as exc:
            errors.append(str(exc))
        for flow in flows:
            if flow.proc is not None and flow.proc.poll() is None:
                flow.proc.stop()
            _read_client(flow, raw)
            if flow.error:
                errors.append(f"transfer {flow.index}: {flow.error}")
    finish = np.array([f.finish_s for f in flows])
    runtime = finish - start
    transfers = {
        "arrival_s": start, "launched_s": np.array([f.launched_s for f in flows]), "finish_s": finish,
        "runtime_s": runtime, "reference_s": reference,
        "slowdown": np.maximum(runtime, lab.interval_s) / np.maximum(reference, lab.interval_s),
        "od": od, "nbytes": size, "requested_bps": rate_bps, "received_bytes": np.array([f.received for f in flows]),
        "attempts": np.array([f.attempts for f in flows]),
        "port": np.array([f.port if f.port is not None else -1 for f in flows]),
    }
    return LegResult(name=leg.name, load_ratio=leg.load_ratio, od_share=leg.od_share, capped=leg.capped,
                     headroom=lab.headroom, interval_s=lab.interval_s, bin_s=lab.bin_s, transfers=transfers,
                     series=_series(ticks, lab), ports={"od": [od_range.base, od_range.size],
                                                        "be": [be_range.base, be_range.size]},
                     cap_changes=shaper.changes, duration_s=time.monotonic() - began, errors=errors, simulated=sim)


def _wait_listening(executor, server, port: int) -> None:
    wait_until(lambda: server.poll() is not None or bool(executor.run(listening(port), check=False).stdout.strip()),
               timeout=READY_TIMEOUT_S, what=f"iperf3 server on port {port}")
    if server.poll() is not None:
        raise RuntimeError(f"iperf3 server on port {port} exited: {server.read_stderr().strip()[:300]}")


def _client_argv(lab: LegLab, port: int, nbytes: int, rate_bps: float) -> list[str]:
    return ["iperf3", "-c", lab.receiver_address, "-p", str(port), "-n", str(int(nbytes)), "--json",
            "-C", lab.cca, "--fq-rate", f"{rate_bps * lab.pacing_overhead:.0f}"]


def _drive(lab, flows, start, size, rate_bps, od, ports, shaper, controller, ticks, t0, deadline, raw, say,
           name) -> None:
    """The leg's event loop: launches at arrivals, exits polled, one tick an interval."""
    waiting = {True: deque(i for i in range(len(flows)) if od[i]), False: deque(i for i in range(len(flows)) if not od[i])}
    running: list[_Flow] = []
    k = 0
    last_say = 0.0
    prev = None
    while True:
        now = time.monotonic() - t0
        for is_od, queue in waiting.items():
            while queue and start[queue[0]] <= now:
                port = ports[is_od].take(now)
                if port is None:
                    break              # no server free: the transfer waits, its runtime counts it
                flow = flows[queue.popleft()]
                if is_od and controller is not None:
                    shaper.set_be_cap(controller.arrived())
                _launch(lab, flow, port, size[flow.index], rate_bps[flow.index], raw)
                flow.launched_s = time.monotonic() - t0
                running.append(flow)
        now = time.monotonic() - t0
        for flow in list(running):
            code = flow.proc.poll()
            if code is None:
                continue
            running.remove(flow)
            ports[bool(od[flow.index])].give(flow.port, now + COOLDOWN_S)
            if code != 0 and _busy(flow, raw) and flow.attempts < MAX_ATTEMPTS:
                waiting[bool(od[flow.index])].appendleft(flow.index)     # again, on another server
                continue
            flow.finish_s = now if code == 0 else math.nan
            if code != 0:
                flow.error = f"iperf3 exited {code}"
        if now >= k * lab.interval_s:
            counters = shaper.counters()
            sample = (now, counters.get(OD_CLASS, 0), counters.get(BE_CLASS, 0), counters.get(OTHER_CLASS, 0),
                      _bottleneck_bytes(lab))
            od_active = any(od[f.index] for f in running)
            cap = None
            if controller is not None:
                cap = controller.step(now, sample[1], od_active)
                shaper.set_be_cap(cap)
            if prev is not None:     # the counters' growth between the two reads, and when they were
                ticks.append((prev[0], now, *(b - a for a, b in zip(prev[1:], sample[1:])), shaper.cap_bps,
                              controller.od_rate_bps if controller else None))
            prev = sample
            k += 1
            if now - last_say >= 10:
                done = sum(1 for f in flows if not math.isnan(f.finish_s))
                say(f"replay {name}: {now:.0f} s, {done}/{len(flows)} transfers done, {len(running)} running, "
                    f"BE cap {'none' if shaper.cap_bps is None else f'{shaper.cap_bps / 1e6:.1f} Mb/s'}")
                last_say = now
            if not running and not any(waiting.values()):
                return                 # the last tick has counted the last bytes
        if now > deadline:
            raise TimeoutError(f"replay {name}: {len(running)} transfer(s) still running after {deadline:.0f} s")
        # exits are polled every POLL_S; with nothing running, sleep to the next arrival or tick
        nxt = min([start[q[0]] for q in waiting.values() if q] + [k * lab.interval_s])
        # (a transfer waiting for a free server is past its arrival: it is tried again each ms)
        time.sleep(max(0.001, min(POLL_S if running else 10 * POLL_S, nxt - (time.monotonic() - t0))))


def _bottleneck_bytes(lab: LegLab) -> int:
    """Bytes R1's bottleneck tbf has sent (0 where there is none to read)."""
    try:
        counters = tbf_counters(lab.router.run(["tc", "-s", "-j", "qdisc", "show", "dev", lab.router_ifname],
                                               check=False).stdout)
    except ValueError:
        return 0
    return counters[0] if counters else 0


def _launch(lab: LegLab, flow: _Flow, port: int, nbytes: int, rate_bps: float, raw: Path) -> None:
    flow.attempts += 1
    flow.port = port
    out = raw / f"t{flow.index:05d}-{flow.attempts}.json"
    flow.proc = lab.sender.start(_client_argv(lab, port, nbytes, rate_bps), label=f"iperf3-t{flow.index}",
                                 stdout=out, stderr=out.with_suffix(".err"))


def _busy(flow: _Flow, raw: Path) -> bool:
    """The server was still busy with the previous client: iperf3's own words for it."""
    return "busy" in _client_text(flow, raw).lower()


def _client_text(flow: _Flow, raw: Path) -> str:
    path = raw / f"t{flow.index:05d}-{flow.attempts}.json"
    return path.read_text(errors="replace") if path.exists() else ""


def _read_client(flow: _Flow, raw: Path) -> None:
    if flow.proc is None:
        flow.error = flow.error or "never launched"
        return
    text = _client_text(flow, raw)
    try:
        result = iperf3.parse(text)
    except ValueError as exc:
        flow.error = flow.error or f"no iperf3 result ({exc})"
        return
    flow.received = float(result.bytes_received)
    if result.error:
        flow.error = result.error


def _series(ticks: list[tuple], lab: LegLab) -> dict[str, np.ndarray]:
    """Per interval from t0. Each tick's bytes are spread over the time between its two reads of
    the counters, not put in one interval: a tick that ran late (a slow host answers tc in
    seconds) would otherwise show seconds of bytes as one second's, above what the link passes."""
    n = math.ceil(max((t[1] for t in ticks), default=0.0) / lab.interval_s)
    series = {key: np.zeros(n) for key in ("od_bytes", "be_bytes", "other_bytes", "bottleneck_bytes")}
    series["be_cap_bps"] = np.full(n, np.nan)
    series["od_rate_bps"] = np.full(n, np.nan)
    edges = np.arange(n + 1) * lab.interval_s
    for t_a, t_b, od_b, be_b, other_b, neck_b, cap, od_rate in ticks:
        share = np.clip(np.minimum(edges[1:], t_b) - np.maximum(edges[:-1], t_a), 0, None) / max(t_b - t_a, 1e-9)
        for key, value in (("od_bytes", od_b), ("be_bytes", be_b), ("other_bytes", other_b), ("bottleneck_bytes", neck_b)):
            series[key] += share * value
        i = min(n - 1, int(t_b // lab.interval_s))
        series["be_cap_bps"][i] = np.nan if cap is None else cap
        series["od_rate_bps"][i] = np.nan if od_rate is None else od_rate
    # delivered: what crossed the bottleneck (the sender's classes also count what the
    # bottleneck then dropped); the sender's sum where the router's shaper has no tbf counter
    neck = series["bottleneck_bytes"]
    sent = series["od_bytes"] + series["be_bytes"] + series["other_bytes"]
    series["delivered_bytes"] = (neck if neck.any() else sent) * lab.goodput_factor
    series["t_s"] = (np.arange(n) + 1) * lab.interval_s
    return series
