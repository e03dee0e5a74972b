"""A whole run: preflight, then for every cell build (or reuse) the lab, verify it, run the trials,
store as it goes; teardown is unconditional and the report is written from the store."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..hardware import delayline
from ..hardware.cleanup import CleanupStack, Interrupted, signals_raise
from ..hardware.executor import ProcessTable
from ..hardware.features import Features, detect
from ..hardware.netns_lab import LinkSettings, NetnsLab
from ..hardware.topology import dumbbell
from . import leftovers
from .config import Config
from .errors import ConfigError, PreflightError, RunError
from .profiles import CellSpec
from .store import RunStore, new_run_id
from .tomlsource import load as load_toml
from .trial import run_trial
from .verify import verify

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PlannedCell:
    spec: CellSpec
    repeats: int


def plan(config: Config) -> list[PlannedCell]:
    return [PlannedCell(spec, profile.meta.repeats) for profile in config.profiles for spec in profile.cells]


def preflight(config: Config) -> Features:
    features = detect(delayline.helper_path())
    problems = features.problems()
    if problems:
        raise PreflightError("preflight failed:\n  - " + "\n  - ".join(problems))
    check_ccas(config, features)
    return features


def check_ccas(config: Config, features: Features) -> None:
    """Every congestion control a cell uses must be available on this host."""
    for profile in config.profiles:
        for spec in profile.cells:
            for flow in spec.cell.flows:
                cca = spec.cell.flow_cca(flow)
                if flow.protocol == "tcp" and cca not in features.congestion_controls:
                    source = load_toml(profile.path)
                    names = [f.get("name") for f in source.data.get("flows", [])]
                    key = ("flows", names.index(flow.name), "cca") if flow.name in names else ("tuning", "cca")
                    if key not in source.lines:
                        key = ("tuning", "cca")
                    raise ConfigError(profile.path, source.line_of(key), key, cca,
                                      f"not available on this host; available: {', '.join(features.congestion_controls)}")


def lab_key(spec: CellSpec) -> tuple:
    return (spec.cell.topology, spec.cell.tuning.cca, spec.cell.tuning.buffer)


class Runner:
    def __init__(self, config: Config, progress, out_root: Path | None = None):
        self.config = config
        self.progress = progress
        self.out_root = Path(out_root) if out_root else config.store_dir
        self.procs = ProcessTable()
        self.failed_cells = 0
        self.store: RunStore | None = None

    def run(self) -> RunStore:
        features = preflight(self.config)
        cells = plan(self.config)
        run_id = new_run_id()
        tag = run_id[-6:]
        self.out_root.mkdir(parents=True, exist_ok=True)
        store = self.store = RunStore(self.out_root, run_id)
        store.write_manifest(config=self.config, features=features, backend="netns", repo=REPO,
                             cells=[c.spec for c in cells])
        logging.getLogger().addHandler(_file_handler(store.dir / "run.log"))
        status = "failed"
        with CleanupStack() as cleanup, signals_raise():
            leftovers.register(tag, store.dir)
            cleanup.push("forget run marker", lambda: leftovers.unregister(tag))
            cleanup.push("stop processes", self.procs.stop_all)
            try:
                self._cells(cells, features, store, tag, cleanup)
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
                failures = cleanup.close()
                if failures:
                    log.error("teardown problems: %s", failures)
                store.finish(status)
        return store

    def _mark_running(self, store: RunStore, status: str, error: str | None = None) -> None:
        for entry in store.cells:
            if entry["status"] == "running":
                store.end_cell(entry, status, error)

    def _cells(self, cells: list[PlannedCell], features, store: RunStore, tag: str, cleanup: CleanupStack) -> None:
        self.progress.start_run(store.dir, cells)
        lab, lab_cleanup, current = None, None, None
        for index, planned in enumerate(cells, start=1):
            spec = planned.spec
            if lab_key(spec) != current:
                if lab_cleanup:
                    lab_cleanup.close()
                lab_cleanup = CleanupStack()
                cleanup.push("tear down lab", lab_cleanup.close)
                lab = self._build_lab(spec, features, f"{tag}{index}", lab_cleanup, store.dir / "lab" / f"lab-{index}")
                current = lab_key(spec)
            self._cell(lab, planned, index, store)

    def _build_lab(self, spec: CellSpec, features, tag: str, cleanup: CleanupStack, workdir: Path) -> NetnsLab:
        topo_cfg = spec.cell.topology
        topo = dumbbell(tag, topo_cfg.pairs, topo_cfg.access_rate_mbps, topo_cfg.bottleneck_rate_mbps, topo_cfg.mtu)
        settings = LinkSettings(topo_cfg.rtt_ms, topo_cfg.queue_bytes, spec.cell.tuning.cca, spec.cell.tuning.buffer)
        workdir.mkdir(parents=True, exist_ok=True)
        lab = NetnsLab(topo, settings, features, self.procs, cleanup, workdir)
        self.progress.message(f"building lab {tag}: {topo_cfg.pairs} pair(s), {topo_cfg.bottleneck_rate_mbps:g} Mb/s, "
                              f"{topo_cfg.rtt_ms:g} ms, queue {topo_cfg.queue_bytes} B, delay by {features.delay}")
        lab.build()
        return lab

    def _cell(self, lab: NetnsLab, planned: PlannedCell, index: int, store: RunStore) -> None:
        spec = planned.spec
        entry = store.begin_cell(spec)
        cell_dir = store.cell_dir(spec)
        self.progress.start_cell(index, spec)
        settings = self.config.data.verify
        idle = None
        if settings.enabled:
            verification = verify(lab, spec, settings, cell_dir)
            store.record_verification(entry, spec, verification)
            idle = verification["rtt_ms"]["measured"]
            self.progress.verified(verification)
            if not verification["ok"]:
                self.failed_cells += 1
                store.end_cell(entry, "refused", "; ".join(verification["problems"]))
                return
        for trial_no in range(1, planned.repeats + 1):
            self.progress.start_trial(trial_no, planned.repeats)
            trial = run_trial(lab, spec, trial_no, cell_dir / f"trial-{trial_no}", idle, self.progress.tick)
            store.record_trial(entry, spec, trial)
            self.progress.end_trial(trial)
            if trial["status"] != "ok":
                self.failed_cells += 1
        store.end_cell(entry, "complete")


def _file_handler(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    return handler


def running_as_root() -> bool:
    return os.geteuid() == 0
