"""tuning.cca_fallback: a cca the lab lacks runs as longhaul's BPF version of it where the profile
allows it (appliance/run/preflight.py: with_fallbacks), and is refused where it does not."""
from __future__ import annotations

import pytest

from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.preflight import check_ccas, needs_of, with_fallbacks
from longhaul.collectors.store.format import CCA_STAND_INS
from longhaul.core.errors import ConfigError
from longhaul.hardware import bpf_ccas

PROFILE = """
[profile]
description = "CUBIC and H-TCP, one flow each, and a Scalable TCP flow beside"
repeats = 1

[topology]
bottleneck_rate_mbps = 20
rtt_ms = 20

[tuning]
cca = ["cubic", "htcp"]
{fallback}

[[flows]]
name = "fg"
role = "foreground"
duration_s = 5

[[flows]]
name = "scal"
role = "background"
cca = "scalable"
duration_s = 5
"""
THIS_KERNEL = ("reno", "cubic", "bbr")


def _config(tmp_path, fallback: str):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "fb.toml").write_text(PROFILE.format(fallback=fallback))
    (tmp_path / "config.toml").write_text('[run]\nprofiles = ["fb"]\nprofile_dir = "profiles"\n[store]\ndir = "runs"\n')
    return load_config(tmp_path / "config.toml")


def test_what_the_kernel_lacks_runs_as_its_bpf_version_and_the_cell_says_so(tmp_path):
    config = _config(tmp_path, 'cca_fallback = "bpf"')
    assert needs_of(config).bpf_fallback == ("scalable", "htcp")      # cubic has no stand-in: it needs none
    resolved = with_fallbacks(config, THIS_KERNEL + ("lh_htcp", "lh_scalable"))
    cubic, htcp = resolved.profiles[0].cells
    assert cubic.cell.tuning.cca == "cubic" and cubic.labels[CCA_STAND_INS] == {"scalable": "lh_scalable"}
    assert htcp.cell.tuning.cca == "lh_htcp" and htcp.labels[CCA_STAND_INS] == {"htcp": "lh_htcp", "scalable": "lh_scalable"}
    assert [htcp.cell.flow_cca(f) for f in htcp.cell.flows] == ["lh_htcp", "lh_scalable"]
    assert htcp.params == config.profiles[0].cells[1].params          # the sweep still says what was asked
    check_ccas(resolved, THIS_KERNEL + ("lh_htcp", "lh_scalable"))   # nothing left to refuse
    # a kernel with H-TCP runs its own; a lab that checks its hosts itself (None) is left alone
    own = with_fallbacks(config, THIS_KERNEL + ("htcp", "lh_htcp", "lh_scalable")).profiles[0].cells[1]
    assert own.cell.tuning.cca == "htcp" and own.labels[CCA_STAND_INS] == {"scalable": "lh_scalable"}
    assert with_fallbacks(config, None) is config


def test_without_the_fallback_or_the_bpf_version_the_cell_is_refused_saying_why(tmp_path):
    config = _config(tmp_path, "")
    assert needs_of(config).bpf_fallback == ()
    assert with_fallbacks(config, THIS_KERNEL + ("lh_htcp", "lh_scalable")).profiles == config.profiles
    with pytest.raises(ConfigError, match="cca_fallback = .bpf. runs longhaul's lh_scalable instead"):
        check_ccas(config, THIS_KERNEL + ("lh_htcp", "lh_scalable"))
    (tmp_path / "b").mkdir()
    allowed = _config(tmp_path / "b", 'cca_fallback = "bpf"')
    with pytest.raises(ConfigError, match="scalable"):            # allowed, but this lab cannot register it
        check_ccas(with_fallbacks(allowed, THIS_KERNEL), THIS_KERNEL)


def test_stand_ins_are_the_kernel_s_algorithms_only():
    assert (bpf_ccas.stand_in("htcp"), bpf_ccas.stand_in("scalable")) == ("lh_htcp", "lh_scalable")
    assert bpf_ccas.stand_in("reno") is None and bpf_ccas.stand_in("cubic") is None
