"""Real, already-wired hosts named by an inventory, driven over SSH (docs/hardware.md)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from longhaul.core.errors import ConfigError, PreflightError, SettingError
from longhaul.core.model import Strict
from longhaul.hardware import run_marker
from longhaul.hardware.backends.base import LabNeeds, LabSpec, Readiness, RunContext
from longhaul.hardware.backends.ssh import lab as hosts_lab
from longhaul.hardware.backends.ssh import undo as undo_journal
from longhaul.hardware.backends.ssh.bpf_holds import BpfHolds, bpf_names
from longhaul.hardware.backends.ssh.check import check_inventory, wants
from longhaul.hardware.backends.ssh.inventory import Inventory, inventory_path, load_inventory
from longhaul.hardware.backends.ssh.preflight import HostsFeatures, preflight
from longhaul.hardware.backends.ssh.undo import UndoJournal
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import ProcessTable
from longhaul.hardware.executors.ssh_masters import MASTERS
from longhaul.hardware.topology import GENERATOR

log = logging.getLogger(__name__)


class SshSettings(Strict):
    inventory: str | None = None     # a name (hardware/<name>.toml beside config.toml) or a path to a .toml


@dataclass(frozen=True)
class SshConfigured:
    inventory_path: Path


class SshSession:
    runs_tools_here = False          # the programs are checked on the hosts by the preflight

    def __init__(self, inventory: Inventory, features: HostsFeatures, procs, backend: str, compensate_path: bool = True,
                 ccas: tuple[str, ...] = (), undo: UndoJournal | None = None):
        """ccas: the congestion controls the run's cells name; the BPF ones, and the BPF versions of
        those a sender lacks where cells allow it (features.stand_ins), are held on the end hosts
        (bpf_holds.py)"""
        self.inventory, self.features, self._procs, self._backend = inventory, features, procs, backend
        self._compensate_path = compensate_path
        self._undo = undo
        stand_ins = features.stand_ins
        self.bpf = BpfHolds(bpf_names(ccas) + tuple(stand_ins.values()))
        # the preflight checked the hosts for every cca (None); with stand-ins, what runs instead of
        # what, for the runner's with_fallbacks and its check of cells that do not allow them
        self.congestion_controls = (tuple(c for c in ccas if c not in stand_ins) + tuple(stand_ins.values())
                                    if stand_ins else None)

    def lab(self, spec: LabSpec, tag: str, cleanup: CleanupStack, workdir: Path) -> hosts_lab.HostsLab:
        topo, names = hosts_lab.inventory_dumbbell(self.inventory, tag, spec.pairs, spec.bottleneck_rate_mbps,
                                                   spec.mtu)
        generator = self.inventory.generator()
        if generator is not None and generator.name in self.features.hosts:   # checked: the run needs it
            names[GENERATOR] = generator.name
        lab = hosts_lab.HostsLab(self.inventory, topo, names, spec.link, self.features, self._procs, cleanup,
                                 workdir, backend=self._backend, compensate_path=self._compensate_path, undo=self._undo)
        ends = {names[h.name]: lab.executor(h.name) for h in topo.hosts if h.role in ("sender", "receiver")}
        self.bpf.ensure(ends, Path(workdir))
        if self.bpf.names:
            lab.record["bpf_ccas"] = self.bpf.record(ends)
        # the hosts may not be as found after a failed teardown: say so loudly, not only in the record
        cleanup.push("report hosts not restored", lambda: _say_restored(lab.record))
        return lab


def _say_restored(record: dict) -> None:
    if record.get("not_restored"):
        log.error("real hosts not as found: %s", "; ".join(record["not_restored"]))


def open_session(inventory_path: Path, needs: LabNeeds, procs: ProcessTable, backend: str,
                 compensate_path: bool = True, undo: UndoJournal | None = None) -> SshSession:
    """Preflight the machines this run uses (longhaul check --inventory's checks and the facts the
    plans need); PreflightError names every failed check. compensate_path, undo: as HostsLab's."""
    inventory = load_inventory(inventory_path)
    try:
        features = preflight(inventory, inventory_path, needs.pairs, wants(needs), generator=needs.generator)
    except RuntimeError as exc:
        raise PreflightError(f"preflight failed: {exc}") from None
    features.backend = backend           # the manifest says which backend drove these hosts
    return SshSession(inventory, features, procs, backend, compensate_path, tuple(needs.ccas), undo)


class SshBackend:
    name = "ssh"
    settings = SshSettings
    generator_how = "an inventory host with role = 'generator', its trex_path and DPDK ports"

    def configure(self, settings: SshSettings, config_dir: Path) -> SshConfigured:
        """The inventory, validated now so that a bad one stops the run before anything starts."""
        if settings.inventory is None:
            raise SettingError(("backend",), self.name,
                               "'ssh' needs [lab] inventory = \"<name>\" (hardware/<name>.toml) or a path to one")
        if "/" in settings.inventory or settings.inventory.endswith(".toml"):
            found = (config_dir / settings.inventory).resolve()
        else:
            try:
                found = inventory_path(settings.inventory, config_dir).resolve()
            except ConfigError as exc:
                raise SettingError(("inventory",), settings.inventory, exc.allowed) from None
        if not found.is_file():
            raise SettingError(("inventory",), settings.inventory, f"an inventory file ({found} does not exist)")
        load_inventory(found)                 # its own errors name its own file and line
        return SshConfigured(found)

    def has_generator(self, configured: SshConfigured) -> bool:
        return load_inventory(configured.inventory_path).generator() is not None

    def check(self, configured: SshConfigured, needs: LabNeeds, console) -> Readiness:
        if check_inventory(configured.inventory_path, needs, console) != 0:
            return Readiness(False)
        session = open_session(configured.inventory_path, needs, ProcessTable(), self.name)
        return Readiness(True, congestion_controls=session.congestion_controls)

    def leftovers(self, remove: bool) -> list[str]:
        # its ssh clients are the run's process journal's (ending one ends its remote group); what
        # it changed on the hosts is its undo journal's
        return undo_journal.leftovers(remove)

    @contextmanager
    def session(self, configured: SshConfigured, needs: LabNeeds, ctx: RunContext):
        with run_marker.marked(ctx.tag, ctx.run_dir, ctx.procs):
            session = open_session(configured.inventory_path, needs, ctx.procs, self.name,
                                   undo=UndoJournal(ctx.tag, configured.inventory_path))
            try:
                yield session
            finally:
                session.bpf.close()
                MASTERS.close_all()          # the shared SSH connections end with the session
