"""`longhaul export` and `longhaul report --from-influx` (docs/telemetry.md).

    longhaul export RUN_DIR... [--config config.toml] [--rebuild]
    longhaul report --from-influx RUN_ID [--config config.toml] [--out DIR]

The destination is config.toml's `[store] influx`, its credential from the environment or the
file it names. Exit status: 0 everything shipped, 1 the server could not take it all (the offsets
reached are kept: run export again), 2 a bad argument, config or credential.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from longhaul.appliance.config.load import Config, load_config
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx.backfill import export_run, spooled_counts
from longhaul.collectors.store.influx.mirror import preflight
from longhaul.collectors.store.influx.readback import NotInDatabase, rebuild_run
from longhaul.collectors.store.influx.targets import Target, TargetDown
from longhaul.core.errors import ConfigError


def register(sub) -> None:
    export = sub.add_parser("export", help="ship runs to the InfluxDB of [store] influx (what their spool "
                                           "still holds, or the whole run rebuilt from its files)")
    export.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    export.add_argument("--config", type=Path, default=Path("config.toml"))
    export.add_argument("--rebuild", action="store_true",
                        help="write the spool anew from the run's files first (an old run, or to re-ship all)")
    export.set_defaults(func=cmd_export)


def report_options(report) -> None:
    report.add_argument("--from-influx", metavar="RUN_ID",
                        help="rebuild the run from the InfluxDB of [store] influx, then write its report")
    report.add_argument("--config", type=Path, default=Path("config.toml"))
    report.add_argument("--out", type=Path, help="where the rebuilt run directory goes (default: [store] dir "
                                                 "/from-influx)")


def _target(config_path: Path) -> tuple[Config, Target]:
    config = load_config(config_path)
    settings = config.data.store.influx
    if settings is None:
        raise ConfigError(config.path, None, ("store", "influx"), None,
                          "no InfluxDB is configured: add [store] influx = { url = ..., database = ... }")
    return config, preflight(settings, config.influx_credential)


def cmd_export(args) -> int:
    for run_dir in args.run_dirs:
        if not (run_dir / fmt.MANIFEST).is_file():
            raise ConfigError(run_dir, None, (), None, f"not a longhaul run directory (no {fmt.MANIFEST})")
    config, target = _target(args.config)
    console = Console()
    failed = False
    try:
        for run_dir in args.run_dirs:
            try:
                done = export_run(run_dir, target, rebuild=args.rebuild, batch_lines=config.data.store.influx.batch_lines)
            except TargetDown as exc:
                console.print(f"{run_dir}: {target.destination}: {exc}; shipped so far is recorded, run export again")
                failed = True
                continue
            report = done.report
            console.print(f"{run_dir}: {'rebuilt from its files, ' if done.rebuilt else ''}shipped "
                          f"{report.shipped_lines} lines from {', '.join(done.files)} to {target.destination}"
                          + (f"; {report.rejected_lines} rejected (see influx/rejected.lp)" if report.rejected_lines else ""))
            for problem in done.problems[:10]:
                console.print(f"  [yellow]{problem}[/yellow]")
            console.print(_counts_table(run_dir))
    finally:
        target.close()
    return 1 if failed else 0


def _counts_table(run_dir: Path) -> Table:
    table = Table(title="points per measurement (each series and time once)")
    table.add_column("measurement")
    table.add_column("points", justify="right")
    for name, count in sorted(spooled_counts(run_dir).items()):
        table.add_row(name, str(count))
    return table


def report_from_influx(args, write_report) -> int:
    """write_report: the report writer (the caller imports it late, for start-up)."""
    config, target = _target(args.config)
    out = args.out or config.store_dir / "from-influx"
    try:
        run_dir = rebuild_run(target, args.from_influx, out)
    except NotInDatabase as exc:
        raise ConfigError.option("--from-influx", args.from_influx, str(exc)) from None
    except TargetDown as exc:
        print(f"longhaul: {target.destination}: {exc}")
        return 1
    finally:
        target.close()
    print(run_dir)
    for path in write_report(run_dir, tuple(args.formats or ("html", "pdf"))):
        print(path)
    return 0
