"""Who holds a BPF congestion control, without a kernel: a fake kernel list stands for
tcp_available_congestion_control and bpftool (tests/system/test_bpf_ccas_lab.py does it for real)."""

import json
import os

import pytest

from longhaul.hardware import bpf_ccas, run_marker


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """The registered algorithms of a fake kernel, and run markers under tmp_path."""
    registered = ["reno", "cubic"]
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(bpf_ccas, "kernel_ccas", lambda: tuple(registered))
    monkeypatch.setattr(bpf_ccas, "register", lambda name: registered.append(name))
    monkeypatch.setattr(bpf_ccas, "unregister", lambda name: registered.remove(name))
    return registered


def _mark(tag: str, pid: int) -> None:
    run_marker.STATE_DIR.mkdir(parents=True, exist_ok=True)
    (run_marker.STATE_DIR / f"{tag}.json").write_text(json.dumps({"pid": pid, "run_dir": "/nowhere"}))


def _dead_pid() -> int:
    pid = 4_000_000
    while run_marker.alive(pid):
        pid += 1
    return pid


def test_a_run_registers_what_the_kernel_lacks_once_and_unregisters_it_at_its_end(kernel):
    _mark("aaaaaa", os.getpid())
    with bpf_ccas.held("aaaaaa") as holding:
        holding.ensure(["reno", "lh_htcp", "lh_htcp", "bbr", "lh_frac10"])
        holding.ensure(["lh_htcp"])                       # a second lab build registers nothing again
        assert kernel == ["reno", "cubic", "lh_htcp", "lh_frac10"]
        assert (run_marker.STATE_DIR / "aaaaaa.bpf").read_text().split() == ["lh_htcp", "lh_frac10"]
    assert kernel == ["reno", "cubic"] and not (run_marker.STATE_DIR / "aaaaaa.bpf").exists()


def test_what_another_live_run_holds_stays_and_a_dead_run_s_is_clean_s(kernel):
    _mark("aaaaaa", os.getpid())
    _mark("bbbbbb", os.getpid())
    other = bpf_ccas.Holding("bbbbbb")
    other.ensure(["lh_scalable"])
    with bpf_ccas.held("aaaaaa") as holding:
        holding.ensure(["lh_htcp"])
        assert holding.mine == ["lh_htcp"]                # the other run registered lh_scalable
    assert kernel == ["reno", "cubic", "lh_scalable"]
    # the other run is SIGKILLed: its marker's pid is gone, its hold file stays
    _mark("bbbbbb", _dead_pid())
    assert bpf_ccas.leftovers(remove=False) == ["BPF congestion control lh_scalable"]
    assert kernel == ["reno", "cubic", "lh_scalable"]      # a dry run removes nothing
    assert bpf_ccas.leftovers(remove=True) == ["BPF congestion control lh_scalable"]
    assert kernel == ["reno", "cubic"] and bpf_ccas.leftovers(remove=True) == []


def test_a_dead_run_s_hold_is_kept_while_a_live_run_holds_the_same(kernel):
    _mark("cccccc", _dead_pid())
    (run_marker.STATE_DIR / "cccccc.bpf").write_text("lh_htcp\n")
    _mark("dddddd", os.getpid())
    (run_marker.STATE_DIR / "dddddd.bpf").write_text("lh_htcp\n")
    kernel.append("lh_htcp")
    assert bpf_ccas.leftovers(remove=True) == []
    assert "lh_htcp" in kernel and not (run_marker.STATE_DIR / "cccccc.bpf").exists()


def test_every_bpf_cca_has_a_name_of_its_own(kernel):
    assert all(name.startswith("lh_") and len(name) < 16 for name in bpf_ccas.BPF_CCAS)   # TCP_CA_NAME_MAX
    assert {c.stands_for for c in bpf_ccas.BPF_CCAS.values()} == {"htcp", "scalable", "reno", None}
    assert bpf_ccas.BPF_CCAS["lh_frac10"].object.name == "lh_frac10.bpf.o"
