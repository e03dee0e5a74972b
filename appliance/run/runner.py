"""A whole run: preflight, then every trial of every cell in the chosen order, building (or reusing)
the lab its topology needs, verifying a cell's lab before its first trial; stored as it goes,
resumable, with unconditional teardown."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

from longhaul.collectors.live.rtt_probe import idle_rtt
from longhaul.drivers import ccashim
from longhaul.drivers.registry import tool_for
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.backends.ssh import lab as hosts_lab
from longhaul.hardware.backends.qemu import fleet as qemu_fleet
from longhaul.hardware.cleanup import CleanupStack, Interrupted, signals_raise
from longhaul.hardware.executors.process import LocalExecutor, ProcessTable
from longhaul.hardware.backends.netns.features import Features, detect
from longhaul.hardware.backends.ssh.lab import HostsFeatures, HostsLab, inventory_dumbbell
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.backends.netns.lab import LinkSettings, NetnsLab
from longhaul.hardware.topology import dumbbell
from longhaul.hardware.backends.netns import leftovers
from longhaul.appliance.config.load import Config
from longhaul.core.errors import ConfigError, PreflightError, RunError
from longhaul.appliance.run.jobs import Job, PlannedCell, plan, schedule
from longhaul.appliance.config.profiles import CellSpec
from longhaul.collectors.store.writer import RunStore, new_run_id
from longhaul.core.tomlsource import load as load_toml
from longhaul.appliance.run.trial import run_trial
from longhaul.appliance.run.verify import verify
from longhaul.core.paths import REPO

log = logging.getLogger(__name__)


def preflight(config: Config):
    """Features of this machine (netns), or of the inventory's machines over SSH (ssh)."""
    if config.data.lab.backend in ("ssh", "qemu"):
        return preflight_hosts(config)
    features = detect(delayline.helper_path())
    problems = features.problems()
    if problems:
        raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
    check_ccas(config, features)
    check_tools(config)
    return features


def check_ccas(config: Config, features: Features) -> None:
    """Every congestion control a cell uses must be available on this host."""
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                cca = spec.cell.flow_cca(flow)
                if flow.protocol == "tcp" and cca not in features.congestion_controls:
                    _refuse_flow_key(profile, flow, "cca", cca,
                                     f"not available on this host; available: {', '.join(features.congestion_controls)}",
                                     fallback=("tuning", "cca"))


def preflight_hosts(config: Config) -> HostsFeatures:
    """The ssh backend: the drivers exist here; the programs, CCAs and qdiscs are checked on the
    machines themselves (longhaul check --inventory's checks, hardware/hosts_lab.preflight)."""
    from longhaul.appliance.cli.check_inventory import wants_from_config

    check_tools(config, local=False)
    inventory = load_inventory(config.inventory_path)
    pairs = max(spec.cell.topology.pairs for p in config.profiles for spec in p.cells)
    try:
        return hosts_lab.preflight(inventory, config.inventory_path, pairs, wants_from_config(config))
    except RuntimeError as exc:
        raise PreflightError(f"preflight failed: {exc}") from None


def check_tools(config: Config, local: bool = True) -> None:
    """Every flow's tool has a driver here and its programs are installed (the embedded lab's
    namespaces share this machine's filesystem; real hosts are checked over SSH instead)."""
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                try:
                    tool = tool_for(flow.tool)
                except ValueError as exc:
                    _refuse_flow_key(profile, flow, "tool", flow.tool, str(exc))
                if tool.hardware_only:
                    _refuse_flow_key(profile, flow, "tool", flow.tool, f"needs {tool.hardware_only}")
                if not local:
                    continue
                missing = [exe for exe in tool.executables if not shutil.which(exe)]
                if not tool.sets_cca and flow.protocol == "tcp" and not ccashim.library_path().exists():
                    missing.append(str(ccashim.library_path()))   # how the flow's CCA reaches its sockets
                if missing:
                    _refuse_flow_key(profile, flow, "tool", flow.tool,
                                     f"needs {', '.join(missing)} installed (make setup installs them)")


def _refuse_flow_key(profile, flow, field: str, value, allowed: str, fallback: tuple | None = None):
    """ConfigError at the flow's own `field` line, else at `fallback` (a cell-wide key), else the flow."""
    source = load_toml(profile.path)
    names = [f.get("name") for f in source.data.get("flows", [])]
    index = names.index(flow.name) if flow.name in names else None
    candidates = [k for k in (("flows", index, field) if index is not None else None, fallback,
                              ("flows", index, "name") if index is not None else None) if k]
    key = next((k for k in candidates if k in source.lines), candidates[0] if candidates else ("flows",))
    raise ConfigError(profile.path, source.line_of(key), key, value, allowed)


def lab_key(spec: CellSpec) -> tuple:
    return (spec.cell.topology, spec.cell.tuning.cca, spec.cell.tuning.buffer)


class Runner:
    def __init__(self, config: Config, progress, out_root: Path | None = None, resume: RunStore | None = None):
        self.config = config
        self.progress = progress
        self.out_root = Path(out_root) if out_root else config.store_dir
        self.procs = ProcessTable()
        self.failed_cells: set[str] = set()
        self.store: RunStore | None = resume
        self._lab: NetnsLab | HostsLab | None = None
        self._backend = config.data.lab.backend
        self._lab_key = None
        self._lab_cleanup: CleanupStack | None = None
        self._labs_built = 0
        self._verified_in: dict[str, int] = {}   # cell id -> the lab build it was verified in
        self._fleet = None                       # qemu backend: the VMs the run is on

    def run(self) -> RunStore:
        if self._backend != "qemu":
            return self._run()
        with signals_raise(), self._vm_fleet() as fleet:
            # from here on the VMs are real hosts with an inventory, driven like the ssh backend
            self.config = dataclasses.replace(self.config, inventory_path=fleet.inventory_path)
            self._fleet = fleet
            try:
                return self._run()
            finally:
                if self.store is not None:
                    fleet.keep_consoles(self.store.dir / "lab" / "vms")

    @contextmanager
    def _vm_fleet(self):
        q = self.config.data.lab.qemu
        if not shutil.which("qemu-system-x86_64"):
            raise PreflightError("preflight failed: the qemu backend needs qemu-system-x86_64 (make setup installs it)")
        pairs = max(spec.cell.topology.pairs for p in self.config.profiles for spec in p.cells)
        pid = os.getpid()
        shown = LocalExecutor("controller", ProcessTable()).run(["ip", "-j", "-4", "addr"]).stdout
        plan_ = qemu_fleet.fleet_plan(f"lq{pid}", qemu_fleet.free_index(pid, shown), pairs, ns=f"lh-q{pid}")
        self.out_root.mkdir(parents=True, exist_ok=True)
        workdir = self.out_root / f".qemu-{pid}"
        try:
            fleet = qemu_fleet.VmFleet(plan_, self.config.image_dir, workdir, self.procs, accel=q.accel,
                                       memory_mb=q.memory_mb, boot_timeout_s=q.boot_timeout_s)
        except RuntimeError as exc:          # accel = "kvm" where KVM cannot boot the image
            raise PreflightError(f"preflight failed: {exc}") from None
        self.progress.message(f"booting {len(plan_.vms)} VMs from {self.config.image_dir} "
                              f"(kernel {fleet.kernel}, {fleet.accel}: {fleet.accel_why})")
        try:
            fleet.start()
        except BaseException as exc:
            kept = self.out_root / f"qemu-{pid}-consoles"     # why a VM did not come up
            fleet.keep_consoles(kept)
            fleet.close()
            if isinstance(exc, (TimeoutError, RuntimeError, OSError)):
                raise RunError(f"qemu lab: {exc} (VM consoles kept in {kept})") from exc
            raise
        try:
            self.progress.message("VMs up: " + ", ".join(f"{n} {s:g}s" for n, s in fleet.boot_seconds.items()))
            yield fleet
        finally:
            failures = fleet.close()
            if failures:
                log.error("qemu lab: teardown problems: %s", "; ".join(failures))

    def _run(self) -> RunStore:
        features = preflight(self.config)
        if self._fleet is not None:
            features.vm_lab = self._fleet.as_dict()
        cells = plan(self.config)
        resuming = self.store is not None
        store = self.store if resuming else self._new_store(features, cells)
        if resuming:
            store.resumed()
        order = store.manifest["order"]
        jobs = schedule(cells, order["mode"], order["seed"], store.done_trials())
        tag = store.run_id[-6:]
        logging.getLogger().addHandler(_file_handler(store.dir / "run.log"))
        status = "failed"
        with CleanupStack() as cleanup, signals_raise():
            if self._backend == "netns":    # markers name this machine's namespaces; real hosts have none
                leftovers.register(tag, store.dir)
                cleanup.push("forget run marker", lambda: leftovers.unregister(tag))
            cleanup.push("stop processes", self.procs.stop_all)
            cleanup.push("tear down lab", self._teardown_lab)
            try:
                self._jobs(jobs, cells, features, store, tag)
                status = "complete" if not self.failed_cells else "failed"
            except Interrupted as exc:
                status = "interrupted"
                log.warning("%s: tearing down, keeping the results so far", exc)
                self._mark_running(store, "interrupted")
                raise
            except Exception as exc:
                self._mark_running(store, "failed", str(exc))
                raise RunError(f"run failed: {exc}") from exc
            finally:
                try:
                    failures = cleanup.close()
                    if failures:
                        log.error("teardown problems: %s", failures)
                finally:
                    store.finish(status)          # also when a signal is delivered after the teardown
        return store

    def _new_store(self, features, cells: list[PlannedCell]) -> RunStore:
        run_cfg = self.config.data.run
        seed = run_cfg.seed if run_cfg.seed is not None else secrets.randbelow(2**31)
        self.out_root.mkdir(parents=True, exist_ok=True)
        store = self.store = RunStore(self.out_root, new_run_id())
        store.write_manifest(config=self.config, features=features, backend=self._backend, repo=REPO,
                             cells=[c.spec for c in cells], order={"mode": run_cfg.order, "seed": seed})
        store.snapshot_sources(self.config)
        for planned in cells:   # every cell listed in plan order from the start, whatever the run order
            store.begin_cell(planned.spec, status="pending")
        return store

    def _mark_running(self, store: RunStore, status: str, error: str | None = None) -> None:
        for entry in store.cells:
            if entry["status"] == "running":
                store.end_cell(entry, status, error)
            elif entry["status"] == "pending":
                store.end_cell(entry, "not run")

    def _jobs(self, jobs: list[Job], cells: list[PlannedCell], features, store: RunStore, tag: str) -> None:
        self.progress.start_run(store.dir, jobs)
        remaining = {c.spec.id: sum(1 for j in jobs if j.spec.id == c.spec.id) for c in cells}
        for number, job in enumerate(jobs, start=1):
            spec = job.spec
            if spec.id in self.failed_cells and store.entry(spec) and store.entry(spec)["status"] == "refused":
                continue
            lab = self._ensure_lab(spec, features, tag)
            entry = store.entry(spec) or store.begin_cell(spec)
            entry["status"] = "running"
            self.progress.start_cell(number, spec)
            if not self._checked(lab, spec, entry, store):
                continue
            self.progress.start_trial(job.trial, job.repeats)
            trial_dir = store.cell_dir(spec) / f"trial-{job.trial}"
            idle = (entry.get("lab") or {}).get("rtt_ms", {}).get("measured")
            trial = run_trial(lab, spec, job.trial, trial_dir, idle, self.progress.tick)
            store.record_trial(entry, spec, trial)
            self.progress.end_trial(trial)
            if trial["status"] != "ok":
                self.failed_cells.add(spec.id)
            remaining[spec.id] -= 1
            if remaining[spec.id] == 0:
                store.end_cell(entry, "complete" if spec.id not in self.failed_cells else "failed")

    def _checked(self, lab, spec: CellSpec, entry: dict, store: RunStore) -> bool:
        """Full verification before a cell's first trial; after a rebuild of its lab, the idle RTT."""
        settings = self.config.data.verify
        if not settings.enabled or self._verified_in.get(spec.id) == self._labs_built:
            return True
        if entry.get("lab") and entry["lab"].get("ok"):
            pair = spec.cell.probe.pair
            measured = idle_rtt(lab.executor(f"S{pair}"), lab.address(f"D{pair}"))
            tolerance = entry["lab"]["tolerance"]["rtt_ms"]
            if measured is not None and abs(measured - spec.cell.topology.rtt_ms) <= tolerance:
                self._verified_in[spec.id] = self._labs_built
                return True
        verification = verify(lab, spec, settings, store.cell_dir(spec))
        store.record_verification(entry, spec, verification)
        self.progress.verified(verification)
        if not verification["ok"]:
            self.failed_cells.add(spec.id)
            store.end_cell(entry, "refused", "; ".join(verification["problems"]))
            return False
        self._verified_in[spec.id] = self._labs_built
        return True

    def _ensure_lab(self, spec: CellSpec, features, tag: str):
        if self._lab is not None and lab_key(spec) == self._lab_key:
            return self._lab
        self._teardown_lab()
        self._labs_built += 1
        topo_cfg = spec.cell.topology
        settings = LinkSettings(topo_cfg.rtt_ms, topo_cfg.queue_bytes, spec.cell.tuning.cca, spec.cell.tuning.buffer)
        workdir = self.store.dir / "lab" / f"lab-{self._labs_built}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._lab_cleanup = CleanupStack()
        if self._backend in ("ssh", "qemu"):
            inventory = load_inventory(self.config.inventory_path)
            topo, names = inventory_dumbbell(inventory, f"{tag}{self._labs_built}", topo_cfg.pairs,
                                             topo_cfg.bottleneck_rate_mbps, topo_cfg.mtu)
            lab = HostsLab(inventory, topo, names, settings, features, self.procs, self._lab_cleanup, workdir)
            # before/applied/after of every host's tuning; "after" is filled in at teardown
            self.store.manifest.setdefault("host_tuning", []).append(lab.record)
        else:
            topo = dumbbell(f"{tag}{self._labs_built}", topo_cfg.pairs, topo_cfg.access_rate_mbps,
                            topo_cfg.bottleneck_rate_mbps, topo_cfg.mtu)
            lab = NetnsLab(topo, settings, features, self.procs, self._lab_cleanup, workdir)
        self.progress.message(f"building lab {topo.tag}: {topo_cfg.pairs} pair(s), {topo_cfg.bottleneck_rate_mbps:g} Mb/s, "
                              f"{topo_cfg.rtt_ms:g} ms, queue {topo_cfg.queue_bytes} B, delay by {features.delay}")
        self._lab, self._lab_key = lab, lab_key(spec)
        lab.build()
        return lab

    def _teardown_lab(self) -> None:
        if self._lab_cleanup is not None:
            failures = self._lab_cleanup.close()
            if failures and self._backend in ("ssh", "qemu"):     # the hosts may not be as found: say so loudly
                log.error("real hosts: teardown problems: %s", "; ".join(failures))
        self._lab, self._lab_key, self._lab_cleanup = None, None, None


def _file_handler(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    return handler

