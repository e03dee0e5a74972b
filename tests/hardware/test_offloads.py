"""[tuning] offloads (hardware/offloads.py): the ethtool plan, reading states from real `ethtool -k`
output (tests/data/fingerprint/), and a driver that keeps a feature failing the lab, named. The
labs that apply them: tests/system/test_lab_run.py (netns, read back through the fingerprint) and
tests/system/test_hosts_lab.py (ssh hosts: recorded, applied, restored), and the qemu VM test."""

from __future__ import annotations

from pathlib import Path

import pytest

from longhaul.hardware.executors.process import Completed
from longhaul.hardware.offloads import FEATURES, apply_offloads, offload_argv, offload_states, read_offloads, refused

DATA = Path(__file__).parents[1] / "data" / "fingerprint"


def test_one_ethtool_call_in_a_stable_order():
    assert offload_argv("eth1", {"tso": True, "gro": False, "gso": False}) == \
        ["ethtool", "-K", "eth1", "gro", "off", "gso", "off", "tso", "on"]
    with pytest.raises(ValueError, match="unknown offloads"):
        offload_argv("eth1", {"turbo": True})


def test_states_from_a_veth_and_from_debian_s_virtio_net():
    veth = offload_states((DATA / "ethtool_k_veth.txt").read_text(), list(FEATURES))
    assert veth["tso"] is True and veth["lro"] is False
    virtio = offload_states((DATA / "ethtool_k_virtio_debian.txt").read_text(), list(FEATURES))
    # "off [requested on]" is off, "on [fixed]" is on
    assert virtio == {"gro": True, "gso": False, "tso": False, "lro": False, "sg": False, "rx": True, "tx": False}


def test_a_feature_the_driver_keeps_is_named_with_what_ethtool_says():
    text = (DATA / "ethtool_k_virtio_debian.txt").read_text()
    assert refused(text, {"lro": True, "gro": True, "gso": True}) == ["gso on (off [requested on])", "lro on (off [fixed])"]
    with pytest.raises(RuntimeError, match="no features"):
        offload_states("nothing here", ["gro"])


class Host:
    """An executor answering ethtool as a driver would: gro settable, lro fixed off."""

    name = "S1"

    def __init__(self):
        self.state = {"gro": "off", "lro": "off [fixed]"}
        self.calls: list[list[str]] = []

    def run(self, argv, timeout=30.0, check=True, input=None):
        self.calls.append(argv)
        if argv[:2] == ["ethtool", "-K"]:
            words = argv[3:]
            for name, value in zip(words[::2], words[1::2]):
                if "[fixed]" not in self.state[name]:
                    self.state[name] = value
            return Completed(argv, 0, "", "")
        text = f"Features for {argv[2]}:\n" + "".join(f"{FEATURES[k]}: {v}\n" for k, v in self.state.items())
        return Completed(argv, 0, text, "")


def test_apply_reads_back_and_fails_on_what_the_driver_kept():
    host = Host()
    assert read_offloads(host, "eth0", ["gro"]) == {"gro": False}
    apply_offloads(host, "eth0", {"gro": True})
    assert host.state["gro"] == "on" and host.calls[-1] == ["ethtool", "-k", "eth0"]
    with pytest.raises(RuntimeError, match=r"S1 eth0: the driver kept lro on \(off \[fixed\]\)"):
        apply_offloads(host, "eth0", {"lro": True})
