"""The one shape every traffic tool's driver has, so the trial runs any of them the same way.

A flow is a sequence of bursts (drivers/patterns.py). For each burst the trial asks the driver
for a receiver-side process (`server`), waits until `ready` says it listens, starts the sender
(`client`) at the burst's time on the flow's sender host, and after the trial hands both outputs
to `parse`. Drivers are pure: they build argv lists and parse text; executors run them on a
namespace, the local machine or an SSH host alike.

`shared_servers`: iperf3's server serves test after test, so a flow's bursts rotate over a few
long-lived servers; other tools start one receiver per burst.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from longhaul.drivers.result import Result


@dataclass(frozen=True)
class Shape:
    """A rate that changes within one burst (paced sources only). kind: 'sinusoid' is seed 002's
    f(t) = Avg*cos(t/c) + Min + Avg with Avg = (max - min)/2 and c = period / (2 pi)."""
    kind: str
    min_mbps: float
    max_mbps: float
    period_s: float


@dataclass(frozen=True)
class FlowRules:
    """What a tool accepts of a flow declaration; the config schema applies these for every tool
    alike, so adding a tool never touches the schema.

    transports: what it carries; the first is the protocol a flow of this tool gets by default.
    declared_rate: a UDP flow of it paces to a declared `udp_rate_mbps` (otherwise it sets its own
        pace: UDT's rate control, line rate, TCP).
    multi_stream: one flow may run several `streams`.
    in_burst_shapes: patterns whose rate changes within one burst, which only a paced source
        (paced-udp, or TRex stepping it) can follow ("sinusoid").
    flow_fields: the tool-specific flow keys it reads (`clients`, `storage`, `file_bytes`); any
        other tool refuses them when they differ from their defaults.
    check: the tool's own rules on a whole flow: returns what is wrong, or None.
    """
    transports: tuple[str, ...]
    declared_rate: bool = False
    multi_stream: bool = False
    in_burst_shapes: tuple[str, ...] = ()
    flow_fields: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None


@dataclass(frozen=True)
class BurstSpec:
    receiver: str                   # the receiver host's name, resolvable on the sender ("D1")
    port: int                       # the port this burst's receiver listens on
    duration_s: float | None        # exactly one of duration_s and bytes
    bytes: int | None
    protocol: str = "tcp"
    streams: int = 1
    cca: str | None = None
    window_bytes: int | None = None
    rate_mbps: float | None = None  # declared rate of a UDP or paced flow (total over streams)
    shape: Shape | None = None
    storage: str = "memory"         # 'memory' or 'disk' for file-moving tools
    workdir: PurePosixPath = PurePosixPath("/tmp")   # scratch space on both hosts for this burst
    options: dict = field(default_factory=dict)      # tool-specific keys of the flow


@dataclass(frozen=True)
class ServerSpec:
    argv: list[str]
    ready: list[str]                # argv run on the receiver; non-empty stdout means ready
    cleanup: list[list[str]] = field(default_factory=list)   # argv to run after it stopped


class Tool(Protocol):
    """What the trial reads of a driver. The attributes are read-only here, so that a driver
    declares them as plain class attributes of narrower types (executables = ("iperf3",))."""

    @property
    def name(self) -> str: ...
    @property
    def executables(self) -> tuple[str, ...]:
        """Needed on both hosts (preflight and `longhaul check` look)."""
    @property
    def shared_servers(self) -> bool: ...
    @property
    def sets_cca(self) -> bool:
        """False: the trial gives its TCP sockets the CCA (drivers/ccashim.py)."""
    @property
    def counts_arrivals(self) -> bool:
        """True: its receiver is a kernel counter of what arrived (ifrate), whose seconds are kept;
        else the trial measures arrivals (appliance/run/trial/summary.py)."""
    @property
    def needs_link_facts(self) -> bool:
        """True: options carry the lab's iface/MAC/addresses (layer-2 tools)."""
    @property
    def sends_from(self) -> str:
        """"sender": the pair's S host; "generator": the lab's traffic generator (TRex), which only
        some labs have (Backend.has_generator)."""
    @property
    def resolves_own_address(self) -> bool:
        """Its server looks up the receiver's test address (GridFTP): real hosts must resolve it
        (/etc/hosts or DNS), checked by preflight."""
    @property
    def option_keys(self) -> tuple[str, ...]:
        """The keys a flow's `options` table may set for this tool."""
    @property
    def setup_round_trips(self) -> int:
        """Round trips from its client's start to its first data byte, besides one connect per
        stream: the trial launches a burst that early."""
    @property
    def start_allowance_s(self) -> float:
        """Seconds its client may spend starting before its burst's own time begins (testpmd's
        EAL and port set-up): the trial's deadline allows them."""
    @property
    def rules(self) -> FlowRules:
        """What a flow declaration of this tool may say."""

    def prepare(self, spec: BurstSpec) -> tuple[list[list[str]], list[list[str]]]:
        """(argv to run on the sender before the trial's clock starts, argv to run after it):
        what must not be timed, such as writing a disk transfer's source file."""
        ...
    def server(self, spec: BurstSpec) -> ServerSpec | None: ...
    def client(self, spec: BurstSpec) -> list[str]: ...
    def parse(self, client_text: str, server_text: str, spec: BurstSpec) -> Result: ...


def listening(port: int, protocol: str = "tcp") -> list[str]:
    """Readiness argv: `ss` prints a line once something listens on the port."""
    return ["ss", "-lnH" + ("u" if protocol == "udp" else "t"), "sport", "=", f":{port}"]


LISTENING_TCP = ["ss", "-lntH"]     # every listening TCP socket: one command for many servers


def listening_ports(text: str) -> set[int]:
    """The local ports of `ss -lntH` lines (State Recv-Q Send-Q Local:Port Peer:Port)."""
    ports = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3].rpartition(":")[2].isdigit():
            ports.add(int(fields[3].rpartition(":")[2]))
    return ports
