"""`longhaul schedule`: the generated units (known answers, and `systemd-analyze verify` for
real), the cron conversion (known answers, systemd's own normalised forms captured in
tests/data/systemd-analyze-calendar.txt), installing and removing into temporary trees with both
managers, and the CLI. A live systemd is not running on the development machine; the VM run in
bench/kernel_upgrade.py installs on one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from longhaul.appliance.cli.app import main
from longhaul.appliance.schedule import install as inst
from longhaul.appliance.schedule import units as u
from longhaul.core.errors import ConfigError
from longhaul.core.paths import REPO

LONGHAUL = str(Path(sys.prefix) / "bin/longhaul")          # real, so verify finds ExecStart
DATA = Path(__file__).parents[1] / "data/systemd-analyze-calendar.txt"
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def _plan(calendar="Mon..Fri 02:00", boot=True, config="/etc/longhaul/config.toml", longhaul=LONGHAUL, suite="nightly"):
    return u.make_plan(suite, config, longhaul, calendar, boot)


def _tree(root: Path) -> dict[str, str]:
    """Every file and link under root: relative path -> content or '-> target'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            out[rel] = "-> " + os.readlink(path) if path.is_symlink() else path.read_text()
    return out


def test_units_known_answers():
    units = u.systemd_units(_plan())
    assert list(units) == ["longhaul-suite-nightly.service", "longhaul-suite-nightly.timer",
                           "longhaul-suite-nightly-boot.service"]
    service = units["longhaul-suite-nightly.service"].splitlines()
    assert service[0] == u.marker("nightly")
    for line in ("Type=oneshot", f"ExecStart={LONGHAUL} suite nightly --config /etc/longhaul/config.toml",
                 "WorkingDirectory=/etc/longhaul", "Wants=network-online.target",
                 "After=network-online.target longhaul-firstboot.service longhaul-suite-nightly-boot.service",
                 "ConditionPathExists=/etc/longhaul/config.toml", "TimeoutStartSec=23h", "Nice=0",
                 "IOSchedulingClass=best-effort", "KillMode=mixed"):
        assert line in service, line
    assert not any(line.startswith(("SuccessExitStatus", "Requires", "[Install]")) for line in service)
    assert any("exit 3 is a regression" in line and line.startswith("#") for line in service)
    timer = units["longhaul-suite-nightly.timer"].splitlines()
    for line in ("OnCalendar=Mon..Fri 02:00", "Persistent=true", "RandomizedDelaySec=120",
                 "Unit=longhaul-suite-nightly.service", "WantedBy=timers.target"):
        assert line in timer, line
    boot = units["longhaul-suite-nightly-boot.service"].splitlines()
    for line in (f"ExecStart={LONGHAUL} suite nightly --config /etc/longhaul/config.toml --if-kernel-changed",
                 "After=network-online.target longhaul-firstboot.service", "WantedBy=multi-user.target",
                 "ConditionPathExists=/etc/longhaul/config.toml", "Type=oneshot"):
        assert line in boot, line
    assert u.wants_links(units) == {
        "timers.target.wants/longhaul-suite-nightly.timer": "/etc/systemd/system/longhaul-suite-nightly.timer",
        "multi-user.target.wants/longhaul-suite-nightly-boot.service":
            "/etc/systemd/system/longhaul-suite-nightly-boot.service"}
    assert list(u.systemd_units(_plan(calendar=None))) == ["longhaul-suite-nightly-boot.service"]
    assert list(u.systemd_units(_plan(boot=False))) == ["longhaul-suite-nightly.service", "longhaul-suite-nightly.timer"]


@pytest.mark.parametrize("suite, config, longhaul, calendar, boot, what", [
    ("../x", "/c.toml", "/l", "daily", False, "SUITE"),
    ("nightly-boot", "/c.toml", "/l", "daily", False, "SUITE"),          # another suite's boot unit name
    ("nightly", "c.toml", "/l", "daily", False, "--config"),             # relative
    ("nightly", "/my configs/c.toml", "/l", "daily", False, "--config"),
    ("nightly", "/c%h.toml", "/l", "daily", False, "--config"),           # a systemd specifier, a cron newline
    ("nightly", "/c.toml", "/l", None, False, "--on-calendar"),
    ("nightly", "/c.toml", "/l", "daily\nExecStart=/bin/sh", False, "--on-calendar"),
])
def test_plan_refuses(suite, config, longhaul, calendar, boot, what):
    with pytest.raises(ConfigError) as exc:
        u.make_plan(suite, config, longhaul, calendar, boot)
    assert exc.value.exit_status == 2 and (what in exc.value.keypath or "give --on-calendar" in str(exc.value))


@needs_analyze
@pytest.mark.parametrize("calendar, boot", [("daily", True), ("Mon..Fri 02:00", False), (None, True),
                                            ("Sun *-*-* 03:00", True)])
def test_every_generated_unit_set_passes_systemd_analyze_verify(tmp_path, calendar, boot):
    config = tmp_path / "config.toml"
    config.write_text("")
    units = u.systemd_units(_plan(calendar, boot, config=str(config)))
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")      # not even a warning
    inst.verify(units)                                                       # the installer's own path


@needs_analyze
def test_verify_refuses_a_missing_executable_and_nothing_is_written(tmp_path):
    plan = _plan(longhaul="/nonexistent/longhaul")
    with pytest.raises(ConfigError, match="is not executable") as exc:
        inst.install(plan, tmp_path, "systemd")
    assert exc.value.exit_status == 2 and _tree(tmp_path) == {}


@needs_analyze
def test_a_bad_calendar_is_systemds_message_exit_2(tmp_path, capsys):
    with pytest.raises(ConfigError, match="Failed to parse calendar specification"):
        inst.check_calendar("Mon..Fri 25:00")
    inst.check_calendar("Mon..Fri 02:00")
    config = _config(tmp_path)
    assert main(["schedule", "nightly", "--config", str(config), "--on-calendar", "bogus", "--print"]) == 2
    assert "Failed to parse calendar specification 'bogus'" in capsys.readouterr().err


@pytest.mark.parametrize("spec, fields", [
    ("daily", "0 0 * * *"), ("weekly", "0 0 * * 1"), ("hourly", "0 * * * *"),
    ("*-*-* 02:30", "30 2 * * *"), ("*-*-* 2:05:00", "5 2 * * *"), ("04:15", "15 4 * * *"),
    ("Mon..Fri 02:00", "0 2 * * 1-5"), ("Sun *-*-* 03:00", "0 3 * * 0"), ("mon,wed,fri 4:00", "0 4 * * 1,3,5"),
    ("Fri..Sun 22:00", "0 22 * * 5-7"), ("Saturday 23:59", "59 23 * * 6"), ("Mon..Fri,Sun 1:00", "0 1 * * 1-5,0"),
    ("*-*-* *:00:00", "0 * * * *"),
])
def test_cron_conversion_known_answers(spec, fields):
    assert u.cron_schedule(spec) == fields


@pytest.mark.parametrize("spec", ["minutely", "*-*-* 02:30:15", "Mon..Fri 02:00 UTC", "*-*-01 02:00",
                                  "Mon 2024-*-* 02:00", "Sun..Mon 02:00", "Mon Tue 02:00", "*-*-* 24:00",
                                  "Funday 02:00", "*-*-* 02:00/2", "quarterly"])
def test_cron_refuses_what_it_cannot_say_naming_the_forms(spec):
    with pytest.raises(ConfigError, match=r"cron takes only daily, weekly, hourly") as exc:
        u.cron_schedule(spec)
    assert exc.value.exit_status == 2


def _captured_forms() -> list[tuple[str, str]]:
    """(original, normalised) from the captured `systemd-analyze calendar` output."""
    pairs, original = [], None
    for line in DATA.read_text().splitlines():
        if line.strip().startswith("Original form:"):
            original = line.split(":", 1)[1].strip()
        elif line.strip().startswith("Normalized form:"):
            normal = line.split(":", 1)[1].strip()
            pairs.append((original or normal, normal))
            original = None
    return pairs


def test_cron_reads_systemds_normalised_forms_the_same():
    pairs = _captured_forms()
    assert len(pairs) == 10
    for original, normal in pairs:
        assert u.cron_schedule(original) == u.cron_schedule(normal), (original, normal)


@needs_analyze
def test_cron_conversion_agrees_with_this_systemd():
    for spec, _ in _captured_forms():
        out = subprocess.run(["systemd-analyze", "calendar", spec], capture_output=True, text=True, check=True).stdout
        normal = next(line.split(":", 1)[1].strip() for line in out.splitlines() if "Normalized form" in line)
        assert u.cron_schedule(normal) == u.cron_schedule(spec)


def test_cron_file_known_answer():
    text = u.cron_file(_plan(longhaul="/usr/local/bin/longhaul"))
    lines = text.splitlines()
    assert lines[0] == u.marker("nightly")
    assert ("0 2 * * 1-5 root cd /etc/longhaul && flock -n /run/lock/longhaul-suite-nightly.lock "
            "/usr/local/bin/longhaul suite nightly --config /etc/longhaul/config.toml "
            ">>/var/log/longhaul-suite-nightly.log 2>&1") in lines
    assert ("@reboot root sleep 60; cd /etc/longhaul && flock /run/lock/longhaul-suite-nightly.lock "
            "/usr/local/bin/longhaul suite nightly --config /etc/longhaul/config.toml --if-kernel-changed "
            ">>/var/log/longhaul-suite-nightly.log 2>&1") in lines
    assert not any(line.startswith("@reboot") for line in u.cron_file(_plan(boot=False)).splitlines())


def test_cron_install_and_remove_in_a_tree(tmp_path):
    plan = _plan()
    out = inst.install(plan, tmp_path, "cron")
    assert out.manager == "cron" and out.written == [tmp_path / "etc/cron.d/longhaul-suite-nightly"]
    assert _tree(tmp_path) == {"etc/cron.d/longhaul-suite-nightly": u.cron_file(plan)}
    assert (tmp_path / "etc/cron.d/longhaul-suite-nightly").stat().st_mode & 0o777 == 0o644   # cron skips writable ones
    assert inst.install(plan, tmp_path, "cron").unchanged                  # firstboot runs it at every boot
    assert inst.remove("nightly", tmp_path).removed == [tmp_path / "etc/cron.d/longhaul-suite-nightly"]
    assert _tree(tmp_path) == {}
    assert inst.remove("nightly", tmp_path).unchanged                       # idempotent


@needs_analyze
def test_systemd_install_and_remove_in_a_tree(tmp_path):
    plan = _plan()
    out = inst.install(plan, tmp_path, "systemd")
    units = u.systemd_units(plan)
    expected = {f"etc/systemd/system/{name}": text for name, text in units.items()}
    expected |= {f"etc/systemd/system/{rel}": f"-> {target}" for rel, target in u.wants_links(units).items()}
    assert _tree(tmp_path) == expected
    assert out.commands == [["systemctl", f"--root={tmp_path}", "enable", "longhaul-suite-nightly.timer",
                             "longhaul-suite-nightly-boot.service"]]
    assert sorted(out.written) == sorted(tmp_path / p for p in expected)
    assert inst.install(plan, tmp_path, "systemd").unchanged
    removed = inst.remove("nightly", tmp_path).removed
    assert sorted(removed) == sorted(tmp_path / p for p in expected)
    assert _tree(tmp_path) == {} and sorted(p.name for p in (tmp_path / "etc/systemd/system").iterdir()) == []
    assert inst.remove("nightly", tmp_path).unchanged


@needs_analyze
def test_installing_again_makes_the_installed_set_the_plans(tmp_path):
    inst.install(_plan(), tmp_path, "cron")
    inst.install(_plan(), tmp_path, "systemd")                              # manager switched: cron file gone
    assert not (tmp_path / "etc/cron.d/longhaul-suite-nightly").exists()
    inst.install(_plan(calendar=None), tmp_path, "systemd")                 # no calendar any more
    assert sorted(_tree(tmp_path)) == ["etc/systemd/system/longhaul-suite-nightly-boot.service",
                                       "etc/systemd/system/multi-user.target.wants/longhaul-suite-nightly-boot.service"]
    inst.install(_plan(calendar="daily"), tmp_path, "systemd")              # a changed unit is rewritten
    assert "OnCalendar=daily" in (tmp_path / "etc/systemd/system/longhaul-suite-nightly.timer").read_text()


def test_remove_leaves_units_it_did_not_write(tmp_path):
    theirs = tmp_path / "etc/systemd/system/longhaul-suite-nightly.service"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("[Service]\nExecStart=/bin/true\n")
    link = tmp_path / "etc/systemd/system/multi-user.target.wants/longhaul-suite-nightly.service"
    link.parent.mkdir()
    os.symlink("/etc/systemd/system/longhaul-suite-nightly.service", link)
    assert inst.remove("nightly", tmp_path).unchanged and theirs.exists() and link.is_symlink()


@needs_analyze
def test_an_image_tree_gets_systemd_verified_inside_it(tmp_path):
    """A tree with systemd (an image): chosen by itself, ExecStart looked up in the tree, not here."""
    (tmp_path / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", tmp_path / "usr/lib/systemd/system", symlinks=True)
    (tmp_path / "usr/lib/systemd/systemd").write_text("")
    inside = "/opt/longhaul-schedule-test/bin/longhaul"      # in the tree, nowhere on this machine
    exe = tmp_path / inside.lstrip("/")
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert not Path(inside).exists()
    plan = _plan(longhaul=inside)
    assert inst.choose_manager(tmp_path) == "systemd"
    out = inst.install(plan, tmp_path)
    assert out.manager == "systemd" and (tmp_path / "etc/systemd/system/timers.target.wants").is_dir()
    assert not list((tmp_path / "tmp").iterdir())             # the verify directory is gone
    inst.remove("nightly", tmp_path)
    exe.unlink()
    with pytest.raises(ConfigError, match=f"{inside} is not executable"):
        inst.install(plan, tmp_path)


def test_a_live_root_without_systemd_or_cron_is_refused(tmp_path):
    if inst.MANAGERS["systemd"].present(Path("/")) or inst.MANAGERS["cron"].present(Path("/")):
        pytest.skip("this machine has systemd running or cron installed")
    assert inst.choose_manager(Path("/")) == "cron"
    with pytest.raises(ConfigError, match="nor is cron installed"):
        inst.install(_plan(), Path("/"), "cron")


def _config(tmp_path: Path) -> Path:
    (tmp_path / "lh/profiles").mkdir(parents=True)
    shutil.copy(REPO / "profiles/quickstart.toml", tmp_path / "lh/profiles/nightly.toml")
    config = tmp_path / "lh/config.toml"
    config.write_text('[run]\nprofiles = ["nightly"]\n')
    return config


def test_cli_print_shows_the_units_and_writes_nothing(tmp_path, capsys):
    config = _config(tmp_path)
    before = _tree(tmp_path)
    assert main(["schedule", "nightly", "--config", str(config), "--on-calendar", "Mon..Fri 02:00",
                 "--on-kernel-change", "--manager", "cron", "--print"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# /etc/cron.d/longhaul-suite-nightly\n" + u.marker("nightly"))
    assert f"suite nightly --config {config} --if-kernel-changed" in out and f"cd {config.parent} &&" in out
    assert main(["schedule", "nightly", "--config", str(config), "--on-kernel-change", "--manager", "systemd",
                 "--print"]) == 0
    out = capsys.readouterr().out
    assert "# /etc/systemd/system/longhaul-suite-nightly-boot.service\n" in out and ".timer" not in out
    assert _tree(tmp_path) == before


def test_cli_refuses_before_writing(tmp_path, capsys):
    root = tmp_path / "root"
    _config(root)
    before = _tree(root)
    argv = ["--config", "/lh/config.toml", "--root", str(root), "--manager", "cron", "--longhaul", LONGHAUL]
    assert main(["schedule", "nosuch", "--on-kernel-change", *argv]) == 2
    assert "SUITE = 'nosuch': no such profile" in capsys.readouterr().err
    assert main(["schedule", "nightly", *argv]) == 2          # no trigger
    assert "give --on-calendar SPEC, --on-kernel-change or both" in capsys.readouterr().err
    assert main(["schedule", "nightly", "--on-calendar", "Mon 02:00:30", *argv]) == 2
    assert "cron takes only" in capsys.readouterr().err
    assert main(["schedule", "nightly", *argv, "--config", "/lh/none.toml", "--on-kernel-change"]) == 2
    assert "none.toml: cannot read the file" in capsys.readouterr().err
    assert main(["schedule", "nightly", *argv, "--config", "lh/config.toml", "--on-kernel-change"]) == 2
    assert "with --root, the absolute path inside the tree" in capsys.readouterr().err
    assert _tree(root) == before


def test_cli_installs_into_a_tree_and_removes(tmp_path, capsys):
    tree = tmp_path / "root"
    _config(tree)                                   # the config inside the tree, as /lh/config.toml
    argv = ["--root", str(tree), "--longhaul", LONGHAUL]
    assert main(["schedule", "nightly", "--config", "/lh/config.toml", "--on-calendar", "daily",
                 "--on-kernel-change", *argv]) == 0          # a tree without systemd: cron
    assert f"wrote {tree}/etc/cron.d/longhaul-suite-nightly" in capsys.readouterr().out
    text = (tree / "etc/cron.d/longhaul-suite-nightly").read_text()
    assert "0 0 * * * root cd /lh && flock -n" in text and "--config /lh/config.toml" in text
    assert main(["schedule", "nightly", "--remove", "--root", str(tree)]) == 0
    assert main(["schedule", "nightly", "--remove", "--root", str(tree)]) == 0
    assert "nothing of suite nightly is installed" in capsys.readouterr().out
    assert not (tree / "etc/cron.d/longhaul-suite-nightly").exists()
