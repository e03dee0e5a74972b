"""The lab backend contract: how a run gets hosts, builds labs on them and tears them down.

A backend (netns: namespaces on this machine; ssh: real hosts named by an inventory; qemu: the
appliance image booted as VMs, then driven as ssh) is one object in `BACKENDS` with:

- `name` and `settings`: the pydantic model of its own keys under `[lab]` in config.toml, validated
  with file:line errors like every other key, then `configure(settings, config_dir)` resolves them
  (paths checked, files parsed) before anything is set up; problems raise SettingError.
- `check(configured, needs, console)`: what `longhaul check` shows for this backend (printed on
  the console) and its Readiness; it builds nothing and boots nothing.
- `session(configured, needs, ctx)`: a context manager for one run. Entering it runs the preflight
  (raises PreflightError, nothing set up) and whatever the backend needs for the run's lifetime
  (VMs booted, a run marker); the Session it yields builds a `Lab` per topology. Leaving it tears
  everything down, whatever happened.

A `Lab` is built from a backend-neutral `LabSpec` (pairs, rates, RTT, queue, end-host tuning) onto
the lab names S1..Sn, R1, R2, D1..Dn; the runner, trial and verification see only this interface.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import Executor, ProcessTable
from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.linux_tc import DirectionShape
from longhaul.hardware.topology import Dumbbell


@dataclass(frozen=True)
class LinkSettings:
    """What a cell asks of the bottleneck and the end hosts."""

    rtt_ms: float
    queue_bytes: int
    cca: str
    buffer: object
    offloads: tuple[tuple[str, bool], ...] = ()     # [tuning] offloads, sorted (name, on) pairs


@dataclass(frozen=True)
class LabSpec:
    """One lab to build, in backend-neutral terms: no namespace, machine or interface names."""

    pairs: int
    access_rate_mbps: float
    bottleneck_rate_mbps: float
    mtu: int
    link: LinkSettings


@dataclass(frozen=True)
class LabNeeds:
    """What a run asks of its backend, gathered from all its cells before anything starts."""

    pairs: int                                  # the most pairs any cell uses
    tools: tuple[str, ...] = ()                 # driver names of every flow (drivers/registry.py)
    ccas: tuple[str, ...] = ()                  # congestion controls of every TCP flow
    executables: tuple[str, ...] = ()           # the programs those tools run on the lab's hosts
    # tools whose server looks up the receiver's own test address (Tool.resolves_own_address)
    resolving_tools: tuple[str, ...] = ()
    generator: bool = False                     # a flow sends from the lab's traffic generator
    # those of them a cell lets run as their BPF version where the kernel lacks them (cca_fallback)
    bpf_fallback: tuple[str, ...] = ()
    # the most socket memory one cell's TCP flows may hold, senders and receivers together (their
    # streams times their buffer limit, twice): what one kernel holds for a lab of namespaces
    socket_bytes: int = 0


@dataclass
class RunContext:
    """What the runner lends a backend session."""

    tag: str                                    # names this run's objects (namespaces, VMs)
    run_dir: Path                               # the run store's directory (created by the runner)
    lab_dir: Path                               # where in it a backend keeps its files (VM consoles)
    procs: ProcessTable                         # every process started is recorded here
    say: Callable[[str], None] = print          # progress messages for the terminal


@dataclass(frozen=True)
class Step:
    host: str | None      # a lab host, or None: run on this machine, outside the lab
    argv: list[str]


@dataclass(frozen=True)
class Readiness:
    """What `longhaul check` learnt from a backend without building anything."""

    ready: bool
    runs_tools_here: bool = False                    # as Session.runs_tools_here
    congestion_controls: tuple[str, ...] | None = None   # as Session.congestion_controls




class Lab(Protocol):
    topo: Dumbbell
    settings: LinkSettings
    record: dict | None       # what was changed on hosts that are not the lab's own (manifest host_tuning)

    def executor(self, host: str) -> Executor: ...
    def address(self, host: str) -> str: ...
    def pair_facts(self, pair: int) -> dict: ...
    # where the generator sends pair `pair`'s traffic from, and where it is met (only labs with one)
    def generator_facts(self, pair: int) -> dict: ...
    def router_os(self, host: str) -> RouterOS: ...
    def build(self) -> None: ...
    # a cell on the same path that differs only in its end hosts' tuning (congestion control,
    # buffers) takes the standing lab where its sysctls rewrite every key the last cell's wrote:
    # True when done, False when the lab must be built anew
    def retune(self, settings: LinkSettings) -> bool: ...


def same_path(a: LinkSettings, b: LinkSettings) -> bool:
    """Two cells' settings differ at most in what the end hosts are told (the path is the same)."""
    return (a.rtt_ms, a.queue_bytes, a.offloads) == (b.rtt_ms, b.queue_bytes, b.offloads)


class Session(Protocol):
    features: Any                               # as_dict() for the manifest; .delay for the terminal
    runs_tools_here: bool                       # the flows' programs run on this machine (checked here)
    congestion_controls: tuple[str, ...] | None  # what end hosts offer; None: the preflight checked them

    def lab(self, spec: LabSpec, tag: str, cleanup: CleanupStack, workdir: Path) -> Lab: ...


class Backend(Protocol):
    name: str
    settings: type[BaseModel]

    def configure(self, settings: BaseModel, config_dir: Path) -> Any: ...
    # a traffic generator host (GENERATOR) for flows whose tool sends from one: known before any
    # lab is touched, so such a flow is refused at its profile line where there is none, saying
    # what would give this backend's labs one (generator_how)
    generator_how: str
    def has_generator(self, configured: Any) -> bool: ...
    def check(self, configured: Any, needs: LabNeeds, console) -> Readiness: ...
    # what runs of this backend killed without a teardown left on this machine besides their
    # processes (hardware/run_marker.py ends those): namespaces, files; removed when asked
    def leftovers(self, remove: bool) -> list[str]: ...
    def session(self, configured: Any, needs: LabNeeds, ctx: RunContext) -> AbstractContextManager[Session]: ...


def bottleneck_shapes(topo: Dumbbell, settings: LinkSettings) -> list[tuple[DirectionShape, str]]:
    """Each direction's shaping of the bottleneck, with the router that applies it: half the RTT
    of delay each way, the rate and the queue on both routers' bottleneck ports."""
    link = topo.bottleneck()
    one_way = settings.rtt_ms / 2
    return [(DirectionShape(port.ifname, link.rate_mbps, settings.queue_bytes, one_way, topo.mtu), port.host)
            for port in (link.a, link.b)]
