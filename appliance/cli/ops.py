"""`longhaul ops`: background recognition and protocol selection (seed 000 §4-§6.7).

    longhaul ops evaluate DATASET... [--test DATASET...] [--json] [--w 5,10,...] [--folds 5] [--out RUN_DIR_OR_FILE]
    longhaul ops train DATASET... --probing passive --w 10 --classifier knn --k 1 --out MODEL
    longhaul ops classify MODEL CSV_OF_RTT [--json] [--decision TOML]
    longhaul ops merge OUT DATASET... [--probing passive,active]

Several DATASETs are one recording made in sittings: joined in memory as `ops merge` would join them.

With --json, stdout carries exactly one JSON object (progress goes to stderr). Bad input is a
ConfigError (exit 2) naming the file or option, the value and what is allowed.
"""
from __future__ import annotations

# The OPS study's modules (scikit-learn, the DTW library) are imported inside the commands, for
# start-up: `longhaul --help` and the other commands should not wait for them.
import csv
import json
import math
import sys
from pathlib import Path

from longhaul.core.errors import ConfigError
from longhaul.core.paths import REPO

PROBINGS = ("passive", "active")


def register(sub):
    """Add `ops` and its subcommands to the `longhaul` argument parser.

    Returns the `ops` sub-parsers so the lab-driving subcommands (record, run) can be added to the
    same group: ops_lab_cmd.add_parsers(ops_cmd.register(sub))."""
    ops = sub.add_parser("ops", help="background recognition and protocol selection (OPS)")
    osub = ops.add_subparsers(dest="ops_command", required=True)

    ev = osub.add_parser("evaluate", help="cross-validated accuracy of every classifier per window length")
    ev.add_argument("dataset", type=Path, nargs="+", help="dataset CSV (with its .json sidecar); several are "
                    "joined as `ops merge` would join them")
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ev.add_argument("--w", default="5,10,15,20,25,30,35,40,45,50,55,60", help="window lengths (points)")
    ev.add_argument("--folds", type=int, default=5)
    ev.add_argument("--probing", help="probing modes to evaluate (default: those the dataset has)")
    ev.add_argument("--classifiers", default="knn,mlp,svm,gnb")
    ev.add_argument("--k", default="1,3,5", help="k values of the DTW k-NN")
    ev.add_argument("--seed", type=int, default=0, help="random_state of the folds and the MLP")
    ev.add_argument("--test", type=Path, nargs="+", metavar="OTHER_DATASET",
                    help="train on all of DATASET and test on this recording (same lab and classes; several "
                         "are joined) instead of cross-validating inside DATASET")
    ev.add_argument("--both-ways", action="store_true",
                    help="with --test: also train on OTHER_DATASET and test on DATASET, pooling both directions' "
                         "predictions (every window tested by a model that did not see its recording)")
    ev.add_argument("--out", type=Path, metavar="RUN_DIR_OR_FILE",
                    help="also write the result: a .json file, or RUN_DIR/ops/evaluation.json")
    ev.set_defaults(func=cmd_evaluate)

    tr = osub.add_parser("train", help="train a model on a dataset and store it as data (.npz)")
    tr.add_argument("dataset", type=Path, nargs="+", help="dataset CSV; several are joined")
    tr.add_argument("--probing", choices=PROBINGS, required=True)
    tr.add_argument("--w", type=int, required=True, help="window length (points = seconds)")
    tr.add_argument("--classifier", choices=("knn", "mlp", "svm", "gnb"), default="knn")
    tr.add_argument("--k", type=int, default=1, help="k of the DTW k-NN")
    tr.add_argument("--decision", type=Path, help="decision TOML (default profiles/ops/decision.toml)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--out", type=Path, required=True, metavar="MODEL")
    tr.set_defaults(func=cmd_train)

    mg = osub.add_parser("merge", help="join recordings made under the same conditions into one dataset")
    mg.add_argument("out", type=Path, help="dataset CSV to write (a .json sidecar goes beside)")
    mg.add_argument("inputs", type=Path, nargs="+", metavar="DATASET")
    mg.add_argument("--probing", help="keep only these probing modes (default: both)")
    mg.set_defaults(func=cmd_merge)

    cl = osub.add_parser("classify", help="recognise the background from RTT values and decide the CCA")
    cl.add_argument("model", type=Path)
    cl.add_argument("rtt_csv", type=Path, metavar="CSV_OF_RTT", help="CSV with t_s,rtt_ms or just rtt_ms")
    cl.add_argument("--decision", type=Path, help="use this decision TOML instead of the model's mapping")
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(func=cmd_classify)
    return osub


# ---- evaluate ----------------------------------------------------------------------------------

def cmd_evaluate(args) -> int:
    from longhaul.collectors.studies.ops import classify as ops_classify
    from longhaul.collectors.studies.ops import dataset as ops_dataset

    requested = _choice_list(args.probing, "--probing", PROBINGS) if args.probing else None
    dataset = _load_joined(args.dataset, requested)
    ws = _int_list(args.w, "--w", 1, 3600)
    ks = _int_list(args.k, "--k", 1, 100)
    test = _load_joined(args.test, requested) if args.test else None
    if args.both_ways and test is None:
        raise ConfigError.option("--both-ways", True, "only with --test OTHER_DATASET")
    # by default, the modes there are to evaluate: with --test, those both recordings have
    probings = requested or [p for p in dataset.probings() if test is None or p in test.probings()]
    classifiers = _choice_list(args.classifiers, "--classifiers", ops_classify.CLASSIFIERS)
    if not 2 <= args.folds <= 100:
        raise ConfigError.option("--folds", args.folds, "an integer from 2 to 100")
    if not probings:
        raise ConfigError(test.path, None, ("modes",), test.probings(), f"a probing mode {dataset.path} also has")
    for data in (dataset, test) if test else (dataset,):
        missing = [p for p in probings if p not in data.probings()]
        if missing:
            raise ConfigError(data.path, None, ("probing",), missing[0],
                              f"the dataset has only {data.probings()} recordings")
    if test:
        try:
            ops_dataset.check_held_out(dataset, test, probings)
        except ops_dataset.DatasetError as exc:
            raise ConfigError(exc.path, exc.line, exc.key, exc.value, exc.allowed) from exc
    result = ops_classify.evaluate(dataset, probings, ws, classifiers, ks, args.folds, args.seed,
                                   progress=lambda m: print(f"ops evaluate: {m}", file=sys.stderr), test=test,
                                   both=args.both_ways)
    if args.out:
        path, in_run_dir = evaluation_path(args.out), Path(args.out).suffix != ".json"
        if in_run_dir:
            _ensure_run_dir(Path(args.out), args)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"evaluation: {path}", file=sys.stderr)
        if in_run_dir:      # its report gets the OPS section
            from longhaul.appliance.report import write_report  # start-up: the report brings matplotlib
            for written in write_report(Path(args.out), ("html", "pdf")):
                print(f"report: {written}", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        _print_evaluation(result)
    return 0


def _ensure_run_dir(run_dir: Path, args) -> None:
    """An evaluation written to a new directory makes it a run directory of its own (manifest and
    summary, no trials) so `longhaul report` renders it; an existing run (an `ops run`) keeps its."""
    from longhaul.collectors.store.format import MANIFEST
    from longhaul.collectors.store.provenance import run_manifest
    from longhaul.collectors.store.writer import TriallessRun
    from longhaul.collectors.studies.ops import classify as ops_classify

    if (run_dir / MANIFEST).is_file():
        return
    (run_dir / ops_classify.EVALUATION_FILE).parent.mkdir(parents=True, exist_ok=True)
    TriallessRun(run_dir, run_manifest(
        run_dir.name, repo=REPO, kind="ops-evaluation", status="complete", finished=True,
        config={"dataset": " ".join(map(str, args.dataset)), "test": " ".join(map(str, args.test or [])) or None,
                "both_ways": args.both_ways, "w": args.w, "folds": args.folds, "classifiers": args.classifiers, "k": args.k, "seed": args.seed}))


def evaluation_path(out: Path) -> Path:
    """--out names a .json file, or a run directory that gets ops/evaluation.json."""
    from longhaul.collectors.studies.ops.classify import EVALUATION_FILE

    out = Path(out)
    return out if out.suffix == ".json" else out / EVALUATION_FILE


def _print_evaluation(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from longhaul.collectors.studies.ops import classify as ops_classify

    # piped output gets room for every w column (rich would squeeze them to 80 columns of "0.…")
    console = Console() if sys.stdout.isatty() else Console(width=200)
    for probing in result["settings"]["probings"]:
        rows = [r for r in result["results"] if r["probing"] == probing]
        if not rows:
            continue
        ws = sorted({r["w"] for r in rows})
        held = result["settings"].get("test_dataset")
        both = result["settings"]["mode"] == ops_classify.BOTH_WAYS
        table = Table(title=f"{probing} probing: accuracy " + (
            f"on {held['name']} and {result['dataset']['name']}, each held out from the other" if both else
            f"on {held['name']} (held out)" if held else f"(mean of {result['settings']['folds']} folds)"))
        table.add_column("classifier")
        for w in ws:
            table.add_column(f"w={w}", justify="right")
        for label in dict.fromkeys(r["label"] for r in rows):
            acc = {r["w"]: r["accuracy_mean"] for r in rows if r["label"] == label}
            table.add_row(label, *(f"{acc[w]:.3f}" if w in acc else "-" for w in ws))
        console.print(table)
    for skip in result["skipped"]:
        console.print(f"skipped {skip['probing']} w={skip['w']}: {skip['reason']}")


def cmd_merge(args) -> int:
    from longhaul.collectors.studies.ops import dataset as ops_dataset

    probings = _choice_list(args.probing, "--probing", PROBINGS) if args.probing else list(PROBINGS)
    if any(Path(p).resolve() == Path(args.out).resolve() for p in args.inputs):
        raise ConfigError(args.out, None, (), None, "an output that is not one of the inputs")
    datasets = [_load_dataset(p) for p in args.inputs]
    try:
        rows, meta = ops_dataset.merge(datasets, probings)
    except ops_dataset.DatasetError as exc:
        raise ConfigError(exc.path, exc.line, exc.key, exc.value, exc.allowed) from exc
    if not rows:
        raise ConfigError.option("--probing", args.probing, "modes that the inputs recorded")
    ops_dataset.write(args.out, rows, meta)
    minutes = ops_dataset.summary(ops_dataset.load(args.out))
    print(f"dataset: {args.out} (" + "; ".join(
        f"{mode}: " + ", ".join(f"{c} {m:.1f} min" for c, m in per.items()) for mode, per in minutes.items()) + ")")
    return 0


# ---- train and classify ------------------------------------------------------------------------

def cmd_train(args) -> int:
    from longhaul.collectors.studies.ops import decision as ops_decision
    from longhaul.collectors.studies.ops import model as ops_model

    dataset = _load_joined(args.dataset, [args.probing])
    if not 1 <= args.w <= 3600:
        raise ConfigError.option("--w", args.w, "a window length from 1 to 3600 points")
    if args.k < 1:
        raise ConfigError.option("--k", args.k, "a positive integer")
    decision = ops_decision.load(args.decision, dataset.classes) if args.decision else None
    if decision is None and set(dataset.classes) == set(ops_decision.rule_mapping()):
        decision = ops_decision.load(None, dataset.classes)  # the shipped Figure 12 file
    try:
        model = ops_model.train(dataset, args.probing, args.w, args.classifier, args.k, decision, args.seed)
    except ValueError as exc:
        raise ConfigError(dataset.path, None, (), None, str(exc)) from exc
    path = ops_model.save(model, args.out)
    print(f"model: {path} ({len(model.y)} windows of w={model.w}, {args.probing} probing, "
          f"{args.classifier}{f' k={args.k}' if args.classifier == 'knn' else ''})")
    return 0


def cmd_classify(args) -> int:
    from longhaul.collectors.studies.ops import decision as ops_decision
    from longhaul.collectors.studies.ops import model as ops_model

    try:
        model = ops_model.load(args.model)
    except ops_model.ModelError as exc:
        raise ConfigError(args.model, None, (), None, str(exc).split(": ", 1)[-1]) from exc
    if args.decision:
        decision = ops_decision.load(args.decision, model.classes)
        model.meta["decision"] = decision.to_dict()
    rtt = read_rtt_csv(args.rtt_csv)
    if len(rtt) < model.w:
        raise ConfigError(args.rtt_csv, None, (), len(rtt), f"at least w={model.w} RTT values (one per second)")
    result = ops_model.classify_detail(model, rtt)
    if args.json:
        print(json.dumps(result))
    else:
        k = f"{result['k']}-NN DTW" if result["classifier"] == "knn" else result["classifier"].upper()
        print(f"background: {result['class']}  ->  foreground CCA: {result['cca']}  "
              f"({k}, last {result['points_used']} of {result['points_given']} values)")
    return 0


def read_rtt_csv(path: Path) -> list[float]:
    """RTT values (ms) from a CSV with an `rtt_ms` column (t_s optional), or one bare number per line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, None, (), None, f"cannot read the file: {exc.strerror}") from exc
    rows = [r for r in csv.reader(text.splitlines()) if r and any(c.strip() for c in r)]
    if not rows:
        raise ConfigError(path, None, (), None, "no RTT values; expected a CSV with t_s,rtt_ms or rtt_ms")
    header = [c.strip() for c in rows[0]]
    if "rtt_ms" in header:
        col, body, first = header.index("rtt_ms"), rows[1:], 2
    elif len(header) == 1:
        col, body, first = 0, rows, 1
    else:
        raise ConfigError(path, 1, (), ",".join(header), "a header with an rtt_ms column (t_s,rtt_ms or rtt_ms)")
    values = []
    for line, row in enumerate(body, start=first):
        try:
            value = float(row[col])
        except (ValueError, IndexError):
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(path, line, ("rtt_ms",), row[col] if col < len(row) else None,
                              "a positive RTT in milliseconds")
        values.append(value)
    return values


# ---- argument helpers --------------------------------------------------------------------------

def _load_dataset(path: Path):
    from longhaul.collectors.studies.ops import dataset as ops_dataset

    try:
        return ops_dataset.load(path)
    except ops_dataset.DatasetError as exc:
        raise ConfigError(exc.path, exc.line, exc.key, exc.value, exc.allowed) from exc


def _load_joined(paths: list[Path], probings: list[str] | None):
    """One dataset from one or several recordings (their `probings` runs when given)."""
    from longhaul.collectors.studies.ops import dataset as ops_dataset

    try:
        return ops_dataset.join([_load_dataset(p) for p in paths], probings or PROBINGS)
    except ops_dataset.DatasetError as exc:
        raise ConfigError(exc.path, exc.line, exc.key, exc.value, exc.allowed) from exc


def _int_list(text: str, option: str, low: int, high: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not low <= v <= high for v in values):
        raise ConfigError.option(option, text, f"comma-separated integers from {low} to {high}")
    return list(dict.fromkeys(values))


def _choice_list(text: str, option: str, allowed) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise ConfigError.option(option, bad[0] if bad else text,
                          f"comma-separated values from {list(allowed)}")
    return list(dict.fromkeys(values))
