"""The section-7 BE cap (appliance/plan/caps.py)."""

from __future__ import annotations

import pytest

from longhaul.drivers.agents.htb_caps import CapController, CapPolicy, be_cap

C = 100e6
POLICY = CapPolicy(C, od_share=0.4, headroom=0.05)


def test_no_od_no_cap():
    assert be_cap(POLICY, od_active=False, od_arrived=False, od_rate_bps=30e6) is None


def test_a_new_od_transfer_resets_the_cap_to_netcap_be():
    assert be_cap(POLICY, od_active=True, od_arrived=True, od_rate_bps=5e6) == pytest.approx(60e6)
    assert be_cap(POLICY, od_active=True, od_arrived=False, od_rate_bps=None) == pytest.approx(60e6)


def test_unused_od_bandwidth_goes_to_be_less_the_headroom():
    # OD uses 10 of its 40: BE may have 100 - 10 - 5
    assert be_cap(POLICY, od_active=True, od_arrived=False, od_rate_bps=10e6) == pytest.approx(85e6)
    # OD uses all of its share or more: BE keeps its 60
    assert be_cap(POLICY, od_active=True, od_arrived=False, od_rate_bps=40e6) == pytest.approx(60e6)
    assert be_cap(POLICY, od_active=True, od_arrived=False, od_rate_bps=90e6) == pytest.approx(60e6)
    # an idle OD transfer: all but the headroom
    assert be_cap(POLICY, od_active=True, od_arrived=False, od_rate_bps=0.0) == pytest.approx(95e6)


def test_extreme_shares():
    all_od = CapPolicy(C, od_share=1.0, headroom=0.0)
    assert be_cap(all_od, od_active=True, od_arrived=True, od_rate_bps=None) == 0.0
    assert be_cap(all_od, od_active=True, od_arrived=False, od_rate_bps=30e6) == pytest.approx(70e6)
    no_od = CapPolicy(C, od_share=0.0)
    assert be_cap(no_od, od_active=True, od_arrived=True, od_rate_bps=None) == C
    with pytest.raises(ValueError):
        CapPolicy(C, od_share=1.5)
    with pytest.raises(ValueError):
        CapPolicy(0, od_share=0.5)


def test_controller_measures_the_od_rate_from_its_counter():
    ctl = CapController(POLICY)
    assert ctl.step(0.0, 0, od_active=False) is None
    assert ctl.arrived() == pytest.approx(60e6)              # at once, between steps
    assert ctl.step(1.0, 0, od_active=True) == pytest.approx(60e6)   # held one interval: not measured yet
    # the OD class moved 1.25 MB in the next second: 10 Mb/s
    assert ctl.step(2.0, 1_250_000, od_active=True) == pytest.approx(85e6)
    assert ctl.od_rate_bps == pytest.approx(10e6)
    ctl.arrived()
    assert ctl.step(3.0, 2_500_000, od_active=True) == pytest.approx(60e6)
    assert ctl.step(4.0, 2_500_000, od_active=False) is None
