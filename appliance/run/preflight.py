"""What a run needs of its lab, and whether the lab offers it: checked before anything is set up,
with errors at the profile line that asked for it."""

from __future__ import annotations

import shutil
from dataclasses import replace

from longhaul.appliance.config.load import Config
from longhaul.collectors.live import telegraf
from longhaul.collectors.store.format import CCA_STAND_INS
from longhaul.core.errors import ConfigError
from longhaul.core.tomlsource import load as load_toml
from longhaul.drivers import ccashim
from longhaul.drivers.registry import tool_for
from longhaul.hardware import bpf_ccas
from longhaul.hardware.backends.base import LabNeeds
from longhaul.hardware.tuning import buffer_limit


def needs_of(config: Config) -> LabNeeds:
    """Pairs, tools, congestion controls and programs of every cell of the chosen profiles."""
    tools: list[str] = []
    ccas: list[str] = []
    fallback: list[str] = []
    pairs = 1
    for profile in config.profiles:
        for spec in profile.cells:
            pairs = max(pairs, spec.cell.topology.pairs)
            for flow in spec.cell.flows:
                tools += [flow.tool] if flow.tool not in tools else []
                cca = spec.cell.flow_cca(flow)
                ccas += [cca] if flow.protocol == "tcp" and cca not in ccas else []
                if flow.protocol == "tcp" and spec.cell.tuning.cca_fallback == "bpf" and bpf_ccas.stand_in(cca):
                    fallback += [cca] if cca not in fallback else []
    executables = list(dict.fromkeys(exe for name in tools for exe in tool_for(name).executables))
    if any(flow.protocol == "udp" and not tool_for(flow.tool).counts_arrivals
           for profile in config.profiles for spec in profile.cells for flow in spec.cell.flows):
        executables.append("iptables")         # the trial's arrival meter on the receivers (collectors/live/arrival_meter.py)
    if any(spec.cell.tuning.offloads for profile in config.profiles for spec in profile.cells):
        executables.append("ethtool")          # hardware/offloads.py sets them on every lab host
    resolving = tuple(name for name in tools if tool_for(name).resolves_own_address)
    generator = any(tool_for(name).sends_from == "generator" for name in tools)
    socket_bytes = max((_socket_bytes(spec.cell) for profile in config.profiles for spec in profile.cells), default=0)
    return LabNeeds(pairs, tuple(tools), tuple(ccas), tuple(executables), resolving, generator, tuple(fallback),
                    socket_bytes)


def _socket_bytes(cell) -> int:
    """Each TCP flow's streams may each fill their buffer limit at the sender and at the receiver
    (a `default` buffer leaves the kernel's few MB: nothing to provide for)."""
    return sum(2 * flow.streams * (buffer_limit(cell.flow_buffer(flow)) or 0)
               for flow in cell.flows if flow.protocol == "tcp")


def with_fallbacks(config: Config, available: tuple[str, ...] | None) -> Config:
    """The config with every cca the lab lacks replaced by its BPF version, in cells whose tuning
    allows it (cca_fallback = "bpf") on a lab that can run that version (`available`: the lab's
    runnable congestion controls; None, a lab that checks its hosts itself, gets none). The cell's
    labels say what stood in for what, for the store and the report."""
    if available is None:
        return config
    profiles = []
    for profile in config.profiles:
        cells = []
        for spec in profile.cells:
            swap = _stand_ins(spec.cell, available)
            if swap:
                cell = spec.cell.model_copy(update={
                    "tuning": spec.cell.tuning.model_copy(update={"cca": swap.get(spec.cell.tuning.cca, spec.cell.tuning.cca)}),
                    "flows": [f.model_copy(update={"cca": swap[f.cca]}) if f.cca in swap else f for f in spec.cell.flows]})
                spec = replace(spec, cell=cell, labels={**spec.labels, CCA_STAND_INS: swap})
            cells.append(spec)
        profiles.append(replace(profile, cells=cells))
    return replace(config, profiles=profiles)


def _stand_ins(cell, available: tuple[str, ...]) -> dict[str, str]:
    if cell.tuning.cca_fallback != "bpf":
        return {}
    out = {}
    for flow in cell.flows:
        cca = cell.flow_cca(flow)
        bpf = bpf_ccas.stand_in(cca)
        if flow.protocol == "tcp" and cca not in available and bpf in available:
            out[cca] = bpf
    return out


def check_lab(config: Config, congestion_controls: tuple[str, ...] | None, runs_tools_here: bool) -> None:
    """The one preflight of a run (and of `longhaul check`) against the lab it got, before any
    cell: its congestion controls, every flow's tool (and, where the flows run on this machine,
    their programs and a Telegraf for `[store] influx`). A ConfigError at the profile line that
    asked for what is missing."""
    check_ccas(config, congestion_controls)
    check_tools(config, here=runs_tools_here, generator=config.backend.has_generator(config.lab))
    if runs_tools_here:
        check_telegraf(config)


def check_ccas(config: Config, available: tuple[str, ...] | None) -> None:
    """Every congestion control a cell uses must be available on the end hosts (None: the
    backend's own preflight has checked them on its hosts)."""
    if available is None:
        return
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                cca = spec.cell.flow_cca(flow)
                if flow.protocol == "tcp" and cca not in available:
                    why = f" ({bpf_ccas.missing_reason(cca)})" if cca in bpf_ccas.BPF_CCAS else ""
                    bpf = bpf_ccas.stand_in(cca)
                    if bpf and spec.cell.tuning.cca_fallback == "none" and bpf in available:
                        why += f" (tuning.cca_fallback = \"bpf\" runs longhaul's {bpf} instead)"
                    refuse_flow_key(profile, flow, "cca", cca,
                                    f"not available on this host{why}; available: {', '.join(available)}",
                                    fallback=("tuning", "cca"))


def check_tools(config: Config, here: bool = True, generator: bool = False) -> None:
    """Every flow's tool has a driver; a tool that sends from a traffic generator has one in the
    lab (`generator`); and where the flows run on this machine (`here`, the embedded lab) its
    programs are installed; real hosts are checked over SSH by their backend instead."""
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                tool = tool_for(flow.tool)
                if tool.sends_from == "generator" and not generator:
                    refuse_flow_key(profile, flow, "tool", flow.tool,
                                    f"a lab with a traffic generator; the {config.backend.name} lab has one "
                                    f"with {config.backend.generator_how}")
                if not here:
                    continue
                missing = [exe for exe in tool.executables if not shutil.which(exe)]
                if not tool.sets_cca and flow.protocol == "tcp" and not ccashim.library_path().exists():
                    missing.append(str(ccashim.library_path()))   # how the flow's CCA reaches its sockets
                if missing:
                    refuse_flow_key(profile, flow, "tool", flow.tool,
                                    f"needs {', '.join(missing)} installed (make setup installs them)")


def check_telegraf(config: Config) -> None:
    """`[store] influx` with Telegraf (its default) on lab hosts of this machine needs a Telegraf
    here: refused at the key's line, saying how to get one, before anything is set up."""
    influx = config.data.store.influx
    if influx is None or not influx.telegraf or telegraf.local_command() is not None:
        return
    key = ("store", "influx")
    raise ConfigError(config.path, load_toml(config.path).line_of(key), key, "telegraf = true",
                      f"a Telegraf on this machine for the lab hosts' telemetry, and there is none ({telegraf.INSTALL_HINT}); "
                      "or telegraf = false in [store] influx to ship the run's own points without it")


def refuse_flow_key(profile, flow, field: str, value, allowed: str, fallback: tuple | None = None):
    """ConfigError at the flow's own `field` line, else at `fallback` (a cell-wide key), else the flow."""
    source = load_toml(profile.path)
    names = [f.get("name") for f in source.data.get("flows", [])]
    index = names.index(flow.name) if flow.name in names else None
    candidates = [k for k in (("flows", index, field) if index is not None else None, fallback,
                              ("flows", index, "name") if index is not None else None) if k]
    key = next((k for k in candidates if k in source.lines), candidates[0] if candidates else ("flows",))
    raise ConfigError(profile.path, source.line_of(key), key, value, allowed)
