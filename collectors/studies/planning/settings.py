"""plan.toml: what a plan sweeps and how its replay runs. Every key has the paper's default, so a
plan needs no file; a bad key or value exits 2 naming file, line and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator

from longhaul.core.model import Strict
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate

# Section 5.3: %-OD-transfers, %-OD-bandwidth = that + 0, 10, 20 and 100, transfer-load ratios.
PAPER_OD_TRANSFERS_PCT = (10.0, 30.0, 50.0, 70.0)
PAPER_OD_BANDWIDTH_OVER_PCT = (0.0, 10.0, 20.0)
PAPER_LOAD_RATIOS = (1.0, 1.5, 2.0, 2.5)
LoadRatio = Annotated[float, Field(gt=0)]


class SweepSection(Strict):
    """The simulated configurations: each %-OD-transfers with %-OD-bandwidth at that plus each of
    od_bandwidth_over_pct (and 100 % when od_bandwidth_full), at each load ratio."""

    capacity_gbps: float | None = Field(None, gt=0)   # netCap; None: the trace's peak in bin_s bins
    interval_s: float = Field(1.0, gt=0, le=60)        # the scheduling interval, also the slowdown bound
    bin_s: float = Field(60.0, gt=0)                   # peak, mean and CoV bins (section 5.5)
    seed: int = Field(1, ge=0)                         # the random OD/BE split
    # logged: the trace's own classes (CSV `class`); auto: logged when every transfer has one
    split: Literal["auto", "random", "logged"] = "auto"
    od_transfers_pct: list[float] = Field(list(PAPER_OD_TRANSFERS_PCT), min_length=1)
    od_bandwidth_over_pct: list[float] = Field(list(PAPER_OD_BANDWIDTH_OVER_PCT), min_length=1)
    od_bandwidth_full: bool = True
    load_ratios: list[LoadRatio] = Field(list(PAPER_LOAD_RATIOS), min_length=1)

    @field_validator("od_transfers_pct", "od_bandwidth_over_pct")
    @classmethod
    def _percent(cls, values: list[float]) -> list[float]:
        if any(not 0 <= v <= 100 for v in values):
            raise ValueError("percentages between 0 and 100")
        return values

    def configurations(self, od_pct_values: list[float] | None = None) -> list[tuple[float, float, float]]:
        """(%-OD-transfers, %-OD-bandwidth, load ratio), in the paper's order, without repeats."""
        out = []
        for p in od_pct_values or self.od_transfers_pct:
            bws = [min(100.0, p + d) for d in self.od_bandwidth_over_pct] + ([100.0] if self.od_bandwidth_full else [])
            for bw in dict.fromkeys(bws):
                out += [(p, bw, load) for load in self.load_ratios]
        return out


REPLAY_TOOL_NAMES = ("auto", "gridftp", "iperf3")
ReplayToolName = Literal[REPLAY_TOOL_NAMES]


class ReplaySection(Strict):
    """The lab replay (section 6): the trace thinned to one transfer in keep_one_in, its times
    compressed by the same factor (so as many transfers overlap as in the log: the paper's 24 h ->
    2 h at 12) unless span_s says otherwise, rates scaled to the lab's bottleneck."""

    keep_one_in: int = Field(12, ge=1)
    span_s: float | None = Field(None, gt=0)       # None: the trace's span / keep_one_in
    od_transfers_pct: float = Field(30.0, ge=0, le=100)     # the testbed's; a labelled trace keeps its classes
    od_bandwidth_pct: float = Field(40.0, ge=0, le=100)
    load_ratios: list[LoadRatio] = Field([1.0, 1.5, 2.0], min_length=1)
    seed: int = Field(1, ge=0)
    bottleneck_mbps: float = Field(100.0, gt=0)
    rtt_ms: float = Field(10.0, ge=0)
    queue: str | int = "1bdp"
    cca: str = "cubic"
    # what each transfer is made of: GridFTP where the lab's hosts have it, else iperf3 (auto);
    # the names are appliance/plan/tools.py's registry, which checks it agrees with REPLAY_TOOL_NAMES
    tool: ReplayToolName = "auto"


class PlanFile(Strict):
    sweep: SweepSection = SweepSection()
    replay: ReplaySection = ReplaySection()


def load_plan(path: Path | None) -> PlanFile:
    """The plan file, validated (ConfigError with file:line), or every default."""
    if path is None:
        return PlanFile()
    return validate(load(path), PlanFile)
