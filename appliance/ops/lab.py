"""The OPS lab file (profiles/ops/lab.toml): seed 000's lab for sections 5.2 and 6.7.

Roles as in the paper: background on S1/D1 (and S2/D2 for a second stream), foreground on S3/D3,
the RTT probe on S4/D4 across the shared bottleneck. Passive probing records one RTT a second (the
mean of 10 pings 1 ms apart); active probing does the same while the probe pair sends a repeating
profile of short bursts (seed 000: CUBIC 5 s, BBR 5 s, CUBIC 5 s, none 5 s). appliance/ops/plans.py
turns it into profiles the runner runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from longhaul.appliance.config.schema import Topology, check_buffer
from longhaul.core.errors import ConfigError
from longhaul.core.model import Strict
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate

FG_PORT = 5311
# Background and active-probe streams are stopped mid-test; an iperf3 server needs a moment to
# notice and would refuse the next test meanwhile ("server is busy"), so each start takes a port
# of its own from here on.
FIRST_FREE_PORT = 5400


class ActiveStep(Strict):
    """One step of the active probing profile: a burst of `streams` TCP streams of `cca` for
    `seconds` (seed 000: one stream at full rate), or a pause ("none"). What can change how much
    a burst fills the bottleneck's queue, to compare probing profiles (issue 26): the streams, their
    socket buffer (a window cap: `buffer`, as a flow's) and a pacing rate per stream (`pacing_mbps`)."""
    cca: str = Field(pattern=r"^([a-z0-9_]+)$")    # "none" is a pause
    seconds: float = Field(gt=0, le=600)
    streams: int = Field(1, ge=1, le=16)
    buffer: Literal["default", "normal", "large"] | int | None = None
    pacing_mbps: float | None = Field(None, gt=0, le=100_000)

    _buffer = field_validator("buffer", mode="before")(classmethod(lambda cls, v: check_buffer(v)))

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
    # the foreground may share the probe's pair: it is off while the probe window is recorded
    used = [*spec.roles.background_pairs, spec.roles.foreground_pair, spec.roles.probe_pair]
    apart = [*spec.roles.background_pairs, spec.roles.probe_pair]
    if max(used) > spec.topology.pairs or len(set(apart)) != len(apart) \
            or spec.roles.foreground_pair in spec.roles.background_pairs:
        loc = ("roles",)
        raise ConfigError(path, source.line_of(loc), loc, used,
                          f"pairs from 1 to topology.pairs = {spec.topology.pairs}, the background's apart "
                          "from the foreground's and the probe's")
    return spec
