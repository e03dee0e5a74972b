"""The shape of one experiment cell, checked by pydantic: what a profile may say after sweeps expand.

Every model forbids unknown keys, so a typo is an error rather than a silently ignored setting.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from longhaul.core.model import NAME, Strict
from longhaul.core.units import parse_queue
from longhaul.drivers.patterns import PATTERNS, pattern_problem
from longhaul.drivers.registry import TOOLS
from longhaul.hardware.offloads import Offload

BUFFER_NAMES = ("default", "normal", "large")


class Topology(Strict):
    # order matters: the queue's validator reads the fields declared before it
    pairs: int = Field(1, ge=1, le=16)
    access_rate_mbps: float = Field(1000.0, gt=0, le=100_000)
    bottleneck_rate_mbps: float = Field(500.0, gt=0, le=100_000)
    rtt_ms: float = Field(128.0, ge=0, le=2000)
    mtu: int = Field(1500, ge=576, le=9000)
    queue: int | str = "1bdp"

    @property
    def bdp_bytes(self) -> float:
        return self.bottleneck_rate_mbps * 1e6 / 8 * self.rtt_ms / 1e3

    @property
    def queue_bytes(self) -> int:
        return parse_queue(self.queue, self.bdp_bytes, self.mtu)

    @field_validator("bottleneck_rate_mbps")
    @classmethod
    def _is_bottleneck(cls, value, info):
        access = info.data.get("access_rate_mbps")
        if access is not None and value > access:
            raise ValueError(f"must not exceed access_rate_mbps = {access:g} (it would not be the bottleneck)")
        return value

    @field_validator("queue", mode="before")
    @classmethod
    def _queue_parses(cls, value, info):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError("a size, not a boolean or list: bytes (6000000), a size with unit (6MB, 4MiB), "
                             "packets (400p) or a BDP multiple (1bdp)")
        data = info.data
        rate, rtt, mtu = data.get("bottleneck_rate_mbps"), data.get("rtt_ms"), data.get("mtu")
        try:
            if None in (rate, rtt, mtu):
                parse_queue(value, bdp_bytes=1e12, mtu=576)  # another field is already wrong: units only
            else:
                parse_queue(value, rate * 1e6 / 8 * rtt / 1e3, mtu)
        except OverflowError:
            # digits beyond a float's range ("1000...0MB") become infinity, which int() refuses
            raise ValueError("a size of at most 308 digits: bytes (6000000), a size with unit (6MB, 4MiB), "
                             "packets (400p) or a BDP multiple (1bdp)") from None
        return value


def check_buffer(value):
    if value in BUFFER_NAMES or value is None:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 4096:
            raise ValueError("a buffer in bytes must be at least 4096")
        return value
    raise ValueError(f"one of {', '.join(BUFFER_NAMES)} (seed 001's socket buffer sizes) or a size in bytes (>= 4096)")


class Tuning(Strict):
    cca: str = Field("cubic", pattern=r"^[a-z0-9_]+$")
    # "bpf": a cca the lab's kernel lacks (htcp, scalable) runs as longhaul's BPF version of it
    # (hardware/bpf_ccas.py: lh_htcp, lh_scalable) where the lab can register it; the report says so.
    # "none": such a cell is refused at preflight
    cca_fallback: Literal["none", "bpf"] = "none"
    buffer: Literal["default", "normal", "large"] | int = "large"
    # NIC offloads on every lab interface (hardware/offloads.py); unset ones are left as found
    offloads: dict[Offload, bool] = {}

    _buffer = field_validator("buffer", mode="before")(classmethod(lambda cls, v: check_buffer(v)))


class Probe(Strict):
    pair: int = Field(1, ge=1, le=16)
    mode: Literal["burst", "interval"] = "burst"
    interval_ms: float = Field(10.0, ge=1, le=1000)
    # the trial lasts at least this long: a cell with no flows measures the idle path
    duration_s: float | None = Field(None, gt=0, le=86_400)
    # tcp_info of the TCP flows' sockets, samples a second (100 resolves a 20 ms path's sawtooth)
    tcpinfo_hz: float = Field(10.0, ge=1, le=100)


def _registered(registry: dict):
    """A field validator: the value names an entry of the registry (read when a flow is checked, so
    an entry registered later counts)."""
    def check(cls, value):
        if value not in registry:
            raise ValueError(f"one of {', '.join(registry)}")
        return value
    return classmethod(check)


class Flow(Strict):
    name: str = Field(pattern=NAME)
    role: Literal["foreground", "background"]
    tool: str = "iperf3"     # a name in drivers/registry.py TOOLS
    pair: int = Field(1, ge=1, le=16)
    protocol: Literal["tcp", "udp"] = "tcp"
    cca: str | None = Field(None, pattern=r"^[a-z0-9_]+$")
    streams: int = Field(1, ge=1, le=128)
    duration_s: float | None = Field(None, gt=0, le=86_400)
    bytes: int | None = Field(None, gt=0)
    start_s: float = Field(0.0, ge=0, le=86_400)
    pattern: str = "constant"    # a name in drivers/patterns.py PATTERNS
    on_s: float | None = Field(None, gt=0)
    off_s: float | None = Field(None, gt=0)
    burst_s: float | None = Field(None, gt=0)
    every_s: float | None = Field(None, gt=0)
    udp_rate_mbps: float | None = Field(None, gt=0, le=100_000)
    # seed 002's stiff sinusoidal UDP: f(t) = Avg cos(t/c) + Min + Avg between min and max
    min_mbps: float | None = Field(None, ge=0, le=100_000)
    max_mbps: float | None = Field(None, gt=0, le=100_000)
    period_s: float | None = Field(None, gt=0, le=86_400)
    buffer: Literal["default", "normal", "large"] | int | None = None
    storage: Literal["memory", "disk"] = "memory"
    clients: int = Field(1, ge=1, le=64)             # nfs: concurrent copies
    file_bytes: int | None = Field(None, gt=0)       # nfs, gridftp disk: size of each file moved
    options: dict[str, int | float | str | bool] = {}   # tool-specific settings (docs/tools.md)

    _buffer = field_validator("buffer", mode="before")(classmethod(lambda cls, v: check_buffer(v)))

    _known_tool = field_validator("tool")(_registered(TOOLS))
    _known_pattern = field_validator("pattern")(_registered(PATTERNS))

    @model_validator(mode="before")
    @classmethod
    def _protocol_from_tool(cls, data):
        """A tool's first transport is the default: `tool = "udt"` needs no `protocol = "udp"`."""
        if isinstance(data, dict) and "protocol" not in data:
            name = data.get("tool", "iperf3")
            # a tool that is not a name (a table, a list) is the tool field's error, not a lookup's
            tool = TOOLS.get(name) if isinstance(name, str) else None
            if tool is not None:
                data = {**data, "protocol": tool.rules.transports[0]}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if (self.duration_s is None) == (self.bytes is None):
            raise ValueError("give exactly one of duration_s or bytes")
        problem = pattern_problem(self)
        if problem:
            raise ValueError(problem)
        problem = tool_problem(self)
        if problem:
            raise ValueError(problem)
        return self


# Flow keys that only some tools read (each tool lists its own in FlowRules.flow_fields).
TOOL_FIELDS = ("clients", "storage", "file_bytes")


def _tools_with(test, quoted: bool = False) -> str:
    names = [repr(n) if quoted else n for n, tool in TOOLS.items() if test(tool.rules)]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names) or "no tool"


def tool_problem(flow: Flow) -> str | None:
    """What the flow's tool refuses of it (drivers' FlowRules), or None."""
    tool = TOOLS[flow.tool]
    rules = tool.rules
    if flow.protocol not in rules.transports:
        return f"tool {flow.tool!r} carries {' or '.join(rules.transports)}, not {flow.protocol}"
    if PATTERNS[flow.pattern].in_burst and flow.pattern not in rules.in_burst_shapes:
        return (f"pattern {flow.pattern!r} changes the rate within a burst: only "
                f"{_tools_with(lambda r: flow.pattern in r.in_burst_shapes, quoted=True)} can")
    rated = flow.protocol == "udp" and rules.declared_rate and flow.pattern not in rules.in_burst_shapes
    if rated and flow.udp_rate_mbps is None:
        return f"a UDP flow of {flow.tool} needs udp_rate_mbps"
    if not rated and flow.udp_rate_mbps is not None:
        return f"udp_rate_mbps is only for UDP flows of {_tools_with(lambda r: r.declared_rate)}"
    if flow.streams != 1 and not rules.multi_stream:
        return f"tool {flow.tool!r} runs one stream per flow (use more flows)"
    for key in TOOL_FIELDS:
        value = getattr(flow, key)
        if value != Flow.model_fields[key].default and key not in rules.flow_fields:
            return f"{key} {value!r} is for {_tools_with(lambda r, key=key: key in r.flow_fields)}"
    unknown = sorted(set(flow.options) - set(tool.option_keys))
    if unknown:
        return (f"options {unknown} are not settings of {flow.tool}; it takes: "
                f"{', '.join(tool.option_keys) or 'none'}")
    return rules.check(flow) if rules.check else None


class Cell(Strict):
    """One point of a sweep: everything needed to build the lab and run the flows."""

    topology: Topology = Topology()
    tuning: Tuning = Tuning()
    probe: Probe = Probe()
    flows: list[Flow] = []

    def cross_field_problems(self) -> list[tuple[tuple, object, str]]:
        """(key path, value, what is allowed) for what single fields cannot check alone."""
        problems = []
        seen = set()
        for index, flow in enumerate(self.flows):
            if flow.name in seen:
                problems.append((("flows", index, "name"), flow.name, "flow names must be unique"))
            seen.add(flow.name)
            if flow.pair > self.topology.pairs:
                problems.append((("flows", index, "pair"), flow.pair, f"a pair from 1 to topology.pairs = {self.topology.pairs}"))
        if not self.flows and self.probe.duration_s is None:
            problems.append((("flows",), None, "at least one flow, or probe.duration_s for a cell that only probes"))
        if self.probe.pair > self.topology.pairs:
            problems.append((("probe", "pair"), self.probe.pair, f"a pair from 1 to topology.pairs = {self.topology.pairs}"))
        return problems

    def flow_cca(self, flow: Flow) -> str:
        return flow.cca or self.tuning.cca

    def flow_buffer(self, flow: Flow):
        return flow.buffer if flow.buffer is not None else self.tuning.buffer
