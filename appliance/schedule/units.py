"""What `longhaul schedule` installs, as text: systemd units and their cron fallback. Pure.

For suite S, config C and the longhaul executable L:

- `longhaul-suite-S.service` runs `L suite S --config C` once (Type=oneshot), started by
- `longhaul-suite-S.timer` on a calendar (OnCalendar=, Persistent: a run missed while the host
  was off happens at the next boot);
- `longhaul-suite-S-boot.service` runs `L suite S --config C --if-kernel-changed` at every boot:
  the suite command itself does nothing when the suite's newest run was on the running kernel.
- `/etc/cron.d/longhaul-suite-S` holds the same two where there is no systemd: the calendar
  converted to cron's fields (the forms nightly and weekly suites are written in; others are
  refused, naming these) and `@reboot` for the kernel check.

Exit 3 of the suite (a regression) fails the systemd unit on purpose, so a facility's alerting
hooks it with an OnFailure= drop-in. Every file starts with a marker line naming its suite;
removal deletes only files that carry it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from longhaul.core.errors import ConfigError
from longhaul.core.model import NAME

UNIT_DIR = PurePosixPath("/etc/systemd/system")
CRON_DIR = PurePosixPath("/etc/cron.d")
FIRSTBOOT = "longhaul-firstboot.service"       # the appliance's identity and addresses; absent elsewhere
# shorter than a day, so a hung nightly run is stopped before the next one is due
TIMEOUT_START = "23h"
RANDOM_DELAY = "120"                            # seconds: spreads a fleet of controllers a little
BOOT_DELAY_S = 60                               # cron's @reboot: before the network is surely up
# what systemd (ExecStart, specifiers, environment) and cron (% is a newline there) would rewrite
UNSAFE_PATH = re.compile(r"[\s\"'\\%$`;&|<>*?]")
CRON_FORMS = ("daily, weekly, hourly, 'HH:MM[:00]', '*-*-* HH:MM[:00]', 'DAYS HH:MM[:00]' or "
              "'DAYS *-*-* HH:MM[:00]' (DAYS: Mon, Mon..Fri, Mon,Wed,Fri; seconds 00, no time zone)")


@dataclass(frozen=True)
class SchedulePlan:
    suite: str
    config: PurePosixPath          # absolute, as the scheduled system sees it
    longhaul: PurePosixPath        # absolute path of the longhaul executable there
    on_calendar: str | None = None
    on_kernel_change: bool = False

    @property
    def workdir(self) -> PurePosixPath:
        return self.config.parent


def check_suite(suite: str) -> str:
    """A suite is a profile name; one ending in -boot would share its unit's name with the boot
    unit of another suite."""
    if not re.fullmatch(NAME, suite) or suite.endswith("-boot"):
        raise ConfigError.option("SUITE", suite,
                          "a profile name: a letter, then up to 31 letters, digits, _ or -, not ending in -boot")
    return suite


def make_plan(suite: str, config: str, longhaul: str, on_calendar: str | None = None,
              on_kernel_change: bool = False) -> SchedulePlan:
    check_suite(suite)
    if on_calendar is None and not on_kernel_change:
        raise ConfigError.option(None, None, "give --on-calendar SPEC, --on-kernel-change or both (or --remove)")
    if on_calendar is not None and (not on_calendar.strip() or any(ord(c) < 32 for c in on_calendar)):
        raise ConfigError.option("--on-calendar", on_calendar, "a systemd calendar spec on one line")
    for key, path in (("--config", config), ("--longhaul", longhaul)):
        if not str(path).startswith("/") or UNSAFE_PATH.search(str(path)):
            raise ConfigError.option(key, str(path),
                              "an absolute path without spaces, quotes, backslashes or any of %$`;&|<>*? "
                              "(systemd and cron would read them)")
    return SchedulePlan(suite, PurePosixPath(config), PurePosixPath(longhaul),
                        on_calendar.strip() if on_calendar else None, on_kernel_change)


def marker(suite: str) -> str:
    return f"# longhaul schedule: suite {suite} (generated; undo with `longhaul schedule {suite} --remove`)"


def service_name(suite: str) -> str:
    return f"longhaul-suite-{suite}.service"


def timer_name(suite: str) -> str:
    return f"longhaul-suite-{suite}.timer"


def boot_name(suite: str) -> str:
    return f"longhaul-suite-{suite}-boot.service"


def cron_name(suite: str) -> str:
    return f"longhaul-suite-{suite}"       # cron.d ignores names with dots


def unit_names(suite: str) -> tuple[str, str, str]:
    return service_name(suite), timer_name(suite), boot_name(suite)


def suite_argv(plan: SchedulePlan, kernel_check: bool = False) -> list[str]:
    argv = [str(plan.longhaul), "suite", plan.suite, "--config", str(plan.config)]
    return argv + ["--if-kernel-changed"] if kernel_check else argv


def _service(plan: SchedulePlan, description: str, after: list[str], kernel_check: bool) -> list[str]:
    return [
        marker(plan.suite),
        "[Unit]",
        f"Description={description}",
        # Wants/After only: the unit also runs where longhaul-firstboot does not exist
        "Wants=network-online.target",
        "After=" + " ".join(["network-online.target", FIRSTBOOT, *after]),
        f"ConditionPathExists={plan.config}",
        "",
        "[Service]",
        "Type=oneshot",
        f"WorkingDirectory={plan.workdir}",
        "ExecStart=" + " ".join(suite_argv(plan, kernel_check)),
        "# exit 3 is a regression: it is deliberately not in SuccessExitStatus=, so the unit fails",
        "# and a facility's alerting hooks it with an OnFailure= drop-in (2 and 1 fail it too)",
        f"TimeoutStartSec={TIMEOUT_START}",
        "# an ordinary job: a niced or idle-I/O benchmark would measure its own priority, not the kernel",
        "Nice=0",
        "CPUSchedulingPolicy=other",
        "IOSchedulingClass=best-effort",
        "IOSchedulingPriority=4",
        "# SIGTERM to longhaul alone: it tears its lab down (its processes by pid), then the rest goes",
        "KillMode=mixed",
        "TimeoutStopSec=120",
    ]


def service_unit(plan: SchedulePlan) -> str:
    """The calendar's run. Ordered after the boot unit, so that a Persistent timer catching up at
    boot waits for a kernel-change run instead of sharing the lab with it."""
    lines = _service(plan, f"longhaul suite {plan.suite}", [boot_name(plan.suite)], kernel_check=False)
    return "\n".join(lines) + "\n"


def timer_unit(plan: SchedulePlan) -> str:
    if plan.on_calendar is None:
        raise ValueError("a timer needs a calendar")
    return "\n".join([
        marker(plan.suite),
        "[Unit]",
        f"Description=longhaul suite {plan.suite} on a calendar",
        "",
        "[Timer]",
        f"OnCalendar={plan.on_calendar}",
        "Persistent=true",
        f"RandomizedDelaySec={RANDOM_DELAY}",
        f"Unit={service_name(plan.suite)}",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]) + "\n"


def boot_unit(plan: SchedulePlan) -> str:
    """At every boot; the suite command runs only when the kernel is not its newest run's."""
    lines = _service(plan, f"longhaul suite {plan.suite} when the running kernel is new to it", [],
                     kernel_check=True)
    return "\n".join([*lines, "", "[Install]", "WantedBy=multi-user.target"]) + "\n"


def systemd_units(plan: SchedulePlan) -> dict[str, str]:
    """Unit name -> text, only the units the plan asks for."""
    units: dict[str, str] = {}
    if plan.on_calendar is not None:
        units[service_name(plan.suite)] = service_unit(plan)
        units[timer_name(plan.suite)] = timer_unit(plan)
    if plan.on_kernel_change:
        units[boot_name(plan.suite)] = boot_unit(plan)
    return units


def wants_links(units: dict[str, str]) -> dict[str, str]:
    """What `systemctl enable` makes: <target>.wants/<unit> -> /etc/systemd/system/<unit>, for
    every WantedBy= of every unit (relative to the unit directory)."""
    links = {}
    for name, text in units.items():
        for line in text.splitlines():
            if line.startswith("WantedBy="):
                for target in line.split("=", 1)[1].split():
                    links[f"{target}.wants/{name}"] = str(UNIT_DIR / name)
    return links


_DAYS = {d: i for i, d in enumerate(("mon", "tue", "wed", "thu", "fri", "sat", "sun"), start=1)}
_FULL_DAYS = {f: d for d, f in zip(_DAYS, ("monday", "tuesday", "wednesday", "thursday", "friday",
                                            "saturday", "sunday"))}
_SHORTHANDS = {"hourly": "0 * * * *", "daily": "0 0 * * *", "weekly": "0 0 * * 1"}   # systemd's meaning
_TIME = re.compile(r"(\d{1,2}|\*):(\d{2})(?::(\d{2}))?")      # "*:00:00" is systemd's own hourly


def _day(word: str) -> int:
    key = _FULL_DAYS.get(word.lower(), word.lower())
    if key not in _DAYS:
        raise ValueError(word)
    return _DAYS[key]


def _cron_days(text: str) -> str:
    """Mon..Fri,Sun -> 1-5,0 (systemd counts Mon=1..Sun=7; cron takes 0 or 7 for Sunday)."""
    parts = []
    for item in text.split(","):
        first, dots, last = item.partition("..")
        a, b = _day(first), _day(last) if dots else None
        if b is None:
            parts.append(str(a % 7))
        elif a < b:
            parts.append(f"{a}-{b}")
        else:
            raise ValueError(item)
    return ",".join(parts)


def cron_schedule(spec: str) -> str:
    """A systemd calendar spec as cron's five fields, for the forms suites are scheduled with;
    anything else is refused rather than approximated."""
    words = spec.split()
    if len(words) == 1 and words[0].lower() in _SHORTHANDS:
        return _SHORTHANDS[words[0].lower()]
    try:
        *days, time = words
        if days and days[-1] == "*-*-*":
            days = days[:-1]
        if len(days) > 1:
            raise ValueError(spec)
        m = _TIME.fullmatch(time)
        if not m or (m[1] != "*" and int(m[1]) > 23) or int(m[2]) > 59 or int(m[3] or 0) != 0:
            raise ValueError(time)
        dow = _cron_days(days[0]) if days else "*"
    except ValueError:
        raise ConfigError.option("--on-calendar", spec,
                          f"cron takes only {CRON_FORMS}") from None
    hour = m[1] if m[1] == "*" else str(int(m[1]))
    return f"{int(m[2])} {hour} * * {dow}"


def cron_file(plan: SchedulePlan) -> str:
    """/etc/cron.d/longhaul-suite-S. flock keeps to one run of the suite at a time, as systemd
    does: a calendar run finding one under way is skipped (-n), the boot run waits its turn."""
    lock = f"/run/lock/longhaul-suite-{plan.suite}.lock"
    log = f"/var/log/longhaul-suite-{plan.suite}.log"
    cd = f"cd {plan.workdir} &&"
    lines = [marker(plan.suite),
             "# cron has no OnFailure=: exit 3 (a regression) is in the log below; wrap the command to alert",
             "SHELL=/bin/sh", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    if plan.on_calendar is not None:
        fields = cron_schedule(plan.on_calendar)
        lines.append(f"{fields} root {cd} flock -n {lock} {' '.join(suite_argv(plan))} >>{log} 2>&1")
    if plan.on_kernel_change:
        lines.append(f"# @reboot is when cron starts, not when the network is up: {BOOT_DELAY_S} s of slack")
        lines.append(f"@reboot root sleep {BOOT_DELAY_S}; {cd} flock {lock} "
                     f"{' '.join(suite_argv(plan, kernel_check=True))} >>{log} 2>&1")
    return "\n".join(lines) + "\n"
