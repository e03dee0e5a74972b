"""Installing and removing what appliance/schedule/units.py generates, with systemd or cron.

`install(plan, root, manager)` writes a suite's files under root (/ or an image tree) and enables
them; `remove(suite, root)` disables and deletes what `install` wrote for that suite, with either
manager, and is idempotent. Systemd units are verified with `systemd-analyze verify` in a
temporary directory before anything is written: a refusal is exit 2 and nothing changed.

On a live systemd (/run/systemd/system) the units are enabled with systemctl (daemon-reload, the
timer started at once, the boot unit from the next boot on). Into a tree that is not running,
`systemctl --root=TREE` makes the wants symlinks offline, or, without systemctl, they are made
here from the units' WantedBy=. Cron needs nothing but the file in /etc/cron.d.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.appliance.schedule import units as u
from longhaul.core.errors import ConfigError

LIVE_SYSTEMD = Path("run/systemd/system")      # systemd's own test for "booted with systemd"
SYSTEMD_BINARIES = (Path("usr/lib/systemd/systemd"), Path("lib/systemd/systemd"))
CRON_DAEMONS = (Path("usr/sbin/cron"), Path("usr/sbin/crond"))


@dataclass
class Outcome:
    manager: str
    written: list[Path] = field(default_factory=list)      # files and links, as paths under root
    removed: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.written or self.removed)


def _rel(path) -> Path:
    return Path(str(path).lstrip("/"))


def is_live(root: Path) -> bool:
    return Path(root).resolve() == Path("/")


def _run(argv: list[str], outcome: Outcome, env: dict | None = None) -> subprocess.CompletedProcess:
    outcome.commands.append(argv)
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def _checked(argv: list[str], outcome: Outcome) -> None:
    done = _run(argv, outcome)
    if done.returncode != 0:
        raise ConfigError.option(None, None, f"{' '.join(argv)} failed ({done.returncode}): "
                                                f"{(done.stderr or done.stdout).strip()}")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.longhaul-new")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)              # cron skips group- or world-writable files
    os.rename(tmp, path)


def _ours(path: Path, suite: str) -> bool:
    try:
        return path.is_file() and u.marker(suite) in path.read_text().splitlines()[:1]
    except (OSError, UnicodeDecodeError):
        return False


def check_calendar(spec: str) -> None:
    """systemd's own parser, where systemd-analyze is installed: its message on a bad spec."""
    if shutil.which("systemd-analyze") is None:
        return
    done = subprocess.run(["systemd-analyze", "calendar", spec], capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError.option("--on-calendar", spec, (done.stderr or done.stdout).strip())


class Systemd:
    name = "systemd"

    def present(self, root: Path) -> bool:
        if is_live(root):
            return (root / LIVE_SYSTEMD).is_dir()
        return any((root / p).exists() for p in SYSTEMD_BINARIES)

    def files(self, plan: u.SchedulePlan) -> dict[Path, str]:
        return {_rel(u.UNIT_DIR / name): text for name, text in u.systemd_units(plan).items()}

    def links(self, plan: u.SchedulePlan) -> dict[Path, str]:
        return {_rel(u.UNIT_DIR / rel): target for rel, target in u.wants_links(u.systemd_units(plan)).items()}

    def check(self, plan: u.SchedulePlan, root: Path) -> None:
        if plan.on_calendar is not None:
            check_calendar(plan.on_calendar)
        verify(u.systemd_units(plan), root)

    def _running(self, root: Path) -> bool:
        return is_live(root) and (root / LIVE_SYSTEMD).is_dir()

    def enable(self, plan: u.SchedulePlan, root: Path, outcome: Outcome) -> None:
        names = u.systemd_units(plan)
        if self._running(root):
            _checked(["systemctl", "daemon-reload"], outcome)
            if u.timer_name(plan.suite) in names:
                # --no-block: longhaul-firstboot runs this before sysinit.target, which a timer's
                # start waits for
                _checked(["systemctl", "enable", "--now", "--no-block", u.timer_name(plan.suite)], outcome)
            if u.boot_name(plan.suite) in names:         # its moment is the next boot
                _checked(["systemctl", "enable", u.boot_name(plan.suite)], outcome)
            return
        enabled = [n for n in names if n != u.service_name(plan.suite)]
        if shutil.which("systemctl"):
            _checked(["systemctl", f"--root={root}", "enable", *enabled], outcome)
        else:
            for rel, target in self.links(plan).items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).unlink(missing_ok=True)
                os.symlink(target, root / rel)

    def remove(self, suite: str, root: Path, keep: set[Path], outcome: Outcome) -> None:
        """This suite's units not in keep: disabled (their wants links gone), then deleted."""
        mine = [n for n in u.unit_names(suite) if (root / _rel(u.UNIT_DIR / n)) not in keep
                and _ours(root / _rel(u.UNIT_DIR / n), suite)]
        if mine and self._running(root):
            if keep:        # re-planned: a suite under way finishes; a dropped timer stops now
                _run(["systemctl", "disable", *mine], outcome)
                timers = [n for n in mine if n.endswith(".timer")]
                if timers:
                    _run(["systemctl", "stop", *timers], outcome)
            else:
                _run(["systemctl", "disable", "--now", *mine], outcome)
        # the links by hand too: systemctl --root needs the unit files, and a half-removed
        # suite may have links without them
        for name in u.unit_names(suite):
            unit = root / _rel(u.UNIT_DIR / name)
            if unit in keep or (unit.exists() and name not in mine):      # someone else's unit
                continue
            # not glob(): it drops links that dangle here, and in a tree every one does
            for link in [d / name for d in (root / _rel(u.UNIT_DIR)).glob("*.wants")]:
                if link.is_symlink() and os.readlink(link) == str(u.UNIT_DIR / name):
                    link.unlink()
                    outcome.removed.append(link)
                    if not any(link.parent.iterdir()):        # as systemctl leaves it: no empty .wants
                        link.parent.rmdir()
        for name in mine:
            (root / _rel(u.UNIT_DIR / name)).unlink()
            outcome.removed.append(root / _rel(u.UNIT_DIR / name))
        if mine and self._running(root):
            _run(["systemctl", "daemon-reload"], outcome)


class Cron:
    name = "cron"

    def present(self, root: Path) -> bool:
        return any((root / p).exists() for p in CRON_DAEMONS)

    def files(self, plan: u.SchedulePlan) -> dict[Path, str]:
        return {_rel(u.CRON_DIR / u.cron_name(plan.suite)): u.cron_file(plan)}

    def links(self, plan: u.SchedulePlan) -> dict[Path, str]:
        return {}

    def check(self, plan: u.SchedulePlan, root: Path) -> None:
        if is_live(root) and not self.present(root):
            raise ConfigError.option("--manager", "cron",
                              "neither systemd is running here (/run/systemd/system) nor is cron installed "
                              "(/usr/sbin/cron): install cron (apt-get install cron), or prepare a tree with --root")
        u.cron_file(plan)                # the calendar converts, or the refusal names the forms

    def enable(self, plan: u.SchedulePlan, root: Path, outcome: Outcome) -> None:
        """cron rereads /etc/cron.d by itself."""

    def remove(self, suite: str, root: Path, keep: set[Path], outcome: Outcome) -> None:
        path = root / _rel(u.CRON_DIR / u.cron_name(suite))
        if path not in keep and _ours(path, suite):
            path.unlink()
            outcome.removed.append(path)


MANAGERS = {"systemd": Systemd(), "cron": Cron()}


def choose_manager(root: Path = Path("/")) -> str:
    """systemd where it runs (or, in a tree, where it is installed); cron otherwise."""
    return "systemd" if MANAGERS["systemd"].present(Path(root)) else "cron"


def files_of(plan: u.SchedulePlan, manager: str) -> dict[Path, str]:
    """What install() would write, as absolute paths of the scheduled system."""
    return {Path("/") / rel: text for rel, text in MANAGERS[manager].files(plan).items()}


def verify(unit_texts: dict[str, str], root: Path = Path("/")) -> None:
    """`systemd-analyze verify` of the units in a temporary directory. Into a tree with systemd's
    own units the check runs inside it (--root), so ExecStart is looked up there; elsewhere on
    this machine, where ExecStart must exist."""
    if shutil.which("systemd-analyze") is None:
        raise ConfigError.option("--manager", "systemd", "systemd-analyze is needed to verify the units")
    root = Path(root)
    in_tree = not is_live(root) and any((root / "usr/lib/systemd/system" / t).exists()
                                        for t in ("sysinit.target", "multi-user.target"))
    if in_tree:
        (root / "tmp").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="longhaul-verify-", dir=root / "tmp" if in_tree else None))
    inside = "/" + str(tmp.relative_to(root)) if in_tree else str(tmp)
    try:
        for name, text in unit_texts.items():
            (tmp / name).write_text(text)
        argv = ["systemd-analyze", "verify"]
        env = None
        if in_tree:
            argv.append(f"--root={root}")
            env = {**os.environ, "SYSTEMD_UNIT_PATH": inside + ":"}     # ":" keeps the tree's own paths
        argv += [f"{inside}/{name}" for name in unit_texts]
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if done.returncode != 0:
        raise ConfigError.option("units", None, "systemd-analyze verify refused them: "
                          + (done.stderr or done.stdout).strip().replace(inside + "/", ""))


def install(plan: u.SchedulePlan, root: Path = Path("/"), manager: str | None = None) -> Outcome:
    """Verify, then make the suite's installed files exactly the plan's: the other manager's
    files and units the plan no longer asks for are removed first. Nothing is rewritten or
    reloaded when everything is already as planned (firstboot runs this at every boot)."""
    root = Path(root)
    name = manager or choose_manager(root)
    if name not in MANAGERS:
        raise ConfigError.option("--manager", name, f"one of {', '.join(MANAGERS)}")
    chosen = MANAGERS[name]
    chosen.check(plan, root)
    files = {root / rel: text for rel, text in chosen.files(plan).items()}
    links = {root / rel: target for rel, target in chosen.links(plan).items()}
    outcome = Outcome(name)
    for other in MANAGERS.values():
        other.remove(plan.suite, root, set(files), outcome)
    current = all(p.is_file() and p.read_text() == t for p, t in files.items()) and all(
        p.is_symlink() and os.readlink(p) == t for p, t in links.items())
    if current:
        return outcome
    for path, text in files.items():
        _write(path, text)
        outcome.written.append(path)
    chosen.enable(plan, root, outcome)
    outcome.written += [p for p in links if p.is_symlink()]
    return outcome


def remove(suite: str, root: Path = Path("/")) -> Outcome:
    """Disable and delete every file install() wrote for suite, with either manager."""
    u.check_suite(suite)
    outcome = Outcome("any")
    for manager in MANAGERS.values():
        manager.remove(suite, Path(root), set(), outcome)
    return outcome
