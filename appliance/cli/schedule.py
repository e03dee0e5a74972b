"""`longhaul schedule`: run a suite on a calendar and after every kernel change, unattended.

    longhaul schedule SUITE [--config C] [--on-calendar SPEC] [--on-kernel-change]
                            [--manager systemd|cron] [--root DIR] [--print]
    longhaul schedule SUITE --remove [--root DIR]

The units are appliance/schedule/units.py's, installed by appliance/schedule/install.py. The
suite and the config are checked first (the config loads, profiles/SUITE.toml is in its
profile_dir), the calendar by systemd's parser, the units by `systemd-analyze verify`: any
refusal is exit 2 with nothing written. --print shows the files (systemd's verified) and writes
none. --root prepares another tree (an image): --config is then the path inside it. Exit status:
0 done, 2 bad input or a refused unit.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from longhaul.appliance.config.load import load_config
from longhaul.appliance.schedule import install as inst
from longhaul.appliance.schedule import units
from longhaul.core.errors import ConfigError

IMAGE_LONGHAUL = Path("/usr/local/bin/longhaul")      # the appliance image's (appliance/image/build.py)


def register(sub) -> None:
    p = sub.add_parser("schedule", help="run a suite on a calendar and after kernel changes "
                                        "(a systemd timer and boot unit, or cron)")
    p.add_argument("suite", metavar="SUITE", help="a profile name (profiles/SUITE.toml)")
    p.add_argument("--config", type=Path, default=Path("config.toml"))
    p.add_argument("--on-calendar", metavar="SPEC", help="a systemd calendar spec, e.g. 'Mon..Fri 02:00' or daily")
    p.add_argument("--on-kernel-change", action="store_true",
                   help="at every boot, run the suite when the kernel is not its newest run's")
    p.add_argument("--remove", action="store_true", help="disable and delete what was installed for SUITE")
    p.add_argument("--manager", choices=sorted(inst.MANAGERS), help="default: systemd where it runs, else cron")
    p.add_argument("--root", type=Path, default=Path("/"), help="install into this tree instead of /")
    p.add_argument("--print", action="store_true", dest="print_only", help="show the files; install nothing")
    p.add_argument("--longhaul", type=Path, metavar="PATH",
                   help="the longhaul executable the units run (default: this one; in a --root tree "
                        f"that has it, {IMAGE_LONGHAUL})")
    p.set_defaults(func=cmd_schedule)


def cmd_schedule(args) -> int:
    if args.remove:
        if args.on_calendar or args.on_kernel_change or args.print_only:
            raise ConfigError.option("--remove", None, "takes only SUITE and --root")
        outcome = inst.remove(args.suite, args.root)
        for path in outcome.removed:
            print(f"removed {path}")
        if outcome.unchanged:
            print(f"nothing of suite {args.suite} is installed under {args.root}")
        return 0
    plan = _plan(args)
    if plan.on_calendar is not None:
        inst.check_calendar(plan.on_calendar)
    manager = args.manager or inst.choose_manager(args.root)
    if args.print_only:
        if manager == "systemd":            # shown only once systemd-analyze verify takes them
            inst.verify(units.systemd_units(plan), args.root)
        for path, text in inst.files_of(plan, manager).items():
            print(f"# {path}\n{text}")
        return 0
    outcome = inst.install(plan, args.root, manager)
    for path in outcome.removed:
        print(f"removed {path}")
    for path in outcome.written:
        print(f"wrote {path}")
    for argv in outcome.commands:
        print("ran " + " ".join(argv))
    if outcome.unchanged:
        print(f"suite {plan.suite}: already installed as planned ({manager})")
    return 0


def _plan(args) -> units.SchedulePlan:
    """The suite and config checked as `longhaul check` loads them, before anything is written."""
    units.check_suite(args.suite)
    live = inst.is_live(args.root)
    if not live and not args.config.is_absolute():
        raise ConfigError.option("--config", str(args.config), "with --root, the absolute path inside the tree")
    target = Path(os.path.abspath(args.config)) if live else args.config
    here = target if live else args.root / str(target).lstrip("/")
    try:
        load_config(here, [args.suite])
    except ConfigError as exc:
        if exc.keypath == ("--profile",):     # the loader's words for a missing profile
            raise ConfigError.option("SUITE", args.suite, exc.allowed) from None
        raise
    longhaul = args.longhaul or _longhaul(args.root)
    return units.make_plan(args.suite, str(target), str(longhaul), args.on_calendar, args.on_kernel_change)


def _longhaul(root: Path) -> Path:
    """The executable that runs now (the units then run the same longhaul), or the image's."""
    if not inst.is_live(root) and (root / str(IMAGE_LONGHAUL).lstrip("/")).exists():
        return IMAGE_LONGHAUL
    invoked = Path(sys.argv[0])
    if invoked.name == "longhaul" and invoked.is_absolute() and os.access(invoked, os.X_OK):
        return invoked
    for candidate in (shutil.which("longhaul"), Path(sys.prefix) / "bin/longhaul"):
        if candidate and os.access(candidate, os.X_OK):
            return Path(os.path.abspath(candidate))
    raise ConfigError.option("--longhaul", None, "no longhaul executable found: give its path")
