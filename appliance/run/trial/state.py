"""The one object a trial is built around: what set-up leaves for the event loop, and what the
loop and the wind-down leave for the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from longhaul.appliance.config.profiles import CellSpec
from longhaul.appliance.run.trial.plan import FlowRun
from longhaul.collectors.live.arrival_meter import ArrivalMeter
from longhaul.collectors.live.rtt_probe import RttProbe
from longhaul.collectors.live.socket_sampler import SocketSampler
from longhaul.collectors.live.tcp_memory import Pressure
from longhaul.hardware.backends.base import Lab
from longhaul.hardware.executors.process import Process


@dataclass
class Trial:
    """One trial from its plan to its record: what set-up leaves for the loop, and the loop and
    wind-down for the summary."""
    lab: Lab
    spec: CellSpec
    number: int
    dir: Path
    idle_rtt_ms: float | None
    runs: list[FlowRun]
    probe: RttProbe
    sampler: SocketSampler
    meter: ArrivalMeter
    undo: list[tuple] = field(default_factory=list)      # what un-prepares the bursts' sources
    shared: list[Process] = field(default_factory=list)  # receivers the bursts share
    offset_s: float = 0.0           # the clock's zero after set-up: the earliest launch at 0 or later
    started: str = ""
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)   # hosts that stopped answering, and why
    steal_pct: float | None = None
    tcp_pressure: Pressure | None = None     # the end hosts' kernels short of TCP memory (tcp_memory.py)

    @property
    def raw(self) -> Path:
        return self.dir / "raw"
