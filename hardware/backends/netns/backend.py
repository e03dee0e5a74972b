"""The embedded lab as a backend: network namespaces on this machine, one lab per topology."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rich.table import Table

from longhaul.core.errors import PreflightError
from longhaul.core.model import Strict
from longhaul.hardware import bpf_ccas, run_marker, tcp_mem
from longhaul.hardware.backends.base import LabNeeds, LabSpec, Readiness, RunContext
from longhaul.hardware.backends.netns import leftovers as netns_leftovers
from longhaul.hardware.backends.netns.features import Features, detect, load_modules
from longhaul.hardware.backends.netns.lab import NetnsLab
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.generator import TrexSection, configured_tree
from longhaul.hardware.topology import dumbbell


class NetnsSettings(Strict):
    """[lab] backend = "netns": a TRex release tree ([lab.trex]) gives the lab a generator."""
    trex: TrexSection | None = None


class NetnsSession:
    runs_tools_here = True

    def __init__(self, features: Features, procs, trex: TrexSection | None = None,
                 bpf: bpf_ccas.Holding | None = None, ccas: tuple[str, ...] = (), fallback: tuple[str, ...] = (),
                 tuning: dict | None = None):
        """bpf, ccas: the run's hold on BPF congestion controls, and the algorithms its cells name
        (the BPF ones among them are registered when the first lab is built); fallback: those
        whose BPF version may stand in, registered where this kernel lacks them; tuning: what the
        session changed on this machine (tcp_mem), every lab's record for the manifest."""
        self.features = features
        self.congestion_controls = features.runnable_ccas
        self._procs = procs
        self._trex = trex
        self._bpf = bpf
        self._ccas = ccas + tuple(bpf_ccas.stand_in(c) or c for c in fallback
                                  if c not in features.congestion_controls)
        self._tuning = tuning

    def lab(self, spec: LabSpec, tag: str, cleanup: CleanupStack, workdir: Path) -> NetnsLab:
        if self._bpf is not None:
            self._bpf.ensure(c for c in self._ccas if c in self.features.bpf_ccas)
        topo = dumbbell(tag, spec.pairs, spec.access_rate_mbps, spec.bottleneck_rate_mbps, spec.mtu,
                        generator=self._trex is not None)
        return NetnsLab(topo, spec.link, self.features, self._procs, cleanup, workdir, trex=self._trex,
                        record=self._tuning)


def preflight() -> Features:
    features = detect(delayline.helper_path())
    problems = features.problems()
    if problems:
        raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
    return features


class NetnsBackend:
    name = "netns"
    settings = NetnsSettings
    generator_how = "[lab.trex] path = a TRex release tree on this machine"

    def configure(self, settings: NetnsSettings, config_dir: Path) -> NetnsSettings:
        return settings.model_copy(update={"trex": configured_tree(settings.trex, config_dir)})

    def has_generator(self, configured: NetnsSettings) -> bool:
        return configured.trex is not None      # TRex on the generator namespace's veth (af_packet)

    def leftovers(self, remove: bool) -> list[str]:
        return netns_leftovers.leftovers(remove) + tcp_mem.leftovers(remove)

    def check(self, configured, needs: LabNeeds, console) -> Readiness:
        features = detect(delayline.helper_path())
        console.print(preflight_table(features))
        problems = features.problems()
        if problems:
            raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
        return Readiness(True, runs_tools_here=True, congestion_controls=features.runnable_ccas)

    @contextmanager
    def session(self, configured, needs: LabNeeds, ctx: RunContext):
        features = preflight()
        try:
            features = load_modules(features, needs.ccas)
        except RuntimeError as exc:
            raise PreflightError(f"preflight failed: {exc}") from None
        # the marker names this run's namespaces, so `longhaul clean` knows whose they are
        # every namespace's sockets draw on this kernel's one tcp_mem (hardware/tcp_mem.py)
        with run_marker.marked(ctx.tag, ctx.run_dir, ctx.procs), bpf_ccas.held(ctx.tag) as bpf, \
                tcp_mem.held(ctx.tag, needs.socket_bytes) as memory:
            yield NetnsSession(features, ctx.procs, configured.trex, bpf, needs.ccas, needs.bpf_fallback,
                               memory.record(ctx.tag) if memory else None)


def preflight_table(features: Features) -> Table:
    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    table = Table(title="preflight")
    table.add_column("check")
    table.add_column("result")
    table.add_row("root", yes(features.root))
    for tool, path in features.tools.items():
        table.add_row(tool, path or "[red]missing[/red]")
    table.add_row("netem", yes(features.netem))
    table.add_row("tbf / htb", f"{yes(features.tbf)} / {yes(features.htb)}")
    table.add_row("iptables NFQUEUE", yes(features.nfqueue))
    table.add_row("delay-line helper", features.delayline or "[red]not built[/red]")
    table.add_row("congestion controls", " ".join(features.congestion_controls))
    table.add_row("loadable (a run loads those it names)", " ".join(features.loadable_ccas) or "none")
    table.add_row("BPF congestion controls", " ".join(features.bpf_ccas) or bpf_ccas.unavailable_reason() or "none built")
    table.add_row("delay will come from", "netem" if features.netem else "userspace delay line (NFQUEUE)")
    return table
