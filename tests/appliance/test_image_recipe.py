"""The appliance image's pure parts: the build recipe (appliance/image/build.py), the first-boot
seed handling that runs inside the image (appliance/image/firstboot.py), and what the built image
holds. The qemu fleet's plan is tests/hardware/test_qemu_fleet_plan.py's; booting the image is
tests/system/test_qemu_lab.py's."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from longhaul.appliance.image import boot_kernel, build, disk, firstboot
from longhaul.core.paths import REPO
from longhaul.drivers import ccashim
from longhaul.drivers.registry import TOOLS, tool_for
from longhaul.hardware.backends.qemu.firmware import FIRMWARE
from longhaul.hardware.image_files import IMAGE, MANIFEST


def test_base_key_follows_what_the_base_is_made_of():
    pk, py = build.image_packages(), build.python_requirements()
    kernels = sorted(p for p in pk if p.startswith("linux-image-"))
    assert kernels == ["linux-image-6.1.0-50-amd64", "linux-image-6.1.0-56-amd64"]    # two, named: the key says which
    assert "openssh-server" in pk and "iperf3" in pk and "fping" in pk
    assert any(r.startswith("pydantic") for r in py)
    key = build.base_key(pk, py)
    assert key == build.base_key(list(reversed(pk)), py)          # order does not matter
    assert key != build.base_key(pk + ["htop"], py)
    assert key != build.base_key(pk, py + ["tslearn"])


def test_mmdebstrap_recipe_has_no_baked_secrets():
    mirrors = ["deb http://mirror.lab.example/debian bookworm main",
               "deb http://mirror.lab.example/debian-security bookworm-security main"]
    argv = build.mmdebstrap_argv(["iperf3", "openssh-server"], ["pydantic>=2.5,<3"], Path("/tmp/x"), mirrors)
    assert argv[:5] == ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
                        "--include=iperf3,openssh-server"]
    assert argv[-4:] == ["bookworm", "/tmp/x", *mirrors]       # the machine's own archive, nothing of ours
    hooks = [argv[i + 1] for i, a in enumerate(argv) if a == "--customize-hook"]
    assert 'rm -f "$1"/etc/ssh/ssh_host_*' in hooks                   # each host makes or gets its own
    assert 'chroot "$1" passwd -l root' in hooks                       # no password: keys only
    assert any("serial-getty@ttyS0" in h and "mask" in h for h in hooks)
    assert any("'pydantic>=2.5,<3'" in h for h in hooks)               # quoted for the hook's shell
    assert "PasswordAuthentication no" in build.sshd_config()


def test_disk_layout_and_boot_config():
    script = disk.sfdisk_script()
    assert script.splitlines() == [
        "label: gpt",
        "start=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name=bios-boot",    # GRUB's BIOS core
        "start=4096, size=131072, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=efi-system",  # shim, GRUB
        "start=135168, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=longhaul-root"]
    size = disk.disk_size_bytes(1_000_000_000)
    assert size % (1 << 20) == 0 and size >= 1_000_000_000 * 4 // 3 + (512 << 20)
    argv = disk.mke2fs_argv(Path("/t"), Path("/d.raw"), size)
    assert argv[argv.index("-E") + 1] == f"offset={66 << 20}"
    assert int(argv[-1]) * 4096 + (66 << 20) <= size - 33 * 512         # the backup GPT stays whole
    conf = build.grub_cfg(["6.1.0-9-amd64", "6.1.0-50-amd64"])
    assert 'set default="kernel-6.1.0-50-amd64"' in conf.splitlines()[:2]     # the newest by version, not by string
    assert '--id "kernel-6.1.0-9-amd64"' in conf        # never a leading digit: GRUB reads that as a number
    assert "linux /boot/vmlinuz-6.1.0-9-amd64 root=LABEL=longhaul-root" in conf
    assert "initrd /boot/initrd.img-6.1.0-50-amd64" in conf and "console=ttyS0" in conf
    assert conf.count("search --no-floppy --set=root --label longhaul-root") == 2
    entries, default = boot_kernel.parse(conf)
    assert [e.label for e in entries] == ["6.1.0-50-amd64", "6.1.0-9-amd64"] and default == "6.1.0-50-amd64"
    assert entries[1] == boot_kernel.Entry("6.1.0-9-amd64", "/boot/vmlinuz-6.1.0-9-amd64", "/boot/initrd.img-6.1.0-9-amd64")
    assert build.fstab().startswith("LABEL=longhaul-root / ext4")
    assert "--label longhaul-root" in disk.esp_grub_cfg() and "configfile $prefix/grub.cfg" in disk.esp_grub_cfg()


def test_the_bios_stage_is_what_grub_bios_setup_writes():
    """boot.img in the MBR points at core.img in the BIOS boot partition, with the BIOS's own
    drive and no drive check; the disk's partition table is kept; core.img's blocklist covers
    the rest of it."""
    mbr = bytes(440) + b"\x11" * 70 + b"\x55\xaa"                # a protective MBR: its table kept
    boot_img = bytes(range(256)) * 2
    core = b"\x01" * 500 + bytes(12) + b"\x02" * 2000
    core = core[:500] + bytes(8) + bytes(2) + (0x820).to_bytes(2, "little") + core[512:]
    out_mbr, out_core = disk.bios_boot_sectors(mbr, boot_img, core, 2048)
    assert out_mbr[0x5C:0x64] == (2048).to_bytes(8, "little") and out_mbr[0x64] == 0xFF
    assert out_mbr[0x66:0x68] == b"\x90\x90" and out_mbr[0x1B8:] == mbr[0x1B8:]
    assert out_mbr[:0x5C] == boot_img[:0x5C]
    sectors = (len(core) + 511) // 512
    assert len(out_core) == sectors * 512
    assert out_core[500:512] == (2049).to_bytes(8, "little") + (sectors - 1).to_bytes(2, "little") + \
        (0x820).to_bytes(2, "little")
    assert out_core[512:len(core)] == core[512:]
    with pytest.raises(ValueError, match="BIOS boot partition"):
        disk.bios_boot_sectors(mbr, boot_img, bytes(2 << 20), 2048)


def _boot_tree(root: Path, releases: list[str]) -> Path:
    """A /boot as the image has it: kernels, initrds, grub.cfg made by the build's recipe."""
    boot = root / "boot"
    (boot / "grub").mkdir(parents=True)
    for release in releases:
        (boot / f"vmlinuz-{release}").write_bytes(b"kernel")
        (boot / f"initrd.img-{release}").write_bytes(b"initrd")
    (boot / "config-6.1.0-99-amd64").write_text("a config without its kernel is no kernel")
    (boot / "grub/grub.cfg").write_text(build.grub_cfg(boot_kernel.kernels_in(boot)))
    return boot / "grub/grub.cfg"


def test_kernels_are_ordered_by_version_and_need_an_initrd(tmp_path):
    assert sorted(["6.1.0-50-amd64", "6.1.0-9-amd64", "6.1.0-56-amd64"], key=boot_kernel.release_key) == [
        "6.1.0-9-amd64", "6.1.0-50-amd64", "6.1.0-56-amd64"]
    _boot_tree(tmp_path, ["6.1.0-56-amd64", "6.1.0-50-amd64"])
    (tmp_path / "boot/vmlinuz-6.1.0-60-amd64").write_bytes(b"no initrd beside it")
    assert boot_kernel.kernels_in(tmp_path / "boot") == ["6.1.0-50-amd64", "6.1.0-56-amd64"]


def test_boot_kernel_lists_and_switches_the_default(tmp_path, capsys):
    conf = _boot_tree(tmp_path, ["6.1.0-50-amd64", "6.1.0-56-amd64"])
    before = conf.read_text()
    assert boot_kernel.main(["--list", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "6.1.0-56-amd64 default\n6.1.0-50-amd64\n"
    assert boot_kernel.main(["6.1.0-50-amd64", "--root", str(tmp_path)]) == 0
    after = conf.read_text()
    assert after.splitlines()[1] == 'set default="kernel-6.1.0-50-amd64"'
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert changed == [('set default="kernel-6.1.0-56-amd64"', 'set default="kernel-6.1.0-50-amd64"')]   # only it
    assert [p.name for p in conf.parent.iterdir()] == ["grub.cfg"]       # no temporary file left
    capsys.readouterr()
    assert boot_kernel.main(["--list", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "6.1.0-56-amd64\n6.1.0-50-amd64 default\n"


def test_boot_kernel_refuses_what_cannot_boot(tmp_path, capsys):
    conf = _boot_tree(tmp_path, ["6.1.0-50-amd64", "6.1.0-56-amd64"])
    before = conf.read_text()
    assert boot_kernel.main(["6.1.0-99-amd64", "--root", str(tmp_path)]) == 2
    assert "allowed: 6.1.0-56-amd64, 6.1.0-50-amd64" in capsys.readouterr().err
    (tmp_path / "boot/initrd.img-6.1.0-50-amd64").unlink()             # its entry stays, it cannot boot
    assert boot_kernel.main(["6.1.0-50-amd64", "--root", str(tmp_path)]) == 2
    assert conf.read_text() == before
    assert boot_kernel.main(["--list", "--root", str(tmp_path)]) == 0
    assert "6.1.0-50-amd64 missing" in capsys.readouterr().out
    assert boot_kernel.main(["--list", "--root", str(tmp_path / "nowhere")]) == 1
    conf.write_text("### BEGIN /etc/grub.d/10_linux ###\nset default=\"0\"\n")     # update-grub's: not ours
    assert boot_kernel.main(["6.1.0-56-amd64", "--root", str(tmp_path)]) == 1
    assert "/etc/default/grub" in capsys.readouterr().err


def test_boot_kernel_keeps_a_hand_edited_file():
    text = (f"{boot_kernel.MARK}\n# kept\nset default=kernel-old\nset timeout=5\n"
            "menuentry 'New' --class debian --id kernel-new {\n  linux /boot/vmlinuz-new ro\n  initrd /boot/initrd.img-new\n}\n")
    entries, default = boot_kernel.parse(text)
    assert default == "old" and entries == [boot_kernel.Entry("new", "/boot/vmlinuz-new", "/boot/initrd.img-new")]
    assert boot_kernel.with_default(text, "new") == text.replace("set default=kernel-old", 'set default="kernel-new"')
    assert boot_kernel.with_default("menuentry a --id kernel-a {\n}\n", "a") == \
        'set default="kernel-a"\nmenuentry a --id kernel-a {\n}\n'


def test_firstboot_reports_the_firmware_the_kernel_booted_by(tmp_path):
    efi = tmp_path / "efi"
    assert firstboot.firmware(efi, efi / "SecureBoot") == {"firmware": "bios", "secure_boot": False}
    efi.mkdir()
    assert firstboot.firmware(efi, efi / "SecureBoot") == {"firmware": "uefi", "secure_boot": None}
    (efi / "SecureBoot").write_bytes(b"\x06\x00\x00\x00\x01")
    assert firstboot.firmware(efi, efi / "SecureBoot") == {"firmware": "uefi", "secure_boot": True}
    (efi / "SecureBoot").write_bytes(b"\x06\x00\x00\x00\x00")
    assert firstboot.firmware(efi, efi / "SecureBoot")["secure_boot"] is False


def test_firstboot_seed_sources_merge_in_order():
    cmd = firstboot.from_cmdline("BOOT_IMAGE=/vmlinuz ro longhaul.name=R1 longhaul.role=router "
                                 "longhaul.mgmt=10.0.9.31/24 longhaul.gateway=10.0.9.1 quiet longhaul.bogus=1")
    assert cmd == {"name": "R1", "role": "router", "interfaces": [{"match": "eth0", "address": "10.0.9.31/24"}],
                   "routes": [{"to": "default", "via": "10.0.9.1"}]}
    merged = firstboot.merge({"name": "x", "role": "sender", "sysctl": {"a": 1}}, {"sysctl": {"b": 2}}, cmd)
    assert merged["name"] == "R1" and merged["sysctl"] == {"a": 1, "b": 2}


def test_firstboot_refuses_bad_seeds():
    with pytest.raises(firstboot.SeedError, match="role = 'switch'"):
        firstboot.validate({"role": "switch"})
    with pytest.raises(firstboot.SeedError, match="unknown seed keys"):
        firstboot.validate({"hostname": "x"})
    with pytest.raises(firstboot.SeedError, match="needs mac or match"):
        firstboot.validate({"interfaces": [{"address": "10.0.0.1/24"}]})
    with pytest.raises(firstboot.SeedError, match="no interface has MAC"):
        firstboot.network_plan({"interfaces": [{"mac": "52:54:00:00:00:09"}]}, {"eth0": "52:54:00:00:00:01"})


def test_firstboot_schedule_runs_longhaul_schedule_on_controllers_only():
    seed = {"role": "controller", "schedule": {"suite": "regression-nightly", "on_calendar": "Mon..Fri 02:00",
                                               "on_kernel_change": True}}
    firstboot.validate(seed)
    assert firstboot.schedule_argv(seed["schedule"]) == [
        "/usr/local/bin/longhaul", "schedule", "regression-nightly", "--config", "/etc/longhaul/config.toml",
        "--on-calendar", "Mon..Fri 02:00", "--on-kernel-change"]
    assert firstboot.schedule_argv({"suite": "s", "on_kernel_change": False, "on_calendar": "daily"})[-2:] == [
        "--on-calendar", "daily"]
    for bad, message in ((dict(seed, role="router"), "only a controller"),
                         ({"role": "controller", "schedule": {"on_kernel_change": True}}, "needs suite"),
                         ({"role": "controller", "schedule": {"suite": "s"}}, "needs on_calendar, on_kernel_change"),
                         ({"role": "controller", "schedule": {"suite": "s", "on_kernel_change": "yes"}},
                          "schedule.on_kernel_change = 'yes'"),
                         ({"role": "controller", "schedule": {"suite": "s", "at": "2:00"}}, "schedule.at")):
        with pytest.raises(firstboot.SeedError, match=message):
            firstboot.validate(bad)


def test_a_scheduled_controller_does_not_also_run_its_config_at_boot(tmp_path, monkeypatch):
    monkeypatch.setattr(firstboot, "ETC", tmp_path / "etc")
    (tmp_path / "etc").mkdir()
    seed = tmp_path / "seed"
    (seed / "profiles").mkdir(parents=True)
    (seed / "config.toml").write_text("[run]\n")
    (seed / "profiles/regression-nightly.toml").write_text("")
    firstboot.install_controller(seed)
    assert (tmp_path / "etc/controller").exists() and (tmp_path / "etc/profiles/regression-nightly.toml").exists()
    firstboot.install_controller(seed, run_at_boot=False)       # the seed gained a [schedule]
    assert not (tmp_path / "etc/controller").exists() and (tmp_path / "etc/config.toml").exists()


def test_firstboot_installs_a_schedule_once_per_image_revision(tmp_path, monkeypatch):
    monkeypatch.setattr(firstboot, "ETC", tmp_path / "etc")
    monkeypatch.setattr(firstboot, "UNIT_DIR", tmp_path / "units")
    monkeypatch.setattr(firstboot, "LONGHAUL", "/bin/false")       # a real command that fails
    (tmp_path / "etc").mkdir()
    (tmp_path / "units").mkdir()
    (tmp_path / "etc/image-revision").write_text("abc123\n")
    schedule = {"suite": "nightly", "on_calendar": "daily", "on_kernel_change": True}
    assert firstboot.schedule_units(schedule) == [tmp_path / "units/longhaul-suite-nightly.timer",
                                                  tmp_path / "units/longhaul-suite-nightly-boot.service"]
    with pytest.raises(firstboot.SeedError, match="longhaul schedule exited 1"):
        firstboot.install_schedule(schedule)
    assert not (tmp_path / "etc/schedule.installed").exists()
    monkeypatch.setattr(firstboot, "LONGHAUL", "/bin/true")
    assert firstboot.install_schedule(schedule) is True
    for unit in firstboot.schedule_units(schedule):      # what the real longhaul schedule would have written
        unit.write_text("")
    assert firstboot.install_schedule(schedule) is False                  # kept: not run again
    (tmp_path / "etc/image-revision").write_text("def456\n")             # a new image: installed anew
    assert firstboot.install_schedule(schedule) is True
    firstboot.schedule_units(schedule)[1].unlink()                        # someone removed a unit
    assert firstboot.install_schedule(schedule) is True


def test_firstboot_network_plan_renames_addresses_and_forwards_on_routers():
    seed = {"role": "router", "interfaces": [{"mac": "52:54:00:AA:00:02", "name": "wan", "address": "10.0.0.1/30"},
                                             {"match": "eth0", "address": "10.9.0.31/24"}],
            "routes": [{"to": "10.2.0.0/16", "via": "10.0.0.2"}], "sysctl": {"net.core.rmem_max": 67108864}}
    plan = firstboot.network_plan(seed, {"eth0": "52:54:00:aa:00:01", "eth1": "52:54:00:aa:00:02"})
    assert plan == [
        ["sysctl", "-q", "-w", "net.core.rmem_max=67108864"], ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        ["ip", "link", "set", "dev", "eth1", "down"], ["ip", "link", "set", "dev", "eth1", "name", "wan"],
        ["ip", "addr", "replace", "10.0.0.1/30", "dev", "wan"], ["ip", "link", "set", "dev", "wan", "up"],
        ["ip", "addr", "replace", "10.9.0.31/24", "dev", "eth0"], ["ip", "link", "set", "dev", "eth0", "up"],
        ["ip", "link", "set", "dev", "lo", "up"], ["ip", "route", "replace", "10.2.0.0/16", "via", "10.0.0.2"]]
    assert not any("ip_forward" in " ".join(a) for a in firstboot.network_plan({"role": "sender"}, {}))


def test_firstboot_names_the_host_s_own_addresses_in_etc_hosts_once():
    seed = {"name": "D1", "interfaces": [{"match": "eth0", "address": "10.9.0.21/24"},
                                         {"mac": "52:54:00:aa:00:02", "address": "10.2.1.2/24"}, {"match": "eth2"}]}
    first = firstboot.hosts_file("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n", seed)
    assert first.splitlines() == ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost",
                                  f"10.9.0.21\tD1\t{firstboot.HOSTS_MARK}", f"10.2.1.2\tD1\t{firstboot.HOSTS_MARK}"]
    moved = {**seed, "interfaces": [{"match": "eth0", "address": "10.9.0.22/24"}]}
    again = firstboot.hosts_file(first + "192.0.2.7\tntp\n", moved)       # a later boot with a new seed
    assert again.splitlines() == ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost", "192.0.2.7\tntp",
                                  f"10.9.0.22\tD1\t{firstboot.HOSTS_MARK}"]


def _in_image(raw: Path, path: str) -> bool:
    """Whether the built image's root file system has `path` (debugfs reads the ext4 partition in
    place: nothing mounted, no root needed)."""
    done = subprocess.run(["debugfs", "-R", f"stat {path}", f"{raw}?offset={disk.PART_OFFSET}"],
                          capture_output=True, text=True, timeout=60)
    return "Inode:" in done.stdout


def test_the_built_image_carries_every_driver_s_programs():
    raw = REPO / "build" / "image" / "longhaul.raw"
    if not raw.is_file():
        why = f"no appliance image at {raw} (make image builds it; make test does it first)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    missing = []
    for name in TOOLS:
        tool = tool_for(name)
        if tool.sends_from == "generator":    # TRex is the generator's own install, not the image's
            continue
        programs = list(tool.executables) + ([str(ccashim.library_path())] if not tool.sets_cca else [])
        for program in programs:
            if program.startswith("/"):       # longhaul's helpers: the image has the checkout at /opt/longhaul
                candidates = ["/opt/longhaul/" + str(Path(program).relative_to(REPO))]
            else:
                candidates = [f"{d}/{program}" for d in ("/usr/bin", "/usr/sbin")]
            if not any(_in_image(raw, c) for c in candidates):
                missing.append(f"{name}: {program} (looked at {', '.join(candidates)})")
    assert missing == [], missing


def test_the_built_image_runs_no_housekeeping():
    """Timers and scrubs that would run in the middle of a trial are masked (links to /dev/null)."""
    raw = REPO / "build" / "image" / "longhaul.raw"
    if not raw.is_file():
        pytest.skip(f"no appliance image at {raw} (make image builds it)")
    for unit in build.HOUSEKEEPING_UNITS:
        done = subprocess.run(["debugfs", "-R", f"stat /etc/systemd/system/{unit}", f"{raw}?offset={disk.PART_OFFSET}"],
                              capture_output=True, text=True, timeout=60)
        assert "Type: symlink" in done.stdout and "/dev/null" in done.stdout, (unit, done.stdout[-300:])


def test_the_image_is_built_from_the_machines_own_apt_sources(tmp_path):
    """One-line and deb822 entries; only the image's suites and `main`; a disabled stanza, another
    archive and backports left out; a machine without the security suite is told what to add."""
    from longhaul.appliance.image.apt_sources import image_mirrors, read_sources
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# the facility's mirror\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.lab.example/debian bookworm main contrib\n"
        "deb-src http://mirror.lab.example/debian bookworm main\n"
        "deb http://mirror.lab.example/debian bookworm-backports main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.lab.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://old.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n")
    (tmp_path / "sources.list.d" / "vendor.list").write_text("deb https://vendor.example/apt stable main\n")
    assert image_mirrors("bookworm", read_sources(tmp_path)) == [
        "deb http://mirror.lab.example/debian bookworm main",
        "deb http://mirror.lab.example/debian-security bookworm-security main"]
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    with pytest.raises(ValueError, match="no `main` entry for bookworm-security"):
        image_mirrors("bookworm", read_sources(tmp_path))


def test_the_qemu_lab_boots_only_by_a_firmware_its_image_boots_by(tmp_path):
    """An image built before it booted by UEFI lists no firmware (legacy BIOS only): asking it for
    UEFI is refused at the key; an image that lists it is taken."""
    from longhaul.core.errors import SettingError
    from longhaul.hardware.backends.qemu.backend import QemuBackend, QemuSettings
    image = tmp_path / "build/image"
    image.mkdir(parents=True)
    (image / "longhaul.raw").write_bytes(b"")
    (image / MANIFEST).write_text(json.dumps(IMAGE.stamp()))
    settings = QemuSettings.model_validate({"qemu": {"firmware": "uefi"}})
    with pytest.raises(SettingError) as exc:
        QemuBackend().configure(settings, tmp_path)
    assert exc.value.keypath == ("qemu", "firmware") and "boots by: bios" in str(exc.value), exc.value
    (image / MANIFEST).write_text(json.dumps({**IMAGE.stamp(), "firmware": ["bios", "uefi", "uefi-secureboot"]}))
    if FIRMWARE["uefi"].missing() is None:
        assert QemuBackend().configure(settings, tmp_path).section.firmware == "uefi"
