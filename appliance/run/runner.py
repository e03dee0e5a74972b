"""A whole run: preflight, then every trial of every cell in the chosen order, building (or reusing)
the lab its topology needs, verifying a cell's lab before its first trial; stored as it goes,
resumable, with unconditional teardown.

The lab comes from the config's backend (hardware/backends/): the runner opens its session for
the whole run and asks it for a Lab whenever the topology changes; it never knows which backend.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

from longhaul.appliance.config.load import Config
from longhaul.appliance.config.profiles import CellSpec
from longhaul.appliance.run.jobs import Job, PlannedCell, plan, schedule
from longhaul.appliance.run.phases import Phases
from longhaul.appliance.run.preflight import check_lab, check_tools, needs_of, with_fallbacks
from longhaul.appliance.run.trial import Chooser, run_trial, watch_hosts
from longhaul.appliance.run.verify import pair_rtts, rtt_problems, shared, verify
from longhaul.collectors.live.fingerprint import lab_fingerprint
from longhaul.collectors.live.telegraf import TelegrafFleet
from longhaul.collectors.store.fingerprint import CONTROLLER, HOSTS
from longhaul.collectors.store.format import CALIBRATION_LABEL, LAB_DIR, RUN_LOG
from longhaul.collectors.store.influx.mirror import InfluxMirror, preflight
from longhaul.collectors.store.influx.points import run_tags
from longhaul.collectors.store.influx.spool import spool_dir
from longhaul.collectors.store.live_rows import LiveRows
from longhaul.collectors.store.manifest import ProfileSource, RunManifest, RunOrder
from longhaul.collectors.store.provenance import new_run_id, run_manifest, tool_versions
from longhaul.collectors.store.records import CellEntry, DeclaredCell, FlowDecl, Topology, Verification
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.core.errors import RunError
from longhaul.core.paths import REPO
from longhaul.hardware.backends.base import Lab, LabSpec, LinkSettings, RunContext, Session
from longhaul.hardware.cleanup import CleanupStack, Interrupted, signals_raise
from longhaul.hardware.executors.process import ProcessTable

log = logging.getLogger(__name__)


def lab_key(spec: CellSpec) -> tuple:
    """Cells with the same key share a lab; their end hosts' tuning (`link_settings`' cca and buffer)
    may differ, which a standing lab takes in place where it can (Lab.retune)."""
    return (spec.cell.topology, _offloads(spec))


def link_settings(spec: CellSpec) -> LinkSettings:
    topo = spec.cell.topology
    return LinkSettings(topo.rtt_ms, topo.queue_bytes, spec.cell.tuning.cca, spec.cell.tuning.buffer, _offloads(spec))


def _offloads(spec: CellSpec) -> tuple[tuple[str, bool], ...]:
    return tuple(sorted(spec.cell.tuning.offloads.items()))


class BuildVerified(NamedTuple):
    """A lab build's full verification, which later cells on that build share."""
    build: int               # the runner's count of labs built
    calibration: bool        # made for a calibration cell (its rate is not checked)
    cell_id: str
    record: Verification


class Runner:
    def __init__(self, config: Config, progress, out_root: Path | None = None, resume: FileRunWriter | None = None,
                 choosers: Callable[[CellSpec], dict[str, Chooser]] | None = None):
        """choosers: per cell, the flows whose bursts' congestion control is decided during the
        trial (OPS's adaptive scheme) and who decides it."""
        self.config = config
        self.progress = progress
        self.out_root = Path(out_root) if out_root else config.store_dir
        self.procs = ProcessTable()
        self.failed_cells: set[str] = set()
        self.choosers = choosers
        self.store: FileRunWriter | None = resume
        self._session: Session                      # set when run() has opened the backend's session
        self._lab: Lab | None = None
        self._lab_key: tuple | None = None
        self._lab_cleanup: CleanupStack | None = None
        self._labs_built = 0
        self._verified_in: dict[str, int] = {}   # cell id -> the lab build it was verified in
        self._build_verified: BuildVerified | None = None   # the current lab build's full verification
        self.phases = Phases()

    def run(self) -> FileRunWriter:
        config = self.config
        needs = needs_of(config)
        # a tool the lab cannot have (a generator's): refused before any lab is touched
        check_tools(config, here=False, generator=config.backend.has_generator(config.lab))
        run_id = self.store.run_id if self.store is not None else new_run_id()
        run_dir = self.store.dir if self.store is not None else self.out_root / run_id
        ctx = RunContext(tag=run_id[-6:], run_dir=run_dir, lab_dir=run_dir / LAB_DIR, procs=self.procs,
                         say=self.progress.message)
        influx = config.data.store.influx
        if influx is not None:             # a wrong URL or credential stops the run before any lab
            preflight(influx, config.influx_credential).close()
        if self.store is None:           # a resumed run has its directory (and its snapshot's dir is not a store)
            self.out_root.mkdir(parents=True, exist_ok=True)
        with signals_raise(), ExitStack() as stack:
            with self.phases("session"):
                session = stack.enter_context(config.backend.session(config.lab, needs, ctx))
            # cells whose cca the lab lacks run its BPF version where they allow it (cca_fallback)
            self.config = config = with_fallbacks(config, session.congestion_controls)
            check_lab(config, session.congestion_controls, session.runs_tools_here)
            self._session = session
            return self._run(session, run_id, ctx.tag)

    def _run(self, session, run_id: str, tag: str) -> FileRunWriter:
        cells = plan(self.config)
        if self.store is not None:                # resumed
            store = self.store
            self._attach_influx(store)
            store.resumed()
        else:
            store = self._new_store(session, cells, run_id)
        order = store.manifest.order
        if order is None:
            raise RunError(f"{store.dir}: its manifest has no run order (not a run this longhaul can resume)")
        jobs = schedule(cells, order.mode or "sequential", order.seed, store.done_trials())
        run_log = _file_handler(store.dir / RUN_LOG)
        logging.getLogger().addHandler(run_log)
        status = "failed"
        with CleanupStack() as cleanup:
            cleanup.push("stop processes", self.procs.stop_all)
            cleanup.push("tear down lab", self._teardown_lab)
            try:
                self._jobs(jobs, cells, store, tag)
                status = "complete" if not self.failed_cells else "failed"
            except Interrupted as exc:
                status = "interrupted"
                log.warning("%s: tearing down, keeping the results so far", exc)
                self._mark_running(store, "interrupted")
                raise
            except Exception as exc:
                log.error("run failed: %s", exc, exc_info=True)      # run.log keeps where it failed
                self._mark_running(store, "failed", str(exc))
                raise RunError(f"run failed: {exc}") from exc
            finally:
                try:
                    failures = cleanup.close()
                    if failures:
                        log.error("teardown problems: %s", failures)
                finally:
                    store.update_manifest(phases=self.phases.as_dict())
                    store.finish(status)          # also when a signal is delivered after the teardown
                    logging.getLogger().removeHandler(run_log)
                    run_log.close()
        return store

    def _new_store(self, session, cells: list[PlannedCell], run_id: str) -> FileRunWriter:
        run_cfg = self.config.data.run
        seed = run_cfg.seed if run_cfg.seed is not None else secrets.randbelow(2**31)
        store = self.store = FileRunWriter.create(self.out_root, run_id)
        self._attach_influx(store)
        store.write_manifest(_manifest(self.config, session, [c.spec for c in cells], run_id,
                                       RunOrder(mode=run_cfg.order, seed=seed)))
        store.snapshot_sources(self.config.path.read_text(), {p.name: p.source_text for p in self.config.profiles})
        for planned in cells:   # every cell listed in plan order from the start, whatever the run order
            store.begin_cell(cell_entry(planned.spec, status="pending"))
        return store

    def _attach_influx(self, store: FileRunWriter) -> None:
        if self.config.data.store.influx is not None:
            store.mirrors.append(InfluxMirror(self.config.data.store.influx, self.config.influx_credential, store.dir,
                                              say=self.progress.message))

    def _mark_running(self, store: FileRunWriter, status: str, error: str | None = None) -> None:
        for entry in store.cells:
            if entry.status == "running":
                store.end_cell(entry, status, error)
            elif entry.status == "pending":
                store.end_cell(entry, "not run")

    def _jobs(self, jobs: list[Job], cells: list[PlannedCell], store: FileRunWriter, tag: str) -> None:
        self.progress.start_run(store.dir, jobs)
        remaining = {c.spec.id: sum(1 for j in jobs if j.spec.id == c.spec.id) for c in cells}
        for number, job in enumerate(jobs, start=1):
            spec = job.spec
            if spec.id in self.failed_cells and (known := store.entry(spec.id)) and known.status == "refused":
                continue
            lab = self._ensure_lab(spec, store, tag)
            entry = store.entry(spec.id) or store.begin_cell(cell_entry(spec))
            entry.status = "running"
            self.progress.start_cell(number, spec)
            if not self._checked(lab, spec, entry, store):
                continue
            self.progress.start_trial(job.trial, job.repeats)
            trial_dir = store.trial_dir(spec.id, job.trial)
            idle = entry.lab.measured_rtt_ms if entry.lab else None
            live = LiveRows(trial_dir)            # the trial second by second, until it is stored
            try:
                try:
                    trial = run_trial(lab, spec, job.trial, trial_dir, idle, live.chained(self.progress.tick),
                                      self.choosers(spec) if self.choosers else None, phases=self.phases,
                                      host_check=self.config.data.run.host_check)
                except (TimeoutError, RuntimeError) as exc:      # the trial's set-up failed: a host gone is why?
                    lost = watch_hosts(lab, self.config.data.run.host_check).settle()
                    if not lost:
                        raise
                    self._trial_ended(spec, entry, store, remaining, ok=False, error=str(exc))
                    self._host_lost(spec, job.trial, sorted(lost), f"{exc}; lost in the trial's set-up")
                    continue
                with self.phases("trial store"):
                    store.record_trial(entry, trial)
            finally:
                live.close()
            self.progress.end_trial(trial)
            self._trial_ended(spec, entry, store, remaining, ok=trial.ok)
            if trial.lost_hosts:
                self._host_lost(spec, job.trial, trial.lost_hosts, trial.error)

    def _trial_ended(self, spec: CellSpec, entry: CellEntry, store: FileRunWriter, remaining: dict[str, int],
                     ok: bool, error: str | None = None) -> None:
        """One trial of the cell fewer to run; the cell ends with its last (failed if any failed)."""
        if not ok:
            self.failed_cells.add(spec.id)
        remaining[spec.id] -= 1
        if remaining[spec.id] == 0:
            store.end_cell(entry, "complete" if spec.id not in self.failed_cells else "failed", error)

    def _host_lost(self, spec: CellSpec, trial_no: int, lost_hosts: list[str], error: str | None) -> None:
        """A lab host stopped answering during the trial: the lab is torn down now (the other hosts
        restored; the lost one's commands fail at once), then [run] on_host_failure says whether
        the run stops or goes on with a lab built again."""
        names: dict = (self._lab.record or {}).get("hosts", {}) if self._lab is not None else {}
        hosts = ", ".join(f"{h} ({names[h]['machine']})" if h in names else h for h in lost_hosts)
        self._teardown_lab()
        if self.config.data.run.on_host_failure == "stop":
            raise RuntimeError(f"{hosts} lost in trial {trial_no} of {spec.id} ({error}); the run stops "
                               "([run] on_host_failure = 'stop'); `longhaul run --resume RUN_DIR` finishes it once "
                               "the host is back")
        self.progress.message(f"{hosts} lost in trial {trial_no} of {spec.id}; the run goes on (on_host_failure)")

    def _checked(self, lab, spec: CellSpec, entry: CellEntry, store: FileRunWriter) -> bool:
        """A full verification once per lab build. Every other cell on that build, and a cell
        verified before on a build since torn down, re-checks every pair's idle RTT; a new cell
        then records the build's verification with its own RTTs (`shared_from`). A re-check out of
        tolerance falls back to the full verification."""
        settings = self.config.data.verify
        if not settings.enabled or self._verified_in.get(spec.id) == self._labs_built:
            return True
        known = entry.lab if entry.lab and entry.lab.ok else None
        build = self._build_verified
        if build and (build.build, build.calibration) != (self._labs_built, bool(spec.labels.get(CALIBRATION_LABEL))):
            build = None
        reference = known or (build.record if build else None)
        tolerance = reference.tolerance.rtt_ms if reference and reference.tolerance else None
        if tolerance is not None:
            with self.phases("verify rtt"):
                rtts = pair_rtts(lab, spec.cell.topology.pairs)
            if not rtt_problems(rtts, spec.cell.topology.rtt_ms, tolerance):
                if not known and build:
                    mine = shared(build.record, build.cell_id, rtts, spec.cell.probe.pair)
                    store.record_verification(entry, mine)
                    self.progress.verified(mine)
                self._verified_in[spec.id] = self._labs_built
                return True
        verification = verify(lab, spec, settings, store.cell_dir(spec.id), self.phases)
        store.record_verification(entry, verification)
        self.progress.verified(verification)
        if not verification.ok:
            self.failed_cells.add(spec.id)
            store.end_cell(entry, "refused", "; ".join(verification.problems))
            return False
        self._verified_in[spec.id] = self._labs_built
        self._build_verified = BuildVerified(self._labs_built, bool(spec.labels.get(CALIBRATION_LABEL)), spec.id,
                                             verification)
        return True

    def _ensure_lab(self, spec: CellSpec, store: FileRunWriter, tag: str):
        settings = link_settings(spec)
        if self._lab is not None and lab_key(spec) == self._lab_key:
            if self._lab.settings == settings:
                return self._lab
            # another congestion control or buffer on the same path: about 100 s a cell saved on
            # emulated VMs (teardown, build and rate verification), where the lab can take it
            with self.phases("lab retune"):
                retuned = self._lab.retune(settings)
            if retuned:
                self._write_tuning(self._lab)
                self.progress.message(f"lab {self._lab.topo.tag} retuned: cca {settings.cca}, buffer {settings.buffer}")
                return self._lab
        self._teardown_lab()
        self._labs_built += 1
        topo = spec.cell.topology
        wanted = LabSpec(topo.pairs, topo.access_rate_mbps, topo.bottleneck_rate_mbps, topo.mtu, settings)
        workdir = store.dir / LAB_DIR / f"lab-{self._labs_built}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._lab_cleanup = cleanup = CleanupStack()
        lab = self._session.lab(wanted, f"{tag}{self._labs_built}", cleanup, workdir)
        self.progress.message(f"building lab {lab.topo.tag}: {topo.pairs} pair(s), {topo.bottleneck_rate_mbps:g} Mb/s, "
                              f"{topo.rtt_ms:g} ms, queue {topo.queue_bytes} B, delay by {self._session.features.delay}")
        self._lab, self._lab_key = lab, lab_key(spec)
        try:
            with self.phases("lab build"):
                lab.build()
        finally:
            self._write_tuning(lab)
        with self.phases("fingerprint"):
            self._take_fingerprint(lab, store, workdir.name)
        self._start_telegraf(lab, store, workdir, cleanup)
        return lab

    def _take_fingerprint(self, lab, store: FileRunWriter, lab_name: str) -> None:
        """Every lab host's and the controller's environment, once a run, as the first lab applied
        it (qdiscs, sysctls); a resumed run keeps the one its first start took."""
        if store.manifest.fingerprint is not None:
            return
        found = lab_fingerprint({h.name: lab.executor(h.name) for h in lab.topo.hosts}, lab=lab_name)
        store.update_manifest(fingerprint=found)
        failed = {name: fp["error"] for name, fp in {CONTROLLER: found[CONTROLLER], **found[HOSTS]}.items()
                  if "error" in fp}
        if failed:
            self.progress.message(f"no environment fingerprint of {', '.join(failed)} ({next(iter(failed.values()))}); "
                                  "the run goes on")

    def _start_telegraf(self, lab, store: FileRunWriter, workdir: Path, cleanup: CleanupStack) -> None:
        """Telegraf on every host of the lab, for as long as the lab stands (docs/telemetry.md)."""
        influx = self.config.data.store.influx
        if influx is None or not influx.telegraf:
            return
        # not the controller's kernel: on ssh and qemu labs the hosts run their own
        tags = {k: v for k, v in run_tags(store.manifest).items() if k not in ("run", "kernel")}
        fleet = TelegrafFleet(lab, store.run_id, spool_dir(store.dir), tags, influx.telegraf_interval_s, work_dir=workdir)
        cleanup.push("stop telegraf", fleet.stop)
        for host, problem in fleet.start().items():
            self.progress.message(f"telegraf on {host}: {problem}; the run goes on without that host's telemetry")

    def _teardown_lab(self) -> None:
        if self._lab_cleanup is not None:
            with self.phases("lab teardown"):
                failures = self._lab_cleanup.close()
            if failures:                   # the hosts may not be as found: say so loudly
                log.error("lab teardown problems: %s", "; ".join(map(str, failures)))
            if self._lab is not None:
                self._write_tuning(self._lab)
        self._lab, self._lab_key, self._lab_cleanup = None, None, None

    def _write_tuning(self, lab) -> None:
        """What the lab changed on hosts that are not its own (before and applied once built,
        after once torn down: the manifest's host_tuning), stored through the writer at once, so
        the mirrors see it too."""
        if lab.record is None or self.store is None:
            return
        records = self.store.manifest.host_tuning
        # the same record is written again once torn down, holding what the hosts were after
        known = any(r is lab.record for r in records)
        self.store.update_manifest(host_tuning=records if known else [*records, lab.record])


def _file_handler(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    return handler


# The store's records of a cell, built here because the store knows no profile types (layers).

def cell_entry(spec: CellSpec, status: str = "running") -> CellEntry:
    topo = spec.cell.topology
    return CellEntry(
        id=spec.id, profile=spec.profile, scenario=spec.scenario, params=spec.params,
        topology=Topology(pairs=topo.pairs, access_rate_mbps=topo.access_rate_mbps,
                          bottleneck_rate_mbps=topo.bottleneck_rate_mbps, rtt_ms=topo.rtt_ms,
                          queue_bytes=topo.queue_bytes, mtu=topo.mtu),
        labels=spec.labels, reference=spec.reference, status=status,
        flows=[FlowDecl(name=f.name, role=f.role, tool=f.tool, protocol=f.protocol,
                        cca=spec.cell.flow_cca(f) if f.protocol == "tcp" else None, pair=f.pair,
                        streams=f.streams, pattern=f.pattern) for f in spec.cell.flows])


def declared_cell(spec: CellSpec) -> DeclaredCell:
    return DeclaredCell(id=spec.id, profile=spec.profile, scenario=spec.scenario, params=spec.params,
                        labels=spec.labels, reference=spec.reference, cell=spec.cell.model_dump())


def _manifest(config: Config, session, cells: list[CellSpec], run_id: str, order: RunOrder) -> RunManifest:
    return run_manifest(
        run_id, repo=REPO, backend=config.backend.name, features=session.features.as_dict(), tools=tool_versions(),
        config_path=str(config.path), config=config.raw, time_scale_override=config.time_scale,
        profiles={p.name: ProfileSource(path=str(p.path), description=p.meta.description, repeats=p.meta.repeats,
                                        time_scale=p.meta.time_scale, source=p.source_text) for p in config.profiles},
        cells=[declared_cell(c) for c in cells], order=order, pid=os.getpid())
