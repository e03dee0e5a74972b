"""The shape of one experiment cell, checked by pydantic: what a profile may say after sweeps expand.

Every model forbids unknown keys, so a typo is an error rather than a silently ignored setting.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..drivers.tools import tool_for

NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
BUFFER_NAMES = ("default", "normal", "large")

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
               "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(value) -> int:
    """A data size in bytes from an int or '2GB', '500MiB', '1e9'-free text such as '1500000000'."""
    match = _SIZE.match(str(value)) if not isinstance(value, bool) else None
    unit = match.group(2).lower() if match else None
    if unit not in _SIZE_UNITS:
        raise ValueError("bytes (2000000000) or a size with unit (2GB, 500MiB)")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError("a size above zero")
    return size


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_queue(value, bdp_bytes: float, mtu: int) -> int:
    """Queue size in bytes from bytes (int), '6MB', '400p' (packets of one MTU) or '1.0bdp'."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError("bytes (6000000), a size with unit (6MB, 4MiB), packets (400p) or a BDP multiple (1bdp)")
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit in ("p", "pkt", "pkts", "packets"):
            size = number * mtu
        elif unit == "bdp":
            size = number * bdp_bytes
        elif unit in _SIZE_UNITS:
            size = number * _SIZE_UNITS[unit]
        else:
            raise ValueError(f"unknown unit {unit!r}: use B, KB, MB, GB, KiB, MiB, GiB, p or bdp")
    size = int(size)
    if size < 2 * mtu:
        raise ValueError(f"the queue must hold at least two packets ({2 * mtu} bytes)")
    return size


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
        if None in (rate, rtt, mtu):
            parse_queue(value, bdp_bytes=1e12, mtu=576)  # another field is already wrong: units only
        else:
            parse_queue(value, rate * 1e6 / 8 * rtt / 1e3, mtu)
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
    buffer: Literal["default", "normal", "large"] | int = "large"

    _buffer = field_validator("buffer", mode="before")(classmethod(lambda cls, v: check_buffer(v)))


class Probe(Strict):
    pair: int = Field(1, ge=1, le=16)
    mode: Literal["burst", "interval"] = "burst"
    interval_ms: float = Field(10.0, ge=1, le=1000)


# What each traffic tool carries (drivers/): its transport, and whether it paces to a declared rate.
TOOL_PROTOCOLS = {"iperf3": ("tcp", "udp"), "gridftp": ("tcp",), "nfs": ("tcp",), "udt": ("udp",),
                  "paced-udp": ("udp",), "dpdk": ("udp",), "trex": ("udp",)}
# Tools that set their own pace (UDT's rate control, line rate) and take no declared rate.
UNRATED_TOOLS = ("udt", "dpdk", "gridftp", "nfs")


class Flow(Strict):
    name: str = Field(pattern=NAME)
    role: Literal["foreground", "background"]
    tool: Literal["iperf3", "gridftp", "udt", "nfs", "paced-udp", "dpdk", "trex"] = "iperf3"
    pair: int = Field(1, ge=1, le=16)
    protocol: Literal["tcp", "udp"] = "tcp"
    cca: str | None = Field(None, pattern=r"^[a-z0-9_]+$")
    streams: int = Field(1, ge=1, le=128)
    duration_s: float | None = Field(None, gt=0, le=86_400)
    bytes: int | None = Field(None, gt=0)
    start_s: float = Field(0.0, ge=0, le=86_400)
    pattern: Literal["constant", "square", "bursty", "sinusoid"] = "constant"
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

    @model_validator(mode="before")
    @classmethod
    def _protocol_from_tool(cls, data):
        """A tool with one transport implies it: `tool = "udt"` needs no `protocol = "udp"`."""
        if isinstance(data, dict) and "protocol" not in data:
            protocols = TOOL_PROTOCOLS.get(data.get("tool", "iperf3"))
            if protocols:
                data = {**data, "protocol": protocols[0]}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if (self.duration_s is None) == (self.bytes is None):
            raise ValueError("give exactly one of duration_s or bytes")
        if self.protocol not in TOOL_PROTOCOLS[self.tool]:
            raise ValueError(f"tool {self.tool!r} carries {' or '.join(TOOL_PROTOCOLS[self.tool])}, not {self.protocol}")
        if self.pattern == "square" and (self.on_s is None or self.off_s is None):
            raise ValueError("pattern 'square' needs on_s and off_s")
        if self.pattern == "bursty":
            if self.burst_s is None or self.every_s is None:
                raise ValueError("pattern 'bursty' (UDP(x, y) of seed 000) needs burst_s (x) and every_s (y)")
            if self.burst_s >= self.every_s:
                raise ValueError("burst_s must be shorter than every_s")
        if self.pattern != "constant" and self.bytes is not None:
            raise ValueError("a square, bursty or sinusoid flow is timed: use duration_s, not bytes")
        sinusoid = (self.min_mbps, self.max_mbps, self.period_s)
        if self.pattern == "sinusoid":
            if self.tool != "paced-udp":
                raise ValueError("pattern 'sinusoid' changes the rate within a burst: only tool 'paced-udp' can")
            if None in sinusoid or self.udp_rate_mbps is not None:
                raise ValueError("pattern 'sinusoid' needs min_mbps, max_mbps and period_s (and no udp_rate_mbps)")
            if self.min_mbps >= self.max_mbps:
                raise ValueError("min_mbps must be below max_mbps")
        elif sinusoid != (None, None, None):
            raise ValueError("min_mbps, max_mbps and period_s are for pattern 'sinusoid'")
        rated = self.protocol == "udp" and self.tool not in UNRATED_TOOLS and self.pattern != "sinusoid"
        if rated and self.udp_rate_mbps is None:
            raise ValueError(f"a UDP flow of {self.tool} needs udp_rate_mbps")
        if not rated and self.udp_rate_mbps is not None:
            raise ValueError("udp_rate_mbps is only for UDP flows of iperf3, paced-udp and trex")
        if self.tool != "nfs" and self.clients != 1:
            raise ValueError("clients is for tool 'nfs'")
        if self.storage == "disk" and self.tool != "gridftp":
            raise ValueError("storage 'disk' is for gridftp (nfs copies from a memory-backed file)")
        if self.file_bytes is not None and self.tool not in ("nfs", "gridftp"):
            raise ValueError("file_bytes is for tools that move files: nfs, gridftp (with storage 'disk')")
        file_tool = self.tool == "nfs" or (self.tool == "gridftp" and self.storage == "disk")
        if file_tool and self.file_bytes is None and self.bytes is None:
            raise ValueError("a timed file transfer needs file_bytes (the size of each file it moves)")
        allowed = tool_for(self.tool).option_keys
        unknown = sorted(set(self.options) - set(allowed))
        if unknown:
            raise ValueError(f"options {unknown} are not settings of {self.tool}; it takes: "
                             f"{', '.join(allowed) or 'none'}")
        if self.tool in ("udt", "paced-udp", "dpdk", "trex", "nfs") and self.streams != 1:
            raise ValueError(f"tool {self.tool!r} runs one stream per flow (use more flows)")
        return self


class Cell(Strict):
    """One point of a sweep: everything needed to build the lab and run the flows."""

    topology: Topology = Topology()
    tuning: Tuning = Tuning()
    probe: Probe = Probe()
    flows: list[Flow] = Field(min_length=1)

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
        if self.probe.pair > self.topology.pairs:
            problems.append((("probe", "pair"), self.probe.pair, f"a pair from 1 to topology.pairs = {self.topology.pairs}"))
        return problems

    def flow_cca(self, flow: Flow) -> str:
        return flow.cca or self.tuning.cca

    def flow_buffer(self, flow: Flow):
        return flow.buffer if flow.buffer is not None else self.tuning.buffer
