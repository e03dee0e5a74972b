"""`longhaul ops record` and `longhaul ops run`: the OPS commands that drive the lab."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from longhaul.hardware.cleanup import Interrupted
from longhaul.core.errors import ConfigError, RunError
from longhaul.core.paths import REPO

DEFAULT_LAB = Path("profiles/ops/lab.toml")
SCHEMES = ("Fixed:CUBIC", "Fixed:BBR", "Adaptive")


def add_parsers(ops_sub) -> None:
    record = ops_sub.add_parser("record", help="record labelled RTT time series of the background classes")
    record.add_argument("--lab", type=Path, default=DEFAULT_LAB, help="OPS lab declaration (TOML)")
    record.add_argument("--out", type=Path, required=True, help="dataset CSV to write (a .json sidecar goes beside)")
    record.add_argument("--duration", type=float, help="seconds per class and probing mode")
    record.add_argument("--probing", default="passive,active", help="passive, active or both (comma-separated)")
    record.add_argument("--classes", help="comma-separated subset of the classes (default: all six)")
    record.set_defaults(func=cmd_record)

    run = ops_sub.add_parser("run", help="seed 000 Figure 29: fixed CUBIC, fixed BBR and adaptive (OPS) foregrounds")
    run.add_argument("--lab", type=Path, default=DEFAULT_LAB)
    run.add_argument("--model", type=Path, required=True, help="a model from `longhaul ops train`")
    run.add_argument("--decision", type=Path, default=Path("profiles/ops/decision.toml"))
    run.add_argument("--background", default="cubic,bbr", help="background streams to test against")
    run.add_argument("--schemes", default=",".join(SCHEMES))
    size = run.add_mutually_exclusive_group()
    size.add_argument("--duration", type=float, help="foreground transfer seconds per scheme (default 120)")
    size.add_argument("--bytes", help="or a foreground transfer of this size per scheme, e.g. 2GB: the "
                                      "scheme ends when it completes")
    run.add_argument("--period", type=float, default=30.0, help="seconds of transfer between probes")
    run.add_argument("--fixed", choices=("cycled", "continuous"), default="cycled",
                     help="fixed schemes probe and transfer in the same cycle as Adaptive, as in seed 000 "
                          "§6.7 (cycled), or transfer without pause (continuous)")
    run.add_argument("--settle", type=float, default=0.0, metavar="S",
                     help="seconds between a transfer's end and the next probe (default 0, as in the paper)")
    run.add_argument("--out", type=Path, default=Path("runs"), help="runs are stored below this directory")
    run.set_defaults(func=cmd_run)


def _lab_spec(path: Path):
    from longhaul.appliance.ops.lab import load_ops_lab

    if not path.is_file():
        raise ConfigError(path, None, ("--lab",), str(path), "no such OPS lab file")
    return load_ops_lab(path)


def cmd_record(args: argparse.Namespace) -> int:
    from longhaul.collectors.studies.ops.dataset import BACKGROUND_CLASSES
    from longhaul.appliance.ops.experiments import record_dataset
    from longhaul.appliance.ops.lab import OpsLab

    spec = _lab_spec(args.lab)
    if args.duration:
        spec = spec.model_copy(update={"record": spec.record.model_copy(update={"duration_s": args.duration})})
    modes = [m for m in args.probing.split(",") if m]
    if not modes or any(m not in ("passive", "active") for m in modes):
        raise ConfigError(None, None, ("--probing",), args.probing, "passive, active, or passive,active")
    classes = dict(BACKGROUND_CLASSES)
    if args.classes:
        wanted = args.classes.split(",")
        unknown = [c for c in wanted if c not in classes]
        if unknown:
            raise ConfigError(None, None, ("--classes",), unknown, f"classes are: {', '.join(classes)}")
        classes = {c: classes[c] for c in wanted}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with OpsLab(spec, args.out.parent / f"{args.out.stem}-lab") as ops:
        record_dataset(spec, ops, classes, modes, args.out, say=lambda m: print(m, file=sys.stderr))
    print(args.out)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from longhaul.collectors.studies.ops.decision import KNOWN_CCAS
    from longhaul.collectors.studies.ops.decision import load as load_decision
    from longhaul.collectors.studies.ops.model import ModelError, classify
    from longhaul.collectors.studies.ops.model import load as load_model
    from longhaul.reports.render import write_report
    from longhaul.appliance.ops.experiments import PAPER_FIG29, fig29_entry, run_scheme, write_fig29
    from longhaul.appliance.ops.lab import OpsLab
    from longhaul.core.units import parse_size
    from longhaul.collectors.store.writer import new_run_id, now_iso, write_trialless_summary
    from longhaul.core.tables import write_json

    spec = _lab_spec(args.lab)
    try:
        model = load_model(args.model)
    except ModelError as exc:
        raise ConfigError(args.model, None, ("--model",), None, str(exc).split(": ", 1)[-1]) from exc
    decision = load_decision(args.decision, model.classes)   # every class the model can answer is mapped
    total_bytes = None
    if args.bytes is not None:
        try:
            total_bytes = parse_size(args.bytes)
        except ValueError as exc:
            raise ConfigError(None, None, ("--bytes",), args.bytes, str(exc)) from exc
    elif args.duration is None:
        args.duration = 120.0
    if args.duration is not None and not args.duration >= 2:
        raise ConfigError(None, None, ("--duration",), args.duration, "seconds, at least 2")
    if not args.period >= 1:
        raise ConfigError(None, None, ("--period",), args.period, "seconds, at least 1")
    if not 0 <= args.settle <= 600:
        raise ConfigError(None, None, ("--settle",), args.settle, "seconds from 0 to 600")
    backgrounds = [b for b in args.background.split(",") if b]
    unknown = [b for b in backgrounds if b not in KNOWN_CCAS]
    if not backgrounds or unknown:
        raise ConfigError(None, None, ("--background",), args.background,
                          f"comma-separated Linux congestion controls: {', '.join(KNOWN_CCAS)}")
    schemes = [s for s in args.schemes.split(",") if s]
    if any(s not in SCHEMES for s in schemes):
        raise ConfigError(None, None, ("--schemes",), args.schemes, f"a subset of {', '.join(SCHEMES)}")
    run_dir = args.out / new_run_id()
    (run_dir / "raw").mkdir(parents=True)
    entries = []
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    manifest: dict = {}
    failure: Exception | None = None

    def finish(status: str) -> None:     # the schemes done so far stay in fig29.json and the report
        manifest.update(status=status, finished=now_iso())
        write_json(run_dir / "manifest.json", manifest)
        write_trialless_summary(run_dir, status)
        for path in write_report(run_dir, ("html", "pdf")):
            print(f"report: {path}")

    with OpsLab(spec, run_dir / "lab") as ops:
        manifest.update(_manifest(run_dir, spec, ops, args, model, total_bytes))
        write_json(run_dir / "manifest.json", manifest)
        write_trialless_summary(run_dir, "running")
        try:
            for background in backgrounds:
                for scheme in schemes:
                    say(f"background {background}, foreground {scheme}")
                    raw = run_dir / "raw" / f"{background}-{scheme.replace(':', '-').lower()}"
                    raw.mkdir(parents=True)   # each scheme's own: bg-1-<cca>.json would repeat
                    res = run_scheme(ops, background, scheme, args.duration, raw, total_bytes=total_bytes,
                                     classify=lambda rtts: classify(model, rtts), decide=decision.cca_for,
                                     w=model.w, period_s=args.period, active=model.probing == "active",
                                     cycled=args.fixed == "cycled", settle_s=args.settle, say=say)
                    right = decision.cca_for(background) if background in model.classes else None
                    entries.append(fig29_entry(res, PAPER_FIG29.get((background, scheme), {}), right))
                    write_fig29(run_dir, entries)
        except (RunError, Interrupted) as exc:
            failure = exc            # the lab is torn down first; then the partial results are written
    finish("failed" if failure else "complete")
    print(run_dir)
    if failure:
        raise failure
    return 0


def _manifest(run_dir: Path, spec, ops, args, model, total_bytes: int | None) -> dict:
    from longhaul.appliance.ops.experiments import lab_conditions
    from longhaul.collectors.store.writer import git_revision, now_iso

    return {"format": "longhaul-run", "version": 1, "run_id": run_dir.name, "started": now_iso(),
            "finished": None, "status": "running", "kind": "ops-run",
            "longhaul": git_revision(REPO),
            "host": {"hostname": os.uname().nodename, "kernel": os.uname().release},
            "backend": "netns", "features": ops.features.as_dict(), "tools": lab_conditions(spec, ops)["tools"],
            "config": {"lab": str(args.lab), "model": str(args.model), "decision": str(args.decision),
                       "duration_s": args.duration, "bytes": total_bytes, "period_s": args.period,
                       "fixed": args.fixed, "settle_s": args.settle},
            "ops_lab": lab_conditions(spec, ops), "cells": []}
