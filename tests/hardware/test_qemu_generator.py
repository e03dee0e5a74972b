"""The qemu lab's generator VM (hardware/backends/qemu/generator.py): G1 beside the senders, its
TRex port a virtio-net PCI NIC on a segment of its own into R1, the release tree shared read-only.

TRex's release tree cannot be installed here: the plan, the inventory the ssh backend reads, the
qemu arguments, TRex's configuration and the refusals are tested; the live run needs a tree
(LONGHAUL_TREX_PATH) and skips with that reason where there is none."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from lab_support import write_lab_config
from trex_support import TREX_PATH, fake_tree, live_profile, needs_tree

from longhaul.core.errors import SettingError
from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import fleet as qf
from longhaul.hardware.backends.qemu import generator as qg
from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.backends.qemu.backend import QemuBackend, QemuSettings
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.generator import platform_config
from longhaul.hardware.image_files import IMAGE, MANIFEST
from longhaul.hardware.netboot.seed import seed_toml


def test_g1_sits_beside_the_senders_on_a_segment_of_its_own_into_r1():
    plan = qp.fleet_plan("lq7", 7, 2, generator=True)
    assert [v.name for v in plan.vms] == ["S1", "S2", "G1", "R1", "R2", "D1", "D2"]
    g1, r1, r2 = plan.vm("G1"), plan.vm("R1"), plan.vm("R2")
    assert g1.role == "generator" and g1.mgmt == "10.213.7.41"
    port = g1.nics[1]
    assert (port.bridge, port.name, port.address, port.pci) == ("g1", "trex0", "10.223.0.2/24", qp.DPDK_PCI)
    assert [(n.bridge, n.name, n.address) for n in r1.nics if n.bridge == "g1"] == [("g1", "g1", "10.223.0.1/24")]
    # R2 sends what answers the generator back over the bottleneck: R1's reverse-path filter passes it
    assert ("10.223.0.0/24", "10.220.0.1") in r2.routes
    taps = [n.tap for v in plan.vms for n in v.nics]
    macs = [n.mac for v in plan.vms for n in v.nics]
    assert len(set(taps)) == len(taps) and all(len(t) <= 15 for t in taps) and len(set(macs)) == len(macs)
    assert "g1" in plan.bridges and {n.bridge for v in plan.vms for n in v.nics} == set(plan.bridges)
    # without a generator the fleet is as it was
    assert "G1" not in [v.name for v in qp.fleet_plan("lq7", 7, 2).vms]


def test_the_inventory_names_g1_the_generator_with_its_tree_and_trex_port(tmp_path):
    plan = qp.fleet_plan("lq7", 7, 1, generator=True)
    path = tmp_path / "inventory.toml"
    path.write_text(qp.inventory_toml(plan, tmp_path / "key", tmp_path / "known_hosts", trex_path="/opt/trex/v3.06"))
    inv = load_inventory(path)
    g1 = inv.generator()
    assert g1 is not None and g1.name == "G1" and g1.trex_path == "/opt/trex/v3.06"
    (port,) = [i for i in g1.interfaces if i.pci]
    assert (port.pci, port.address, port.dpdk) == (qp.DPDK_PCI, "10.223.0.2/24", False)
    assert inv.host("S1").interfaces[1].dpdk is True         # the senders' DPDK ports stay testpmd's
    # first boot leaves the TRex port without an address: DPDK takes it
    seed = tomllib.loads(seed_toml(qp.seed(plan.vm("G1"), "ssh-ed25519 AAAA c", "G1_ed25519")))
    assert {"mac": port_mac(plan), "name": "trex0"} in seed["interfaces"]          # no address key


def port_mac(plan) -> str:
    return plan.vm("G1").nics[1].mac


def test_g1_boots_with_the_tree_shared_read_only_and_room_for_trex():
    plan = qp.fleet_plan("lq7", 7, 1, generator=True)
    argv = qf.qemu_argv(plan.vm("G1"), None, Path("/w/G1.log"), "tcg", 512 + qg.HUGEPAGES_MB,
                        extra=tuple(qg.share_argv("/opt/trex/v3.06")))
    share = argv[argv.index("-virtfs") + 1]
    assert share == "local,path=/opt/trex/v3.06,mount_tag=lhtrex,security_model=none,readonly=on"
    assert argv[argv.index("-m") + 1] == str(512 + qg.HUGEPAGES_MB)
    assert f"virtio-net-pci,netdev=n1,mac={port_mac(plan)},romfile=,addr=0x10" in argv
    mount, mkdir, bind = qg.prepare_argv("/opt/trex/v3.06", qp.DPDK_PCI)
    assert mount[:2] == ["sh", "-c"] and mount[-2:] == [qg.TREE_TAG, "/opt/trex/v3.06"]
    assert bind[0] == sys.executable and bind[1:5] == ["-m", "longhaul.drivers.agents.dpdk_port", "bind", qp.DPDK_PCI]
    assert bind[bind.index("--hugepages-mb") + 1] == str(qg.HUGEPAGES_MB)


def test_trex_drives_g1_s_pci_port_beside_a_dummy_from_its_generated_config():
    cfg = yaml.safe_load(platform_config([qg.trex_port(qp.DPDK_PCI)]))     # as TRex reads it
    assert cfg == [{"version": 2, "port_limit": 2, "interfaces": ["00:10.0", "dummy"],
                    "port_info": [{"ip": "10.223.0.2", "default_gw": "10.223.0.1"},
                                  {"ip": "0.0.0.0", "default_gw": "0.0.0.0"}]}]


def _image(root: Path) -> Path:
    root.mkdir()
    (root / "longhaul.raw").write_bytes(b"")
    (root / MANIFEST).write_text(json.dumps({**IMAGE.stamp(), "firmware": ["bios"], "kernel": "6.1.0-28-amd64"}))
    return root


def test_a_tree_gives_the_qemu_lab_a_generator_and_a_missing_one_is_refused(tmp_path):
    backend, image = QemuBackend(), _image(tmp_path / "image")
    plain = backend.configure(QemuSettings.model_validate({"qemu": {"image": str(image)}}), tmp_path)
    assert not backend.has_generator(plain)
    tree = fake_tree(tmp_path / "trex")
    configured = backend.configure(QemuSettings.model_validate({"qemu": {"image": str(image)}, "trex": {"path": "trex"}}),
                                   tmp_path)
    assert backend.has_generator(configured) and configured.trex.path == str(tree)
    with pytest.raises(SettingError, match="t-rex-64"):
        backend.configure(QemuSettings.model_validate({"qemu": {"image": str(image)}, "trex": {"path": "nowhere"}}),
                          tmp_path)


# under TCG the VMs are trusted to about 20 Mb/s
VM_PROFILE = live_profile("qemu lab", access_mbps=1000, bottleneck_mbps=10, queue="100KB", udp_mbps=4, duration_s=10)


@pytest.mark.lab
@pytest.mark.hardware
@needs_tree
@pytest.mark.timeout(1800)
def test_live_trex_flow_in_the_qemu_lab(tmp_path):
    """A trex background beside iperf3 on the VM fleet, TRex in G1 on its DPDK port: the run
    completes, and what the receiver's meter counted of it is within what the routers shape to."""
    config = write_lab_config(tmp_path, VM_PROFILE, "trex-vm")
    config.write_text(config.read_text() + f'[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{REPO / "build" / "image"}"\n'
                      f'[lab.trex]\npath = "{TREX_PATH}"\n')
    done = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=1750, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
    bg = next(f for f in cell["trials"][0]["flows"] if f["name"] == "bg")
    assert 0 < bg["mean_mbps"] <= 10 * 1.03, bg
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "G1" in manifest["features"]["vm_lab"]["vms"]
