"""The embedded lab as a backend: network namespaces on this machine, one lab per topology."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rich.table import Table

from longhaul.core.errors import PreflightError
from longhaul.core.model import Strict
from longhaul.hardware.backends.base import LabNeeds, LabSpec, Readiness, RunContext
from longhaul.hardware.backends.netns import leftovers
from longhaul.hardware.backends.netns.features import Features, detect
from longhaul.hardware.backends.netns.lab import NetnsLab
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.topology import dumbbell


class NetnsSettings(Strict):
    """[lab] backend = "netns" takes no other keys."""


class NetnsSession:
    runs_tools_here = True

    def __init__(self, features: Features, procs):
        self.features = features
        self.congestion_controls = features.congestion_controls
        self._procs = procs

    def lab(self, spec: LabSpec, tag: str, cleanup: CleanupStack, workdir: Path) -> NetnsLab:
        topo = dumbbell(tag, spec.pairs, spec.access_rate_mbps, spec.bottleneck_rate_mbps, spec.mtu)
        return NetnsLab(topo, spec.link, self.features, self._procs, cleanup, workdir)


def preflight() -> Features:
    features = detect(delayline.helper_path())
    problems = features.problems()
    if problems:
        raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
    return features


class NetnsBackend:
    name = "netns"
    settings = NetnsSettings

    def configure(self, settings: NetnsSettings, config_dir: Path) -> NetnsSettings:
        return settings

    def has_generator(self, configured) -> bool:
        return False            # TRex needs DPDK-bound NICs, which namespaces do not have

    def check(self, configured, needs: LabNeeds, console) -> Readiness:
        features = detect(delayline.helper_path())
        console.print(preflight_table(features))
        problems = features.problems()
        if problems:
            raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
        return Readiness(True, runs_tools_here=True, congestion_controls=features.congestion_controls)

    @contextmanager
    def session(self, configured, needs: LabNeeds, ctx: RunContext):
        features = preflight()
        # the marker names this run's namespaces, so `longhaul clean` knows whose they are
        leftovers.register(ctx.tag, ctx.run_dir, ctx.procs)
        try:
            yield NetnsSession(features, ctx.procs)
        finally:
            leftovers.unregister(ctx.tag, ctx.procs)


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
    table.add_row("delay will come from", "netem" if features.netem else "userspace delay line (NFQUEUE)")
    return table
