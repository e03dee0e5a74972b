"""Regression after kernel upgrades (docs/regression.md):

    longhaul diff RUN_A RUN_B                   what changed between two runs' fingerprints
    longhaul compare BASELINE NEW [--json]      per cell and metric: shift, interval, p, verdict
    longhaul history RUNS_DIR --profile NAME    the suite's series with change points
    longhaul suite SUITE [--config C]           run the suite, then compare with its previous run

compare and suite exit 0 (no regression), 3 (a regression), 2 (bad input: runs of different
profiles or cells, or too few repeats to reach the level).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.store.fingerprint import diff_fingerprints, fingerprint_of, summarise
from longhaul.collectors.store.format import StoreError
from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.collectors.studies.regression.samples import DEFAULT_LEVEL, scenario_label
from longhaul.core.errors import ConfigError

# The statistics (scipy, ruptures) and the report (matplotlib) are imported inside the commands, for
# start-up: `longhaul --help` and the other commands should not wait for them.


def register(sub) -> None:
    diff = sub.add_parser("diff", help="what changed between two runs' environment fingerprints")
    diff.add_argument("run_a", type=Path)
    diff.add_argument("run_b", type=Path)
    diff.add_argument("--json", action="store_true", help="one JSON object on stdout")
    diff.add_argument("--all", action="store_true", help="every changed key, not the summary")
    diff.set_defaults(func=cmd_diff)

    compare = sub.add_parser("compare", help="did NEW regress against BASELINE (exit 3 if so)")
    compare.add_argument("baseline", type=Path)
    compare.add_argument("new", type=Path)
    compare.add_argument("--level", type=float, default=DEFAULT_LEVEL,
                         help=f"family-wise false-alarm level of the whole comparison (default {DEFAULT_LEVEL})")
    compare.add_argument("--json", action="store_true", help="one JSON object on stdout")
    compare.set_defaults(func=cmd_compare)

    history = sub.add_parser("history", help="a suite's runs per cell and metric, with change points")
    history.add_argument("runs_dir", type=Path)
    history.add_argument("--profile", required=True, metavar="NAME")
    history.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    history.add_argument("--json", action="store_true")
    history.set_defaults(func=cmd_history)

    suite = sub.add_parser("suite", help="run a regression suite, then compare with its previous run")
    suite.add_argument("suite", metavar="SUITE", help="the suite's profile name (profiles/regression-*.toml)")
    suite.add_argument("--config", type=Path, default=Path("config.toml"))
    suite.add_argument("--out", type=Path, help="the suite's runs directory instead of [store] dir")
    suite.add_argument("--if-kernel-changed", action="store_true",
                       help="do nothing when the suite's newest run was on the kernel running now")
    suite.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    suite.set_defaults(func=cmd_suite)


def _load(path: Path, what: str) -> StoredRun:
    try:
        return load_store(path)
    except (StoreError, OSError) as exc:
        raise ConfigError(path, None, (what,), None, str(exc)) from None


def cmd_diff(args) -> int:
    a, b = _load(args.run_a, "RUN_A"), _load(args.run_b, "RUN_B")
    changes = diff_fingerprints(fingerprint_of(a.manifest), fingerprint_of(b.manifest))
    if args.json:
        print(json.dumps({"a": a.run_id, "b": b.run_id, "changes": [asdict(c) for c in changes],
                          "summary": summarise(changes)}, indent=1))
        return 0
    print(f"{a.run_id} -> {b.run_id}: {len(changes)} change(s)")
    lines = [f"{c.host}: {c.key}: {c.before} -> {c.after}" for c in changes] if args.all else summarise(changes)
    for line in lines:
        print(f"  {line}")
    return 0


def cmd_compare(args) -> int:
    from longhaul.collectors.studies.registry import RUN_METRICS
    from longhaul.collectors.studies.regression.compare import CompareError, compare_runs

    base, new = _load(args.baseline, "BASELINE"), _load(args.new, "NEW")
    try:
        comparison = compare_runs(base, new, args.level, run_metrics=RUN_METRICS)
    except CompareError as exc:
        raise ConfigError(args.new, None, ("NEW",), None, str(exc)) from None
    changes = summarise(diff_fingerprints(fingerprint_of(base.manifest), fingerprint_of(new.manifest)))
    if args.json:
        print(json.dumps({**comparison.to_dict(), "fingerprint_changes": changes}, indent=1))
    else:
        print_comparison(console(), comparison, changes)
    return comparison.exit_status()


def cmd_history(args) -> int:
    from longhaul.collectors.studies.registry import RUN_METRICS
    from longhaul.collectors.studies.regression.history import build_history, suite_runs

    if not args.runs_dir.is_dir():
        raise ConfigError(args.runs_dir, None, ("RUNS_DIR",), None, "not a directory")
    runs, skipped = suite_runs(args.runs_dir, args.profile)
    if not runs:
        raise ConfigError(args.runs_dir, None, ("--profile",), args.profile,
                          "no complete run of this profile below RUNS_DIR")
    history = build_history(runs, args.profile, args.level, skipped, RUN_METRICS)
    if args.json:
        print(json.dumps(asdict(history), indent=1))
    else:
        print_history(console(), history)
    return 0


def cmd_suite(args) -> int:
    from longhaul.appliance.report import write_report
    from longhaul.appliance.run.suite import SuiteOutcome, check_suite, kernel_unchanged, verdict
    from longhaul.collectors.studies.regression.compare import CompareError

    config = load_config(args.config, [args.suite])
    check_suite(config)
    runs_dir = args.out or config.store_dir
    if args.if_kernel_changed:
        same = kernel_unchanged(runs_dir, args.suite)
        if same:
            print(f"{args.suite}: the newest run was on {same}, the kernel running now: nothing to do")
            return SuiteOutcome(False, "kernel unchanged").exit_status()
    progress = Progress()
    try:
        store = Runner(config, progress, args.out).run()
    finally:
        progress.close()
    write_report(store.dir, tuple(config.data.report.formats))
    try:
        run, baseline, comparison = verdict(store.dir, args.suite, args.level)
    except CompareError as exc:      # the suite's profile changed since its baseline: say so, exit 2
        print(f"{args.suite}: not compared with the previous run: {exc}\n{store.dir}")
        return 2
    outcome = SuiteOutcome(True, str(store.dir), run, baseline, comparison)
    if comparison is not None:
        changes = summarise(diff_fingerprints(fingerprint_of(baseline.manifest), fingerprint_of(run.manifest)))
        print_comparison(console(), comparison, changes)
    else:
        print(f"{args.suite}: {run.status}; " + ("no earlier complete run to compare with" if baseline is None
                                                 else f"baseline {baseline.run_id} not compared"))
    print(store.dir)
    return outcome.exit_status()


# --- terminal output ---------------------------------------------------------------------------

def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f} %"


VERDICT_TEXT = {"regression": "[red]REGRESSION[/]", "improvement": "[green]improvement[/]",
                "no significant change": "-", "too few repeats": "too few repeats"}


def console() -> Console:
    """The terminal's width, or a wide one for logs and the journal (a table folded at 80 columns
    cannot be read there)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def print_comparison(out: Console, c, changes: list[str]) -> None:
    out.print(f"[bold]{c.baseline}[/] ({c.kernels[0] or '?'}) -> [bold]{c.new}[/] ({c.kernels[1] or '?'}), "
              f"profile {', '.join(c.profiles)}, level {c.level:g} over {c.tests} tests (Holm)")
    table = Table("scenario", "metric", "n", "baseline -> new", "shift (HL)", "95 % CI", "p", "verdict", "note")
    for r in c.rows:
        table.add_row(escape(scenario_label(r.scenario, r.calibration)), escape(f"{r.metric} {r.unit}".strip()),
                      f"{r.n_base}+{r.n_new}", f"{r.base_median:.4g} -> {r.new_median:.4g}",
                      f"{r.shift:+.3g} ({_pct(r.relative)})" if r.relative is not None else f"{r.shift:+.3g}",
                      escape(f"[{r.ci_low:+.3g}, {r.ci_high:+.3g}]"), "" if r.p is None else f"{r.p:.2g}",
                      VERDICT_TEXT.get(r.verdict, escape(r.verdict)), escape(r.note))
    out.print(table)
    for r in c.host_changed:
        out.print(f"calibration: {escape(r.metric)} {_pct(r.relative)} ({r.verdict}): the host itself changed; "
                  f"verdicts above may be the host's, not the transport's")
    out.print("fingerprint: " + ("no change" if not changes else ""))
    for line in changes:
        out.print(f"  {escape(line)}", highlight=False)
    out.print(f"[red]regression[/]: {len(c.regressions)} metric(s)" if c.regressions else escape(c.status))


def print_history(out: Console, h) -> None:
    out.print(f"{h.profile}: {len(h.runs)} run(s)")
    for line in h.skipped:
        out.print(f"  skipped {escape(line)}")
    table = Table("scenario", "metric", "runs", "first", "last", "change points")
    for s in h.series:
        marks = "; ".join(f"{ch.run}: {ch.before:.4g} -> {ch.after:.4g} {_pct(ch.relative)} (p {ch.p:.2g})"
                          + (f" [{', '.join(ch.changed)}]" if ch.changed else "") for ch in s.changes)
        table.add_row(escape(scenario_label(s.scenario, s.calibration)), escape(f"{s.metric} {s.unit}".strip()),
                      str(len(s.points)), f"{s.points[0].value:.4g}", f"{s.points[-1].value:.4g}", escape(marks or "none"))
    out.print(table)
