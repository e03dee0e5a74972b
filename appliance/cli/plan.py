"""Facility planning from transfer logs (seed 003; docs/planning.md):

    longhaul plan LOGS... [--config plan.toml] [--json] [--out DIR]
    longhaul plan --synthetic SEED ...          a generated day, for a facility with no logs
    longhaul plan LOGS... --replay [--lab-config config.toml]   also replay the trace in the lab

Exit 0 with the plan written; 2 on bad input (no valid transfer, a bad plan file).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from longhaul.appliance.config.load import load_config
from longhaul.appliance.plan.replay import replay_plan
from longhaul.collectors.studies.planning import synthetic
from longhaul.collectors.studies.planning.inputs import read_traces
from longhaul.collectors.studies.planning.replay_record import read_replay, unfaithful_legs
from longhaul.collectors.studies.planning.settings import load_plan
from longhaul.collectors.studies.planning.sweep import REPLAY_DIR, headline, run_plan, write_plan
from longhaul.collectors.studies.planning.trace import TraceError

SHOWN_PROBLEMS = 10


def register(sub) -> None:
    plan = sub.add_parser("plan", help="facility planning: OD/BE transfers at higher load, from transfer logs")
    plan.add_argument("logs", type=Path, nargs="*", metavar="LOGS",
                      help="GridFTP transfer logs or CSV files (start,end,bytes[,class])")
    plan.add_argument("--synthetic", type=int, metavar="SEED", help="plan a generated day instead of logs")
    plan.add_argument("--config", type=Path, metavar="PLAN_TOML", help="the sweep and replay settings (plan.toml)")
    plan.add_argument("--name", help="the trace's name in the report (default: the first log's name)")
    plan.add_argument("--out", type=Path, help="write plan.json and the report here (default plans/NAME-TIME)")
    plan.add_argument("--format", action="append", dest="formats", choices=["html", "pdf"],
                      help="report formats (default both)")
    plan.add_argument("--json", action="store_true", help="the plan document on stdout")
    plan.add_argument("--replay", action="store_true", help="also replay the trace through the lab (section 6)")
    plan.add_argument("--lab-config", type=Path, default=Path("config.toml"),
                      help="the lab to replay through (a longhaul config.toml)")
    plan.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    err = Console(stderr=True, highlight=False)
    settings = load_plan(args.config)
    lab_config = load_config(args.lab_config) if args.replay else None   # validated before anything runs
    if (args.synthetic is None) == (not args.logs):
        err.print("longhaul plan: give transfer logs or --synthetic SEED (one of the two)")
        return 2
    try:
        trace = synthetic.generate(seed=args.synthetic) if args.synthetic is not None else read_traces(args.logs, args.name)
    except TraceError as exc:
        err.print(f"longhaul plan: {escape(str(exc))}")
        return 2
    if args.name:
        trace.name = args.name
    _print_problems(err, trace)
    try:
        doc = run_plan(trace, settings.sweep)
    except ValueError as exc:
        err.print(f"longhaul plan: {escape(str(exc))}")
        return 2
    out = args.out or Path("plans") / f"{trace.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    out.mkdir(parents=True, exist_ok=True)
    plan_path = write_plan(doc, out)
    replay = None
    if lab_config is not None:
        result = replay_plan(lab_config, trace, settings.replay, out / REPLAY_DIR, progress=err.print)
        replay = read_replay(result.path)
        if unfaithful := unfaithful_legs(replay):
            err.print(f"longhaul plan: the replay measured this lab more than the schedule ({'; '.join(unfaithful)}); "
                      "the report says so")
    from longhaul.collectors.studies.planning.report import write_plan_report  # matplotlib: only when writing

    written = write_plan_report(doc, out, tuple(args.formats or ("html", "pdf")), replay)
    if args.json:
        print(json.dumps(doc))
    else:
        _print_summary(Console(highlight=False), doc)
    for path in [plan_path, *written]:
        err.print(f"wrote {path}")
    return 0


def _print_problems(err: Console, trace) -> None:
    if not trace.problems:
        return
    err.print(f"{trace.failed} failed transfer(s) counted, not planned; {trace.malformed} line(s) not read:")
    for p in trace.problems[:SHOWN_PROBLEMS]:
        err.print(f"  {escape(p.where)}: {escape(p.reason)}")
    if len(trace.problems) > SHOWN_PROBLEMS:
        err.print(f"  ... and {len(trace.problems) - SHOWN_PROBLEMS} more (plan.json lists them all)")


def _print_summary(console: Console, doc: dict) -> None:
    t = doc["trace"]
    console.print(f"{t['name']}: {t['transfers']:,} transfers over {t['span_s'] / 3600:.1f} h, "
                  f"peak {t['logged']['peak_bps'] / 1e9:.2f} Gb/s, mean {t['logged']['mean_bps'] / 1e9:.2f} Gb/s; "
                  f"{len(doc['configs'])} configurations in {doc['seconds']:.1f} s")
    table = Table("load", "OD transfers", "OD bandwidth", "avg BS OD", "avg BS BE", "max BS OD", "max BS BE",
                  "gap vs 1x")
    for b in doc["baseline"]:
        table.add_row(f"{b['load_ratio']:g}x", "all BE", "–", "–", f"{b['avg_bs_all']:.2f}", "–",
                      f"{b['max_bs_all']:.1f}", _pct(b["gap_change"]))
    for c in doc["configs"]:
        table.add_row(f"{c['load_ratio']:g}x", f"{c['od_transfers_pct']:g} %", f"{c['od_bandwidth_pct']:g} %",
                      _num(c["avg_bs_od"], 2), _num(c["avg_bs_be"], 2), _num(c["max_bs_od"], 1),
                      _num(c["max_bs_be"], 1), _pct(c["gap_change"]))
    console.print(table)
    for line in headline(doc):
        console.print(line)


def _num(value, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "–" if value is None else f"{value * 100:+.0f} %"
