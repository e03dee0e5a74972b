"""Lab verification before every cell: is the realised lab the one the cell configured?

Idle RTT: the median of three burst rounds (10 ICMP echoes 1 ms apart, timed to the microsecond by
drivers/agents/icmp_echo.py) from S<k> to D<k>, for every pair k (all at once): each within the
tolerance, and no echo below the configured propagation delay, whatever the tolerance (a pair
routed around the delay, or a lab that took more off the delay than its path has, is refused).
Bottleneck rate: 8 to 16 TCP streams S1 -> D1 (more for larger BDPs) keep the shaper saturated
while its own counters are read every 100 ms (collectors/live/shaper_meter.py); the rate is the byte
counter's slope over saturated one-second windows (longer where the router samples slower:
shaper_meter.window_for). The receivers' goodput (their sockets' bytes
received while it was saturated) is recorded beside it.
TCP, not a UDP flood, because TCP moves GSO super-packets, which the userspace delay line carries
cheaply, so the probe does not measure the delay line's packet rate instead of the shaper.
Each stream is an iperf3 client and server of its own, all started together, where a process starts
in less than half a round trip of the path: one client connects its streams one after another, a
round trip each after 4 of its own (16 streams at 128 ms: 2.6 s before the last one's first byte).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from longhaul.appliance.config.load import VerifySection
from longhaul.appliance.config.profiles import CellSpec
from longhaul.appliance.run.phases import Phases
from longhaul.collectors.live.host_cpu import StealMeter
from longhaul.collectors.live.shaper_meter import (
    MIN_INTERVALS,
    ShaperMeter,
    backlogged_rate,
    saturated_windows,
    window_for,
)
from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.collectors.store.records import Measure, PathRtt, RateMeasure, Setting, Tolerance, Verification
from longhaul.drivers import iperf3, ss
from longhaul.drivers.tool import listening_ports
from longhaul.hardware.executors.process import CommandError, wait_until
from longhaul.hardware.path_rtt import IdleRtt, below_floor, floor_limit, measure_idle

log = logging.getLogger(__name__)

PORT = 5299         # the probe's servers listen on PORT, PORT + 1, ... (probe_ports)
# Enough streams that their socket buffers together cover the path even with the kernel's
# default limits (a cell's `default` buffer allows ~4 MB per socket, a 1 Gb/s x 183 ms path needs
# 23 MB in flight): the rate probe must saturate the shaper whatever the cell's tuning. At least 8:
# where each is a client of its own a stream costs no round trip, and 8 initial windows fill a
# path a slow-start round sooner than 4.
MIN_STREAMS, MAX_STREAMS = 8, 16
DEFAULT_SOCKET_BYTES = 4 * 2**20


def probe_streams(bdp_bytes: float) -> int:
    return max(MIN_STREAMS, min(MAX_STREAMS, math.ceil(3 * bdp_bytes / DEFAULT_SOCKET_BYTES)))


PROBE_CCA = "cubic"
WINDOW_S = 1.0       # the shaper's rate is measured over saturated windows this long

METER_PERIOD_S = 0.1     # its counters are read this often: a saturated window begins, and is seen, sooner
# Above this share of CPU time taken by the hypervisor during a probe, a refusal names the host.
STARVED_STEAL_PCT = 10.0


def ramp_limit_s(rtt_ms: float) -> float:
    """How long the probe may take to fill the path before its saturated seconds must begin: slow
    start from 10 segments to a BDP at 10 Gb/s and 200 ms is 18 round trips."""
    return max(2.0, 24 * rtt_ms / 1000.0)


def verify(lab, spec: CellSpec, settings: VerifySection, out_dir: Path, phases: Phases) -> Verification:
    """Measure, and measure again up to `attempts` times after a growing pause: a busy or stalled
    host (this VM's timers at times fire 100 ms late) can starve the shaper and the delay line for
    a while, and one unlucky probe should not refuse a lab that is right."""
    result = Verification()
    for attempt in range(1, settings.attempts + 1):
        if attempt > 1:
            time.sleep(settings.retry_pause_s * (attempt - 1))
        result = dataclasses.replace(verify_once(lab, spec, settings, out_dir, phases), attempt=attempt)
        if result.ok:
            break
        # the record keeps the last attempt's problems; run.log keeps every refusal's
        log.warning("%s: lab verification attempt %d of %d refused: %s", spec.id, attempt, settings.attempts,
                    "; ".join(result.problems))
    return result


def pair_rtts(lab, pairs: int) -> dict[int, IdleRtt | None]:
    """Every pair's idle RTT, measured at once (a burst each, in parallel)."""
    with ThreadPoolExecutor(max_workers=pairs) as pool:
        found = pool.map(lambda k: measure_idle(lab.executor(f"S{k}"), lab.address(f"D{k}")), range(1, pairs + 1))
        return dict(zip(range(1, pairs + 1), found))


def rtt_problems(rtts: dict[int, IdleRtt | None], rtt_ms: float, tolerance_ms: float) -> list[str]:
    """What is wrong with the pairs' idle RTTs: no reply, a median outside the tolerance, or any
    echo below the configured propagation delay (impossible on a right lab: no tolerance)."""
    problems = []
    for k, idle in rtts.items():
        path = f"S{k} -> D{k}"
        if idle is None:
            problems.append(f"{path}: no ping reply across the bottleneck")
            continue
        if abs(idle.median_ms - rtt_ms) > tolerance_ms:
            problems.append(f"{path}: idle RTT {idle.median_ms:.1f} ms vs configured {rtt_ms:g} ms "
                            f"(tolerance {tolerance_ms:.1f} ms)")
        if below_floor(idle.min_ms, rtt_ms):
            problems.append(f"{path}: an echo took {idle.min_ms:.2f} ms, below the configured propagation delay "
                            f"{rtt_ms:g} ms (at least {floor_limit(rtt_ms):.2f}): the path does not cross the "
                            "whole delay (a route around the routers, or more taken off for the path than it has)")
    return problems


def shared(verification: Verification, cell_id: str, rtts: dict[int, IdleRtt | None], probe_pair: int) -> Verification:
    """A lab build's verification (made for `cell_id`) for another cell on the same build, with the
    idle RTTs that cell's re-check measured."""
    probe = rtts.get(probe_pair)
    assert verification.rtt_ms is not None           # every verification measures the RTT
    return dataclasses.replace(
        verification, shared_from=cell_id,
        rtt_ms=dataclasses.replace(verification.rtt_ms, measured=probe.median_ms if probe else None),
        pairs=_pairs(rtts))


def _pairs(rtts: dict[int, IdleRtt | None]) -> dict[str, PathRtt]:
    return {str(k): PathRtt(median_ms=v.median_ms if v else None, min_ms=v.min_ms if v else None)
            for k, v in rtts.items()}


def verify_once(lab, spec: CellSpec, settings: VerifySection, out_dir: Path, phases: Phases) -> Verification:
    topo = spec.cell.topology
    pair = spec.cell.probe.pair
    problems = []
    measured_rate = goodput = None
    probed = False
    streams = probe_streams(topo.bdp_bytes)
    rtt_tol = max(settings.rtt_tolerance_ms, topo.rtt_ms * settings.rtt_tolerance_pct / 100)
    with StealMeter() as steal:
        with phases("verify rtt"):
            rtts = pair_rtts(lab, topo.pairs)
        problems += rtt_problems(rtts, topo.rtt_ms, rtt_tol)
        probed_rtt = rtts.get(pair)
        measured_rtt = probed_rtt.median_ms if probed_rtt else None
        if rtts.get(1) is not None:        # where nothing crosses, a rate probe would only wait for its timeout
            try:
                with phases("verify rate"):
                    measured_rate, goodput = measure_rate(lab, topo.rtt_ms, settings.rate_probe_s, out_dir, streams)
                probed = True
            except (CommandError, TimeoutError) as exc:  # pings pass but a transfer does not: the lab is wrong
                problems.append(f"the rate probe failed: {exc}")
    rate_tol = topo.bottleneck_rate_mbps * settings.rate_tolerance_pct / 100
    # a calibration cell measures what the host carries unshaped: its rate is a result, not a setting
    calibration = bool(spec.labels.get(CALIBRATION_LABEL))
    if probed and measured_rate is None and not calibration:
        problems.append("the rate probe never kept a queue at the bottleneck for a whole second")
    elif measured_rate is not None and not calibration and abs(measured_rate - topo.bottleneck_rate_mbps) > rate_tol:
        problems.append(f"bottleneck rate {measured_rate:.1f} Mb/s vs configured {topo.bottleneck_rate_mbps:g} Mb/s "
                        f"(tolerance {rate_tol:.1f} Mb/s)")
    if problems and steal.percent is not None and steal.percent >= STARVED_STEAL_PCT:
        problems.append(f"the hypervisor took {steal.percent:g} % of this machine's CPU time during the probe: "
                        "an oversubscribed host, not the lab configuration, is the likely cause")
    return Verification(
        ok=not problems, problems=problems, host_cpu_steal_pct=steal.percent,
        tolerance=Tolerance(rtt_ms=round(rtt_tol, 3), rate_mbps=round(rate_tol, 3)),
        rtt_ms=Measure(configured=topo.rtt_ms, measured=measured_rtt),
        rate_mbps=RateMeasure(configured=topo.bottleneck_rate_mbps, measured=measured_rate, goodput=goodput),
        queue_bytes=Setting(configured=topo.queue_bytes),
        method={"rtt": "every pair: median of 3 rounds of 10 ICMP echoes 1 ms apart, timed by kernel receive "
                       "stamps; its least echo against the configured propagation delay",
                "rate": f"shaper byte counter under {streams} {PROBE_CCA} streams, median over saturated windows "
                        f"of {WINDOW_S:g} s or {MIN_INTERVALS} meter samples, whichever is longer"},
        pairs=_pairs(rtts), rtt_floor_ms=round(floor_limit(topo.rtt_ms), 4))


def measure_rate(lab, rtt_ms: float, saturated_s: float, out_dir: Path, streams: int = MIN_STREAMS
                 ) -> tuple[float | None, float | None]:
    """(shaper rate, receivers' goodput) in Mb/s. The probe runs until the shaper has stayed
    saturated for `saturated_s` (whole one-second windows; its slow start is not waited out on a
    clock, as a fixed 12 round trips were), or until ramp_limit_s + saturated_s have passed.
    Each stream is a client and server of its own where starting a process costs less than half
    the connect round trip it saves (the first server's start is timed): one client would connect
    its streams one after another. Where starts are slow (a TCG VM over SSH: up to seconds each),
    one client runs them all."""
    receiver, sender = lab.executor("D1"), lab.executor("S1")
    link = lab.topo.bottleneck()
    started = time.monotonic()
    servers = [_server(receiver, PORT, out_dir, 1)]
    parallel = time.monotonic() - started < rtt_ms / 1000 / 2
    ports = sorted(probe_ports(streams if parallel else 1))
    servers += [_server(receiver, port, out_dir, k) for k, port in enumerate(ports[1:], start=2)]
    arrived: list[tuple[float, dict]] = []       # (time, each socket's bytes the receiver's kernel got) while saturated

    def done() -> bool:
        """The shaper saturated for saturated_s in whole windows, and what arrived read twice in them, half a
        window apart at least (where the meter's lines come in bulk, the windows do too)."""
        samples = meter.read()
        window = window_for(samples, WINDOW_S)
        full = len(saturated_windows(samples, window))
        if full >= 1 and not arrived:
            arrived.append(_arrived(receiver, set(ports)))
        elif full >= math.ceil(saturated_s / window) and time.monotonic() - arrived[0][0] >= WINDOW_S / 2:
            arrived.append(_arrived(receiver, set(ports)))
            return True
        return False

    try:
        wait_until(lambda: any(s.poll() is not None for s in servers) or set(ports) <= _listening(receiver),
                   timeout=10, what="verification iperf3 servers")
        limit = ramp_limit_s(rtt_ms) + saturated_s
        with ShaperMeter(lab.executor(link.a.host), link.a.ifname, out_dir / "verify-shaper.txt", METER_PERIOD_S,
                         router=lab.router_os(link.a.host)) as meter:
            clients = [sender.start(iperf3.client_argv(lab.address("D1"), port, duration_s=round(limit, 1),
                                                       streams=1 if parallel else streams, cca=PROBE_CCA),
                                    label=f"verify-client-{port}", stdout=out_dir / f"verify-rate-{k}.json")
                       for k, port in enumerate(ports, start=1)]
            try:
                wait_until(lambda: all(c.poll() is not None for c in clients) or done(),
                           timeout=limit + 30, interval=0.1, what="the verification's rate probe")
            finally:        # each client ends its test; the servers' reports stay in the raw files
                sender.stop_processes(clients, sig=signal.SIGINT)
    finally:
        receiver.stop_processes(servers)
    rate = backlogged_rate(meter.samples, window_for(meter.samples, WINDOW_S))
    return (None if rate is None else round(rate, 3)), _goodput(arrived)


def _server(receiver, port: int, out_dir: Path, k: int):
    return receiver.start(iperf3.server_argv(port), label=f"verify-server-{port}", stdout=out_dir / f"verify-server-{k}.json")


def _arrived(receiver, ports: set[int]) -> tuple[float, dict]:
    """(the controller's clock in the middle of the read, the bytes the receiver's kernel has
    received on each of the probe's sockets): what arrived, not what the iperf3 servers have read,
    which a reader this busy machine delayed reports a second late."""
    before = time.monotonic()
    text = receiver.run(ss.argv(), check=False).stdout
    return (before + time.monotonic()) / 2, {(s.src, s.sport, s.dst, s.dport): s.bytes_received or 0
                                             for s in ss.parse(text) if s.sport in ports}


def _goodput(arrived: list[tuple[float, dict]]) -> float | None:
    """Mb/s between the first and the last read, both taken while the shaper was saturated, over
    the sockets open at both (a stream whose client has ended is gone from the second: on a slow
    VM the reads are seconds apart, and its bytes would count as lost)."""
    if len(arrived) < 2 or arrived[-1][0] <= arrived[0][0]:
        return None
    (t0, first), (t1, last) = arrived[0], arrived[-1]
    both = first.keys() & last.keys()
    if not both:
        return None
    return round(sum(last[k] - first[k] for k in both) * 8 / (t1 - t0) / 1e6, 3)


def probe_ports(streams: int) -> set[int]:
    return {PORT + k for k in range(streams)}


def _listening(receiver) -> set[int]:
    return listening_ports(receiver.run(["ss", "-lntH"], check=False).stdout)
