"""Fixtures the system tests share: the real SSH hosts lab (tests/support/hosts_lab.py)."""
from __future__ import annotations

import pytest
from hosts_lab import RealLab, skip_reason


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    lab = RealLab(tmp_path_factory.mktemp("hlab"))
    try:
        lab.build()
        yield lab
    finally:
        lab.close()
