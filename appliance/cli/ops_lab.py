"""`longhaul ops record` and `longhaul ops run`: the OPS commands that drive the lab."""

from __future__ import annotations

import argparse
from pathlib import Path

from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.ops.experiments import record_dataset, resume_recording, run_fig29
from longhaul.appliance.ops.lab import load_ops_lab
from longhaul.collectors.studies.ops.dataset import BACKGROUND_CLASSES
from longhaul.collectors.studies.ops.decision import KNOWN_CCAS
from longhaul.collectors.studies.ops.decision import load as load_decision
from longhaul.collectors.studies.ops.model import ModelError
from longhaul.collectors.studies.ops.model import load as load_model
from longhaul.collectors.studies.ops.paper import SCHEMES
from longhaul.core.errors import ConfigError

PROBING_DEFAULT = "passive,active"

DEFAULT_LAB = Path("profiles/ops/lab.toml")


def add_parsers(ops_sub) -> None:
    record = ops_sub.add_parser("record", help="record labelled RTT time series of the background classes")
    record.add_argument("--lab", type=Path, default=DEFAULT_LAB, help="OPS lab declaration (TOML)")
    record.add_argument("--out", type=Path, help="dataset CSV to write (a .json sidecar goes beside)")
    record.add_argument("--resume", type=Path, metavar="DATASET",
                        help="finish this interrupted recording on the same lab (its classes and modes; "
                             "--lab must be the one it began with)")
    record.add_argument("--duration", type=float, help="seconds per class and probing mode")
    record.add_argument("--probing", default=PROBING_DEFAULT, help="passive, active or both (comma-separated)")
    record.add_argument("--classes", help="comma-separated subset of the classes (default: all six)")
    record.add_argument("--config", type=Path, default=Path("config.toml"),
                        help="the lab backend, verification and store settings (defaults when it does not exist)")
    record.set_defaults(func=cmd_record)

    run = ops_sub.add_parser("run", help="seed 000 Figure 29: fixed CUBIC, fixed BBR and adaptive (OPS) foregrounds")
    run.add_argument("--lab", type=Path, default=DEFAULT_LAB)
    run.add_argument("--model", type=Path, required=True, help="a model from `longhaul ops train`")
    run.add_argument("--decision", type=Path, default=Path("profiles/ops/decision.toml"))
    run.add_argument("--background", default="cubic,bbr", help="background streams to test against")
    run.add_argument("--schemes", default=",".join(SCHEMES))
    run.add_argument("--duration", type=float, default=120.0,
                     help="foreground transfer seconds per scheme (default 120)")
    run.add_argument("--period", type=float, default=30.0, help="seconds of transfer between probes")
    run.add_argument("--fixed", choices=("cycled", "continuous"), default="cycled",
                     help="fixed schemes probe and transfer in the same cycle as Adaptive, as in seed 000 "
                          "§6.7 (cycled), or transfer without pause (continuous)")
    run.add_argument("--settle", type=float, default=0.0, metavar="S",
                     help="seconds between a transfer's end and the next probe (default 0, as in the paper)")
    run.add_argument("--out", type=Path, help="store the run below this directory instead of [store] dir")
    run.add_argument("--config", type=Path, default=Path("config.toml"),
                     help="the lab backend, verification and store settings (defaults when it does not exist)")
    run.set_defaults(func=cmd_run)


def _lab_spec(path: Path):
    if not path.is_file():
        raise ConfigError(path, None, ("--lab",), str(path), "no such OPS lab file")
    return load_ops_lab(path)


def cmd_record(args: argparse.Namespace) -> int:
    spec = _lab_spec(args.lab)
    if (args.out is None) == (args.resume is None):
        raise ConfigError.option("--out", args.out, "a dataset to write (--out) or one to finish (--resume), one of them")
    if args.resume is not None:
        if args.duration or args.classes or args.probing != PROBING_DEFAULT:
            raise ConfigError.option("--resume", str(args.resume), "alone: a resumed recording keeps its own "
                                     "classes, probing modes and duration")
        out, _ = resume_recording(spec, args.resume, Progress())
        print(out)
        return 0
    if args.duration:
        spec = spec.model_copy(update={"record": spec.record.model_copy(update={"duration_s": args.duration})})
    modes = [m for m in args.probing.split(",") if m]
    if not modes or any(m not in ("passive", "active") for m in modes):
        raise ConfigError.option("--probing", args.probing, "passive, active, or passive,active")
    classes = dict(BACKGROUND_CLASSES)
    if args.classes:
        wanted = args.classes.split(",")
        unknown = [c for c in wanted if c not in classes]
        if unknown:
            raise ConfigError.option("--classes", unknown, f"classes are: {', '.join(classes)}")
        classes = {c: classes[c] for c in wanted}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out, _ = record_dataset(spec, classes, modes, args.out, args.config, Progress())
    print(out)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    spec = _lab_spec(args.lab)
    try:
        model = load_model(args.model)
    except ModelError as exc:
        raise ConfigError(args.model, None, ("--model",), None, str(exc).split(": ", 1)[-1]) from exc
    decision = load_decision(args.decision, model.classes)   # every class the model can answer is mapped
    if not args.duration >= 2:
        raise ConfigError.option("--duration", args.duration, "seconds, at least 2")
    if not args.period >= 1:
        raise ConfigError.option("--period", args.period, "seconds, at least 1")
    if not 0 <= args.settle <= 600:
        raise ConfigError.option("--settle", args.settle, "seconds from 0 to 600")
    backgrounds = [b for b in args.background.split(",") if b]
    unknown = [b for b in backgrounds if b not in KNOWN_CCAS]
    if not backgrounds or unknown:
        raise ConfigError.option("--background", args.background,
                          f"comma-separated Linux congestion controls: {', '.join(KNOWN_CCAS)}")
    schemes = [s for s in args.schemes.split(",") if s]
    if not schemes or any(s not in SCHEMES for s in schemes):
        raise ConfigError.option("--schemes", args.schemes, f"a subset of {', '.join(SCHEMES)}")
    out_root = args.out or _store_dir(args.config)
    run = run_fig29(spec, model, decision, backgrounds, schemes, args.duration, args.period,
                    args.fixed == "cycled", args.settle, out_root, args.config, Progress())
    from longhaul.appliance.report import write_report  # start-up: the report brings matplotlib

    for path in write_report(run.run_dir, ("html", "pdf")):     # a run cut short: the schemes done so far
        print(f"report: {path}")
    print(run.run_dir)
    if run.failure is not None:
        raise run.failure
    return 0 if run.status == "complete" else 1


def _store_dir(config: Path) -> Path:
    return load_config(config, []).store_dir if config.is_file() else Path("runs")

