"""`ops record` and `ops run` as runs of generated profiles (appliance/ops/plans.py) through the
runner: the same lab backends, trial, tool registry, verification and store as `longhaul run`.

The OPS lab file (profiles/ops/lab.toml) gives the topology, the roles of the pairs and the active
probing profile; the config (config.toml, or the defaults when there is none) gives the backend,
the verification tolerances and where runs are stored."""

from __future__ import annotations

import json
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path

from longhaul.appliance.config.load import Config, load_config
from longhaul.appliance.ops import plans
from longhaul.appliance.ops.lab import ActiveStep, OpsLabFile, active_plan
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import lab_runs
from longhaul.collectors.studies.ops.chooser import OpsChooser
from longhaul.core.errors import ConfigError, RunError
from longhaul.core.tables import write_csv, write_json
from longhaul.hardware.cleanup import Interrupted

DEFAULT_CONFIG = "[lab]\nbackend = \"netns\"\n"
# What a resumed recording must share with its first sitting (lab_conditions' keys): the same lab
# file's topology, roles and active probing, on the same backend and kernel.
SAME_LAB = ("topology", "queue_bytes", "roles", "active_profile", "backend", "kernel")


@dataclass
class OpsRun:
    run_dir: Path
    status: str
    failure: BaseException | None = None     # what cut the run short: a RunError or an interrupt


def _steps(spec: OpsLabFile) -> list[ActiveStep]:
    return list(spec.active_profile)


def _run(config_path: Path | None, profile_name: str, text: str, plan: dict, out_root: Path, progress,
         choosers=None, after=None) -> OpsRun:
    """Write the generated profile where the config loader finds it and run it; the plan goes into
    the run, and `after(run_dir)` reads the stored results back, also when the run was cut short;
    then the failure is the caller's to raise (the run's own copies of config and profile are what
    a reader needs afterwards)."""
    with tempfile.TemporaryDirectory(prefix="longhaul-ops-") as tmp:
        (Path(tmp) / f"{profile_name}.toml").write_text(text)
        if config_path is None or not Path(config_path).is_file():
            config_path = Path(tmp) / "config.toml"
            config_path.write_text(DEFAULT_CONFIG)
        config: Config = load_config(config_path, [profile_name], profile_dir=Path(tmp))
        return _finish(Runner(config, progress, out_root, choosers=choosers), plan, after)


def _finish(runner: Runner, plan: dict | None = None, after=None) -> OpsRun:
    """Run it (or the rest of a resumed one); the plan (a new run's) goes into the run, and
    `after(run_dir)` reads the stored results back, also when the run was cut short."""
    failure = None
    try:
        runner.run()
    except (RunError, Interrupted) as exc:
        if runner.store is None:           # nothing was stored: nothing to read back
            raise
        failure = exc
    store = runner.store
    assert store is not None                 # run() made it, or the except above re-raised
    if plan is not None:
        lab_runs.write_plan(store.dir, plan)
    if after is not None:
        after(store.dir)
    return OpsRun(store.dir, store.manifest.status or "failed", failure)


def lab_conditions(spec: OpsLabFile, manifest: RunManifest, kernel: str | None = None) -> dict:
    """The recording's conditions, as `ops merge` and `ops evaluate --test` compare them (kernel:
    the one running now instead of the one the run began on)."""
    return {"topology": spec.topology.model_dump(), "queue_bytes": spec.topology.queue_bytes,
            "roles": spec.roles.model_dump(),
            # a step's defaults left out: recordings from before a step could set streams, buffer or
            # pacing compare equal to the same profile recorded now
            "active_profile": [s.model_dump(exclude_defaults=True) for s in spec.active_profile],
            "kernel": kernel or manifest.host.kernel or platform.release(),
            "features": manifest.features, "tools": manifest.tools,
            "backend": manifest.backend, "delay": (manifest.features or {}).get("delay"),
            "run": manifest.run_id}


def record_dataset(spec: OpsLabFile, classes: dict[str, list[str]], modes: list[str], out_csv: Path,
                   config_path: Path | None, progress) -> tuple[Path, OpsRun]:
    """Record every class in every probing mode as one run, then cut the dataset from its stored
    RTT series; an interrupted or failed run keeps the classes it finished (complete = false)."""
    text, plan = plans.record_profile(spec.topology, spec.roles.background_pairs, spec.roles.probe_pair,
                                      classes, modes, spec.record.duration_s, spec.record.warmup_s, _steps(spec))
    out_csv = Path(out_csv)
    run = _run(config_path, plans.RECORD_PROFILE, text, plan, out_csv.parent / f"{out_csv.stem}-lab", progress,
               after=lambda run_dir: write_recording(spec, classes, modes, run_dir, out_csv))
    return out_csv, _raised(run, out_csv)


def _raised(run: OpsRun, out_csv: Path) -> OpsRun:
    """The recording run when it completed; else what cut it short, raised, saying how to go on."""
    if isinstance(run.failure, Interrupted):
        raise run.failure
    if run.status != "complete":
        why = f" ({run.failure})" if run.failure is not None else ""
        raise RunError(f"the recording run {run.run_dir} ended {run.status}{why}; the classes it finished are in "
                       f"{out_csv}; `longhaul ops record --resume {out_csv}` records the rest") from run.failure
    return run


def resume_recording(spec: OpsLabFile, out_csv: Path, progress) -> tuple[Path, OpsRun]:
    """Finish an interrupted or failed recording (`ops record --resume DATASET`): the classes its
    run did not finish run on the same lab, from the run's own snapshot of its config and profile,
    after its conditions are checked against the lab file's and this machine's (ConfigError naming
    the first that differs); then the dataset is cut again from the whole run."""
    out_csv = Path(out_csv)
    side = ops_dataset.sidecar_path(out_csv)
    try:
        meta = ops_dataset.DATASET.read(json.loads(side.read_text(encoding="utf-8")), side)
    except (OSError, ValueError) as exc:
        raise ConfigError(side, None, ("--resume",), str(out_csv), f"a dataset `ops record` wrote ({exc})") from None
    if meta.get("complete"):
        raise ConfigError(side, None, ("complete",), True, "an interrupted recording: this one is whole "
                          "(record another sitting with `ops record` and join them with `ops merge`)")
    try:
        store = FileRunWriter.open(Path(meta["run_dir"]))
    except (KeyError, FileNotFoundError) as exc:
        raise ConfigError(side, None, ("run_dir",), meta.get("run_dir"), f"the recording's run directory ({exc})") from None
    now = lab_conditions(spec, store.manifest, kernel=platform.release())
    for key in SAME_LAB:
        if (meta.get("lab") or {}).get(key) != now.get(key):
            raise ConfigError(side, None, ("lab", key), now.get(key),
                              f"what the recording began with: {(meta.get('lab') or {}).get(key)!r} "
                              "(a resumed recording continues on the same lab)")
    config = load_config(store.dir / fmt.CONFIG_SNAPSHOT, list(store.manifest.profiles),
                         store.manifest.time_scale_override, profile_dir=store.dir / fmt.PROFILES_DIR)
    classes, modes = meta["classes"], meta["modes"]
    run = _finish(Runner(config, progress, resume=store),
                  after=lambda run_dir: write_recording(spec, classes, modes, run_dir, out_csv))
    return out_csv, _raised(run, out_csv)


def write_recording(spec: OpsLabFile, classes: dict[str, list[str]], modes: list[str], run_dir: Path,
                    out_csv: Path) -> None:
    rows, missing = lab_runs.recording_rows(run_dir)
    manifest = load_store(run_dir).manifest
    sidecar = {**ops_dataset.DATASET.stamp(), "recorded": manifest.started,
               "classes": classes, "modes": modes, "duration_s": spec.record.duration_s,
               "warmup_s": spec.record.warmup_s, "lab": lab_conditions(spec, manifest),
               "complete": not missing and manifest.status == "complete", "missing": missing,
               "run_dir": str(run_dir),
               # bursts start on the trial's schedule, aligned with the probe's rounds (t_s = 0)
               "active_cycle_s": active_plan(spec.active_profile)[0], "active_aligned": True}
    write_csv(out_csv, list(ops_dataset.HEADER), rows)
    write_json(ops_dataset.sidecar_path(out_csv), sidecar)


def run_fig29(spec: OpsLabFile, model, decision, backgrounds: list[str], schemes: list[str], total_s: float,
              period_s: float, cycled: bool, settle_s: float, out_root: Path, config_path: Path | None,
              progress) -> OpsRun:
    """Figure 29: every (background, scheme) a cell; fig29.json is written from the stored run,
    also when the run failed part-way (the schemes done so far)."""
    active = _steps(spec) if model is not None and model.probing == "active" else None
    w = model.w if model is not None else 10
    text, plan = plans.fig29_profile(spec.topology, spec.roles.background_pairs[0], spec.roles.foreground_pair,
                                     spec.roles.probe_pair, backgrounds, schemes, total_s, period_s, w,
                                     spec.record.warmup_s, settle_s, cycled, active)
    plan["right_cca"] = {bg: decision.decide(bg) for bg in backgrounds if model is not None and bg in model.classes}

    def choosers(cell_spec) -> dict:
        what = plan["scenarios"][cell_spec.scenario]
        return {"fg": OpsChooser(model, decision, w, what["fixed"])} if what["chooses"] else {}

    return _run(config_path, plans.FIG29_PROFILE, text, plan, out_root, progress, choosers,
                after=lambda run_dir: lab_runs.write_fig29(run_dir, lab_runs.fig29_entries(run_dir)))
