"""The longhaul command: run, check, report, export, clean, profiles.

Exit status: 0 success, 2 a bad config or arguments (nothing was set up), 1 a failed run.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from longhaul.appliance.cli import analyze as analyze_cmd
from longhaul.appliance.cli import influx as influx_cmd
from longhaul.appliance.cli import netboot as netboot_cmd
from longhaul.appliance.cli import ops as ops_cmd
from longhaul.appliance.cli import ops_lab as ops_lab_cmd
from longhaul.appliance.cli import plan as plan_cmd
from longhaul.appliance.cli import regression as regression_cmd
from longhaul.appliance.cli import schedule as schedule_cmd
from longhaul.appliance.cli import serve as serve_cmd
from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.config.profiles import load_profile
from longhaul.appliance.run.jobs import plan
from longhaul.appliance.run.preflight import check_lab, needs_of, with_fallbacks
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store import invariants
from longhaul.collectors.store.influx.mirror import preflight
from longhaul.collectors.store.reader import StoreError, load_store
from longhaul.collectors.store.records import CellEntry, FlowStats
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.core.errors import ConfigError, PreflightError, RunError
from longhaul.drivers.registry import TOOLS, tool_for
from longhaul.hardware.backends.registry import leftovers
from longhaul.hardware.backends.ssh.check import check_inventory
from longhaul.hardware.cleanup import Interrupted


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except BrokenPipeError:  # `longhaul ... --json | head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    except (ConfigError, PreflightError, RunError) as exc:
        print(f"longhaul: {exc}", file=sys.stderr)
        return exc.exit_status
    except Interrupted as exc:   # ops record / ops run: their teardown has run; written files stay
        print(f"longhaul: {exc}; the lab is torn down, what was written so far is kept", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="longhaul", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="validate, build the lab, run the profiles, write the report")
    run.add_argument("--config", type=Path, default=Path("config.toml"))
    run.add_argument("--profile", action="append", dest="profiles", metavar="NAME",
                     help="run this profile instead of config.toml's list (repeatable)")
    run.add_argument("--out", type=Path, help="store runs below this directory instead of [store] dir")
    run.add_argument("--time-scale", type=float, metavar="X",
                     help="multiply every flow duration by X (overrides the profiles' time_scale)")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR",
                     help="finish an interrupted run: only its missing or failed trials run, in its order")
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check", help="validate the config and profiles and run the preflight")
    check.add_argument("--config", type=Path, default=Path("config.toml"))
    check.add_argument("--profile", action="append", dest="profiles", metavar="NAME")
    check.add_argument("--time-scale", type=float, metavar="X")
    check.add_argument("--inventory", type=Path, metavar="PATH",
                       help="check the real lab's hosts over SSH instead (docs/hardware.md); the config's "
                            "profiles, if it exists, say which tools and congestion controls they need")
    check.set_defaults(func=cmd_check)

    report = sub.add_parser("report", help="write the report of a run from its store")
    report.add_argument("run_dir", type=Path, nargs="?")
    report.add_argument("--format", action="append", dest="formats", choices=["html", "pdf"])
    influx_cmd.report_options(report)
    report.set_defaults(func=cmd_report)

    inv = sub.add_parser("invariants", help="check stored runs: no second above the bottleneck's payload ceiling, "
                                            "no RTT below the configured propagation delay (exit 1 if any)")
    inv.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    inv.set_defaults(func=cmd_invariants)

    clean = sub.add_parser("clean", help="remove what crashed longhaul runs left behind")
    clean.add_argument("--dry-run", action="store_true")
    clean.set_defaults(func=cmd_clean)

    profiles = sub.add_parser("profiles", help="list the profiles with one-line descriptions")
    profiles.add_argument("--config", type=Path, default=Path("config.toml"))
    profiles.set_defaults(func=cmd_profiles)
    analyze_cmd.register(sub)  # analyses with commands of their own
    influx_cmd.register(sub)
    ops_lab_cmd.add_parsers(ops_cmd.register(sub))
    schedule_cmd.register(sub)
    netboot_cmd.register(sub)
    regression_cmd.register(sub)
    plan_cmd.register(sub)
    serve_cmd.register(sub)
    return parser


def cmd_run(args) -> int:
    from longhaul.appliance.report import write_report  # start-up: the report brings matplotlib

    resume = None
    if args.resume:
        try:
            resume = FileRunWriter.open(args.resume)
        except FileNotFoundError as exc:
            raise ConfigError(args.resume, None, ("--resume",), None, str(exc)) from None
        config = load_config(resume.dir / fmt.CONFIG_SNAPSHOT, list(resume.manifest.profiles),
                             resume.manifest.time_scale_override, profile_dir=resume.dir / fmt.PROFILES_DIR)
    else:
        config = load_config(args.config, args.profiles, args.time_scale)
    progress = Progress()
    runner = Runner(config, progress, args.out, resume=resume)
    try:
        store = runner.run()
    except Interrupted as exc:
        progress.close()
        print(f"longhaul: {exc}; the lab is torn down, results so far are kept", file=sys.stderr)
        if runner.store is None:
            return 1
        store = runner.store
    finally:
        progress.close()
    paths = write_report(store.dir, tuple(config.data.report.formats))
    _print_results(store)
    for path in paths:
        print(f"report: {path}")
    print(store.dir)
    failed = store.manifest.status != "complete"
    return 1 if failed else 0


def cmd_check(args) -> int:
    console = Console()
    if args.inventory is not None:      # a real lab's machines, with or without a config
        wanted = args.config.is_file() or args.profiles
        config = load_config(args.config, args.profiles, args.time_scale) if wanted else None
        return check_inventory(args.inventory, needs_of(config) if config else None, console)
    config = load_config(args.config, args.profiles, args.time_scale)
    cells = plan(config)
    console.print(f"config {config.path}: valid; {len(config.profiles)} profile(s), {len(cells)} cell(s), "
                  f"{sum(c.repeats for c in cells)} trial(s); lab backend {config.backend.name}")
    readiness = config.backend.check(config.lab, needs_of(config), console)
    if readiness.runs_tools_here:
        console.print(_tools_table(config))
    if not readiness.ready:
        return 1
    check_lab(with_fallbacks(config, readiness.congestion_controls), readiness.congestion_controls,
              readiness.runs_tools_here)
    influx = config.data.store.influx
    if influx is not None:       # the run's own preflight: reachable, credential, database or bucket
        preflight(influx, config.influx_credential).close()
        console.print(f"InfluxDB: {influx.destination} answers and takes the credential from "
                      f"{config.influx_credential.source if config.influx_credential.secret else 'nowhere (none needed)'}")
    console.print("ready")
    return 0


def _tools_table(config) -> Table:
    """Every traffic tool: its programs here, and whether the chosen profiles use it."""

    used = {f.tool for p in config.profiles for spec in p.cells for f in spec.cell.flows}
    table = Table(title="traffic tools")
    for column in ("tool", "used", "programs", "ready"):
        table.add_column(column)
    for name in TOOLS:
        tool = tool_for(name)
        programs = [f"{exe} [red](missing)[/red]" if not shutil.which(exe) else exe for exe in tool.executables]
        ready = ("[yellow]needs a generator host[/yellow]" if tool.sends_from == "generator"
                 else _yes(all(shutil.which(exe) for exe in tool.executables)))
        table.add_row(name, "yes" if name in used else "", " ".join(programs), ready)
    return table


def cmd_report(args) -> int:
    from longhaul.appliance.report import write_report  # start-up: the report brings matplotlib

    if (args.run_dir is None) == (args.from_influx is None):
        raise ConfigError.option("report", None, "give a RUN_DIR or --from-influx RUN_ID (one of them)")
    if args.from_influx:
        return influx_cmd.report_from_influx(args, write_report)
    if not (args.run_dir / fmt.SUMMARY).is_file():
        raise ConfigError(args.run_dir, None, (), None, f"not a longhaul run directory (no {fmt.SUMMARY})")
    for path in write_report(args.run_dir, tuple(args.formats or ("html", "pdf"))):
        print(path)
    return 0


def cmd_invariants(args) -> int:
    trials = broken = 0
    for run_dir in args.run_dirs:
        try:
            checks = invariants.check_run(load_store(run_dir))
        except StoreError as exc:
            raise ConfigError(run_dir, None, ("RUN_DIR",), None, str(exc)) from None
        trials += len(checks)
        for check in checks:
            broken += not check.ok
            for line in invariants.describe(check):
                print(f"{run_dir}: {line}")
    print(f"invariants: {broken} of {trials} trials break them")
    return 1 if broken else 0


def cmd_clean(args) -> int:

    stale = leftovers(remove=not args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for name in stale:
        print(f"{verb} {name}")
    if not stale:
        print("nothing to clean")
    return 0


def cmd_profiles(args) -> int:
    config_dir = args.config.parent if args.config.is_file() else Path(".")
    profile_dir = config_dir / "profiles"
    if args.config.is_file():
        profile_dir = load_config(args.config).profile_dir
    for path in sorted(Path(profile_dir).glob("*.toml")):
        profile = load_profile(path)
        print(f"{profile.name:24s} {len(profile.cells):3d} cells x {profile.meta.repeats}  {profile.meta.description}")
    return 0


def _print_results(store: FileRunWriter) -> None:
    table = Table(title=f"results: {store.run_id}")
    for column in ("cell", "scenario", "lab RTT / rate", "flows (mean Mb/s)", "Jain"):
        table.add_column(column)
    for cell in store.cells:
        flows = ", ".join(f"{name} {_mean_std(s)}" for name, s in (cell.stats.flows if cell.stats else {}).items())
        table.add_row(cell.id, cell.scenario, _lab_text(cell), flows or cell.status or "-",
                      "-" if cell.jain is None else f"{cell.jain:.3f}")
    Console().print(table)


def _lab_text(cell: CellEntry) -> str:
    if cell.lab is None:
        return "-"
    return f"{_num(cell.lab.measured_rtt_ms)} ms / {_num(cell.lab.measured_rate_mbps)} Mb/s"


def _mean_std(stats: FlowStats) -> str:
    """A mean, with its spread only when two or more trials give one (one trial has none)."""
    if (stats.n or 0) < 2:
        return _num(stats.mean_mbps)
    return f"{_num(stats.mean_mbps)}±{_num(stats.std_mbps)}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


if __name__ == "__main__":
    sys.exit(main())
