"""drivers/agents/dpdk_port.py: the arithmetic of huge pages, and what it refuses without touching
anything. Binding a real PCI NIC is proven on a VM (tests/system/test_qemu_lab.py, vm-tools' dpdk-pci)."""
from __future__ import annotations

import json

import pytest

from longhaul.drivers.agents import dpdk_port

MEMINFO = """MemTotal:         493232 kB
AnonHugePages:         0 kB
HugePages_Total:      32
HugePages_Free:       20
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:           65536 kB
"""


def test_meminfo_reads_the_huge_page_lines():
    assert dpdk_port.meminfo(MEMINFO) == {"HugePages_Total": 32, "HugePages_Free": 20, "Hugepagesize": 2048}


def test_pages_are_added_only_for_what_is_not_free():
    info = dpdk_port.meminfo(MEMINFO)
    assert dpdk_port.pages_wanted(info, 40) is None                  # 20 free 2 MB pages hold 40 MB
    assert dpdk_port.pages_wanted(info, 128) == 32 + 64 - 20
    assert dpdk_port.pages_wanted({**info, "Hugepagesize": 1048576, "HugePages_Free": 1}, 1500) == 33  # 1 GB pages
    assert dpdk_port.pages_wanted({"HugePages_Total": 0, "HugePages_Free": 0, "Hugepagesize": 2048}, 129) == 65


def test_a_missing_device_is_refused_before_anything_is_recorded(tmp_path, capsys):
    state = tmp_path / "w" / "port.json"
    assert dpdk_port.main(["bind", "0000:7f:1f.7", "--hugepages-mb", "64", "--state", str(state)]) == 1
    assert "no PCI device 0000:7f:1f.7" in capsys.readouterr().err and not state.exists()


def test_restore_without_a_record_does_nothing(tmp_path, capsys):
    assert dpdk_port.main(["restore", "--state", str(tmp_path / "none.json")]) == 0
    assert json.loads(capsys.readouterr().out) == {"restored": "nothing recorded"}


def test_the_driver_follows_the_iommu(tmp_path, monkeypatch):
    groups = tmp_path / "iommu_groups"
    groups.mkdir()
    monkeypatch.setattr(dpdk_port, "IOMMU_GROUPS", groups)
    assert dpdk_port.dpdk_driver() == "uio_pci_generic"             # a VM without a virtual IOMMU
    (groups / "0").mkdir()
    assert dpdk_port.dpdk_driver() == "vfio-pci"


@pytest.mark.parametrize("argv", [["bind", "0000:00:10.0", "--state", "x"], ["restore"]])
def test_the_arguments_are_required(argv):
    with pytest.raises(SystemExit):
        dpdk_port.main(argv)
