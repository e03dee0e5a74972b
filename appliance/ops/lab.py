"""The OPS experiments of seed 000 (sections 5.2 and 6.7) in the embedded lab.

Roles as in the paper: background on S1/D1 (and S2/D2 for a second stream), foreground on S3/D3,
the RTT probe on S4/D4 across the shared bottleneck. Passive probing records one RTT a second (the
mean of 10 pings 1 ms apart); active probing does the same while the probe pair sends a repeating
profile of short bursts (seed 000: CUBIC 5 s, BBR 5 s, CUBIC 5 s, none 5 s). The lab and the
profile are declared in TOML (profiles/ops/lab.toml).
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from longhaul.appliance.config.schema import Topology
from longhaul.collectors.live.rtt_probe import RttProbe, RttSample
from longhaul.collectors.store.writer import new_run_id
from longhaul.core.errors import ConfigError, PreflightError
from longhaul.core.model import Strict
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate
from longhaul.drivers import iperf3
from longhaul.hardware.backends.base import LinkSettings
from longhaul.hardware.backends.netns import leftovers
from longhaul.hardware.backends.netns.features import Features, detect
from longhaul.hardware.backends.netns.lab import NetnsLab
from longhaul.hardware.cleanup import CleanupStack, signals_raise
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.executors.process import Process, ProcessTable, wait_until
from longhaul.hardware.topology import dumbbell

FG_PORT = 5311
# Background and active-probe streams are stopped mid-test; an iperf3 server needs a moment to
# notice and would refuse the next test meanwhile ("server is busy"), so each start takes a port
# of its own from here on.
FIRST_FREE_PORT = 5400


class ActiveStep(Strict):
    cca: str = Field(pattern=r"^([a-z0-9_]+)$")    # "none" is a pause
    seconds: float = Field(gt=0, le=600)

    @field_validator("seconds")
    @classmethod
    def _whole_burst(cls, v: float, info: ValidationInfo) -> float:
        # iperf3 -t takes whole seconds; a fractional burst would overrun its slot in the cycle
        if info.data.get("cca") != "none" and v != int(v):
            raise ValueError("whole seconds for a burst (iperf3 -t takes whole seconds); a pause may be fractional")
        return v


def active_plan(profile: list[ActiveStep]) -> tuple[float, list[tuple[float, ActiveStep, int]]]:
    """The cycle length and, per step, its offset in the cycle and the server slot of its bursts.

    Each burst starts at its absolute time (t0 + cycle * n + offset) so the cycle never drifts
    against the probe's one-second rounds, and windows of a whole number of cycles that start at
    t0 always see the same phases. Each burst step has a server of its own: a burst's connection
    set-up overlaps the previous burst's last fraction of a second."""
    plan, offset, slot = [], 0.0, 0
    for step in profile:
        plan.append((offset, step, slot if step.cca != "none" else -1))
        slot += step.cca != "none"
        offset += step.seconds
    return offset, plan


class Roles(Strict):
    background_pairs: list[int] = Field([1, 2], min_length=1, max_length=8)
    foreground_pair: int = Field(3, ge=1)
    probe_pair: int = Field(4, ge=1)


class Record(Strict):
    duration_s: float = Field(300, gt=0)
    warmup_s: float = Field(15, ge=0)


class OpsLabFile(Strict):
    topology: Topology
    roles: Roles = Roles()
    record: Record = Record()
    active_profile: list[ActiveStep] = Field(min_length=1)


def load_ops_lab(path: Path) -> OpsLabFile:
    source = load(path)
    spec = validate(source, OpsLabFile)
    used = [*spec.roles.background_pairs, spec.roles.foreground_pair, spec.roles.probe_pair]
    if max(used) > spec.topology.pairs or len(set(used)) != len(used):
        loc = ("roles",)
        raise ConfigError(path, source.line_of(loc), loc, used,
                          f"distinct pairs from 1 to topology.pairs = {spec.topology.pairs}")
    return spec


class OpsLab:
    """A built lab with the OPS roles; use as a context manager (teardown is unconditional)."""

    def __init__(self, spec: OpsLabFile, workdir: Path):
        self.spec = spec
        self.workdir = Path(workdir)
        self.procs = ProcessTable()
        self.features: Features | None = None
        self.lab: NetnsLab | None = None
        self._stack = ExitStack()
        self._servers: dict[tuple[int, int], Process] = {}
        self._next_port = FIRST_FREE_PORT
        self.tag = new_run_id()[-6:]
        self.last_bursts: list[tuple[float, float, str]] = []   # the last active probe's bursts

    def __enter__(self) -> "OpsLab":
        self.features = detect(delayline.helper_path())
        problems = self.features.problems()
        if problems:
            raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
        self.workdir.mkdir(parents=True, exist_ok=True)
        cleanup = self._stack.enter_context(CleanupStack())
        self._stack.enter_context(signals_raise())
        leftovers.register(self.tag, self.workdir)
        cleanup.push("forget run marker", lambda: leftovers.unregister(self.tag))
        cleanup.push("stop processes", self.procs.stop_all)
        topo = self.spec.topology
        self.lab = NetnsLab(dumbbell(f"{self.tag}1", topo.pairs, topo.access_rate_mbps, topo.bottleneck_rate_mbps,
                                     topo.mtu),
                            LinkSettings(topo.rtt_ms, topo.queue_bytes, "cubic", "large"), self.features,
                            self.procs, cleanup, self.workdir)
        self.lab.build()
        return self

    def __exit__(self, *exc) -> bool:
        self._stack.close()
        return False

    def server(self, pair: int, port: int) -> Process:
        """The iperf3 server for (pair, port), started on first use; it serves one test at a time."""
        known = self._servers.get((pair, port))
        if known is not None and known.poll() is None:
            return known
        executor = self.lab.executor(f"D{pair}")
        proc = executor.start(iperf3.server_argv(port), label=f"iperf3-server-{pair}-{port}")
        probe = ["ss", "-ltnH", "sport", "=", f":{port}"]
        wait_until(lambda: proc.poll() is not None or bool(executor.run(probe, check=False).stdout.strip()),
                   timeout=10, what=f"iperf3 server on D{pair}:{port}")
        self._servers[(pair, port)] = proc
        return proc

    def fresh_port(self) -> int:
        self._next_port += 1
        return self._next_port

    def start_background(self, ccas: list[str], seconds: float, raw: Path) -> list[Process]:
        """One long TCP stream per background pair, each with its congestion control."""
        clients = []
        port = self.fresh_port()
        for pair, cca in zip(self.spec.roles.background_pairs, ccas):
            self.server(pair, port)
            argv = iperf3.client_argv(f"D{pair}", port, duration_s=seconds, cca=cca)
            clients.append(self.lab.executor(f"S{pair}").start(argv, label=f"bg-{pair}-{cca}",
                                                                stdout=raw / f"bg-{pair}-{cca}.json"))
        return clients

    def transfer(self, cca: str, seconds: float | None, raw: Path, bytes_: int | None = None) -> iperf3.Result | None:
        """A foreground transfer on its pair, for `seconds` or of `bytes_`; None if iperf3 gave no result."""
        pair = self.spec.roles.foreground_pair
        self.server(pair, FG_PORT)
        argv = iperf3.client_argv(f"D{pair}", FG_PORT, duration_s=seconds, bytes_=bytes_, cca=cca)
        res = self.lab.executor(f"S{pair}").run(argv, timeout=self.seconds_for(seconds, bytes_) + 60, check=False)
        raw.write_text(res.stdout)
        try:
            return iperf3.parse(res.stdout)
        except ValueError:
            return None

    def seconds_for(self, seconds: float | None, bytes_: int | None) -> float:
        """How long a transfer may take: its duration, or its bytes at a twentieth of the bottleneck."""
        if seconds is not None:
            return seconds
        return bytes_ * 8 / (self.spec.topology.bottleneck_rate_mbps * 1e6 / 20)

    def probe(self, seconds: float, active: bool) -> list[RttSample]:
        """RTT time series from the probe pair, one value a second, optionally with active probing."""
        pair = self.spec.roles.probe_pair
        probe = RttProbe(self.lab.executor(f"S{pair}"), f"D{pair}", "burst")
        prober = ActiveProber(self, pair) if active else None
        if prober:
            prober.prepare()      # its servers listen before the clock starts: the first burst is on time
        t0 = time.monotonic()
        probe.start(t0)
        if prober:
            prober.start(t0)
        try:
            time.sleep(seconds)   # the probe rounds themselves are paced by the probe's own clock
        finally:
            if prober:
                prober.stop()
                self.last_bursts = prober.started
            samples = probe.stop()
        return [s for s in samples if s.t_s < seconds]


class ActiveProber:
    """Cycles the active probing profile on the probe pair, on the probe's clock, until stopped."""

    def __init__(self, ops: OpsLab, pair: int):
        self.ops, self.pair = ops, pair
        self.cycle_s, self.plan = active_plan(ops.spec.active_profile)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="active-prober", daemon=True)
        self._ports: list[int] = []
        self._running: dict[int, Process] = {}
        self.t0 = 0.0
        self.started: list[tuple[float, float, str]] = []   # (scheduled, actual) s after t0, cca

    def prepare(self) -> None:
        slots = max((slot for _, _, slot in self.plan), default=-1) + 1
        self._ports = [self.ops.fresh_port() for _ in range(slots)]
        for port in self._ports:
            self.ops.server(self.pair, port)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def _loop(self) -> None:
        sender = self.ops.lab.executor(f"S{self.pair}")
        cycle = 0
        while True:
            for offset, step, slot in self.plan:
                due = self.t0 + cycle * self.cycle_s + offset
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                if slot < 0:
                    continue
                previous = self._running.get(slot)
                if previous is not None and previous.poll() is None:
                    previous.stop()      # a burst that overran a whole cycle is ended, not stacked
                argv = iperf3.client_argv(f"D{self.pair}", self._ports[slot], duration_s=int(step.seconds),
                                          cca=step.cca)
                self._running[slot] = sender.start(argv, label=f"active-{step.cca}")
                self.started.append((round(due - self.t0, 3), round(time.monotonic() - self.t0, 3), step.cca))
            cycle += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for proc in self._running.values():
            proc.stop()
