"""The appliance image's pure parts: the build recipe (appliance/image/build.py), the first-boot
seed handling that runs inside the image (appliance/image/firstboot.py), and the qemu fleet plan
(hardware/backends/qemu/fleet.py) with the inventory it hands to the ssh backend. Booting the image is
tests/test_qemu_lab.py."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from longhaul.appliance.image import build, firstboot
from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import fleet as qf
from longhaul.hardware.backends.ssh.inventory import load_inventory


def test_base_key_follows_what_the_base_is_made_of():
    pk, py = build.image_packages(), build.python_requirements()
    assert "linux-image-amd64" in pk and "openssh-server" in pk and "iperf3" in pk and "fping" in pk
    assert any(r.startswith("pydantic") for r in py)
    key = build.base_key(pk, py)
    assert key == build.base_key(list(reversed(pk)), py)          # order does not matter
    assert key != build.base_key(pk + ["htop"], py)
    assert key != build.base_key(pk, py + ["tslearn"])


def test_mmdebstrap_recipe_has_no_baked_secrets():
    argv = build.mmdebstrap_argv(["iperf3", "openssh-server"], ["pydantic>=2.5,<3"], Path("/tmp/x"))
    assert argv[:5] == ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
                        "--include=iperf3,openssh-server"]
    assert argv[-3:] == ["bookworm", "/tmp/x", "http://deb.debian.org/debian"]
    hooks = [argv[i + 1] for i, a in enumerate(argv) if a == "--customize-hook"]
    assert 'rm -f "$1"/etc/ssh/ssh_host_*' in hooks                   # each host makes or gets its own
    assert 'chroot "$1" passwd -l root' in hooks                       # no password: keys only
    assert any("serial-getty@ttyS0" in h and "mask" in h for h in hooks)
    assert any("'pydantic>=2.5,<3'" in h for h in hooks)               # quoted for the hook's shell
    assert "PasswordAuthentication no" in build.sshd_config()


def test_disk_layout_and_boot_config():
    assert build.sfdisk_script() == "label: dos\nstart=2048, type=83, bootable\n"
    size = build.disk_size_bytes(1_000_000_000)
    assert size % (1 << 20) == 0 and size >= 1_000_000_000 * 4 // 3 + (512 << 20)
    argv = build.mke2fs_argv(Path("/t"), Path("/d.raw"), size)
    assert argv[argv.index("-E") + 1] == "offset=1048576" and argv[-1] == str((size - (1 << 20)) // 4096)
    assert "^64bit,^metadata_csum" in argv                               # extlinux reads the classic layout
    conf = build.extlinux_conf()
    assert "LINUX /vmlinuz" in conf and "root=LABEL=longhaul-root" in conf and "console=ttyS0" in conf
    assert build.fstab().startswith("LABEL=longhaul-root / ext4")


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


def test_fleet_plan_is_a_dumbbell_with_unique_names():
    plan = qf.fleet_plan("lhq7", 7, 2)
    assert [v.name for v in plan.vms] == ["S1", "S2", "R1", "R2", "D1", "D2"]
    taps = [n.tap for v in plan.vms for n in v.nics]
    macs = [n.mac for v in plan.vms for n in v.nics]
    assert len(set(taps)) == len(taps) and all(len(t) <= 15 for t in taps)
    assert len(set(macs)) == len(macs)
    assert set(plan.bridges) == {"mgmt", "wan", "s1", "s2", "d1", "d2"}
    assert {n.bridge for v in plan.vms for n in v.nics} == set(plan.bridges)
    r1 = plan.vm("R1")
    assert [n.name for n in r1.nics] == ["eth0", "wan", "s1", "s2"] and [n.bottleneck for n in r1.nics][1]
    assert plan.vm("S2").routes == (("10.222.0.0/16", "10.221.2.1"),)
    assert plan.vm("R2").routes == (("10.221.0.0/16", "10.220.0.1"),)
    assert plan.controller_ip == "10.213.7.1" and plan.vm("R1").mgmt == "10.213.7.31"
    with pytest.raises(ValueError):
        qf.fleet_plan("lhq7", 7, 0)


def test_fleet_inventory_passes_the_inventory_validator(tmp_path):
    plan = qf.fleet_plan("lhq7", 7, 1)
    path = tmp_path / "inventory.toml"
    path.write_text(qf.inventory_toml(plan, tmp_path / "key", tmp_path / "known_hosts", "6.1.0-28-amd64"))
    inv = load_inventory(path)
    assert [(p.sender, p.receiver) for p in inv.pairs] == [("S1", "D1")]
    r1, r2 = inv.routers()
    assert (r1.name, r2.name) == ("R1", "R2") and inv.inventory.trust_on_first_use is False
    assert [i.name for i in r1.interfaces if i.link == "bottleneck"] == ["wan"]


def test_fleet_seed_is_what_firstboot_reads():
    plan = qf.fleet_plan("lhq7", 7, 1)
    vm = plan.vm("R1")
    text = qf.seed_toml(qf.seed(vm, "ssh-ed25519 AAAA controller", "R1_ed25519"))
    data = tomllib.loads(text)
    firstboot.validate(data)
    links = {f"eth{i}": n.mac for i, n in enumerate(vm.nics)}
    plan_argv = firstboot.network_plan(data, links)
    assert ["ip", "link", "set", "dev", "eth1", "name", "wan"] in plan_argv
    assert ["ip", "addr", "replace", "10.220.0.1/30", "dev", "wan"] in plan_argv
    assert ["ip", "route", "replace", "10.222.0.0/16", "via", "10.220.0.2"] in plan_argv


def test_qemu_argv_and_namespace_plan():
    plan = qf.fleet_plan("lhq7", 7, 1)
    vm = plan.vm("S1")
    argv = qf.qemu_argv(vm, Path("/w/S1.qcow2"), Path("/w/S1-seed.img"), Path("/w/S1.log"), "tcg", 512)
    assert argv[:1] == ["qemu-system-x86_64"] and "tcg,tb-size=64" in argv and "-cpu" not in argv
    assert "file=/w/S1-seed.img,if=virtio,format=raw,readonly=on" in argv
    assert f"virtio-net-pci,netdev=n1,mac={vm.nics[1].mac},romfile=" in argv
    ns = qf.namespace_plan(plan)
    assert ns[0] == ["ip", "netns", "add", "lhq7-ns"]
    assert ["ip", "addr", "add", "10.213.7.1/24", "dev", "lhq7c"] in ns          # the only root-namespace address
    root_side = [a for a in ns if a[1] not in ("netns", "-n")]
    assert all("lhq7c" in a for a in root_side)


def test_accel_choice_on_this_machine():
    accel, why = qf.choose_accel("auto")
    if Path("/sys/module/kvm_pvm").exists():
        assert accel == "tcg" and "kvm_pvm" in why
        with pytest.raises(RuntimeError, match="kvm_pvm"):
            qf.choose_accel("kvm")
    assert qf.choose_accel("tcg") == ("tcg", "asked for")


def test_controller_install_paths_map_to_the_hosts_longhaul_root(tmp_path):
    from longhaul.hardware.executors.process import ProcessTable
    from longhaul.hardware.executors.ssh import map_paths

    here = str(REPO)
    pm = ((f"{here}/.venv/", "/opt/longhaul/.venv/"), (f"{here}/build/", "/opt/longhaul/build/"))
    argv = [f"{here}/.venv/bin/python", "-m", "x", f"LD_PRELOAD={here}/build/lib/liblonghaul_ccashim.so",
            f"{here}/runs/r1/out.json", "--period=0.1", "iperf3"]
    assert map_paths(argv, pm) == ["/opt/longhaul/.venv/bin/python", "-m", "x",
                                   "LD_PRELOAD=/opt/longhaul/build/lib/liblonghaul_ccashim.so",
                                   f"{here}/runs/r1/out.json", "--period=0.1", "iperf3"]   # results stay put
    plan = qf.fleet_plan("lhq7", 7, 1)
    path = tmp_path / "inventory.toml"
    path.write_text(qf.inventory_toml(plan, tmp_path / "key", tmp_path / "known_hosts"))
    inv = load_inventory(path)
    assert inv.path_map() == pm
    ex = inv.executor("S1", ProcessTable())
    command = ex.wrap([f"{here}/.venv/bin/python", "-V"])[-1]
    assert "/opt/longhaul/.venv/bin/python" in command and f"{here}/.venv" not in command
