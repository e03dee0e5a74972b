"""The embedded lab on a kernel whose congestion controls are modules (a stock Debian kernel: reno
and cubic registered, htcp and scalable as module files): preflight finds them loadable, a run
loads those its cells name and records it, and a kernel that refuses one stops the run before any
lab is built."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from longhaul.hardware.backends.netns import features as netns_features
from longhaul.hardware.backends.netns.features import Features, load_modules
from longhaul.hardware.tuning import loadable_ccas

DATA = Path(__file__).resolve().parents[1] / "data"


def test_the_probe_of_a_debian_kernel_finds_its_modules_loadable():
    """hardware/verdicts.py's KERNEL_SH as it printed in a VM booted from the appliance image
    (Debian's 6.1.0-56-amd64; bench/debian_kernel.py captured it)."""
    found = (DATA / "kernel-probe-tcp-debian12.txt").read_text()
    got = loadable_ccas(found)
    assert {"htcp", "scalable", "vegas", "westwood"} <= set(got)
    assert "cubic" not in got and "reno" not in got          # loaded or built in, not loadable


def test_this_machine_s_kernel_with_no_module_files_has_none_loadable():
    assert loadable_ccas("htcp config none\nscalable unknown modinfo: ERROR: Module tcp_scalable not found.\n") == ()


def _features(**kw) -> Features:
    return Features(True, True, True, True, True, ("reno", "cubic"), ("reno", "cubic"),
                    loadable_ccas=("htcp", "scalable"), **kw)


def test_a_run_loads_the_modules_its_cells_name_and_says_so(monkeypatch):
    loaded: list[list[str]] = []
    registered = ["reno", "cubic"]

    def run(argv, **kw):
        loaded.append(argv)
        registered.append(argv[1].removeprefix("tcp_"))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(netns_features.subprocess, "run", run)
    monkeypatch.setattr(netns_features, "local_ccas", lambda kind="available": tuple(registered))
    features = _features()
    assert features.runnable_ccas[:4] == ("reno", "cubic", "htcp", "scalable")
    after = load_modules(features, ("cubic", "htcp", "htcp", "lh_frac1"))
    assert loaded == [["modprobe", "tcp_htcp"]]
    assert after.modules_loaded == ("tcp_htcp",) and after.as_dict()["modules_loaded"] == ["tcp_htcp"]
    assert "htcp" in after.congestion_controls and after.loadable_ccas == ("scalable",)
    assert load_modules(after, ("htcp",)) is after            # loaded once


def test_a_module_the_kernel_refuses_is_named(monkeypatch):
    monkeypatch.setattr(netns_features.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "modprobe: FATAL: Operation not permitted"))
    with pytest.raises(RuntimeError, match="modprobe tcp_scalable failed: modprobe: FATAL: Operation not permitted"):
        load_modules(_features(), ("scalable",))
