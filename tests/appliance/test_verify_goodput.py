"""The verification's goodput beside the shaper's rate: the receivers' kernel bytes between two
reads, over the sockets open at both."""
from __future__ import annotations

import pytest

from longhaul.appliance.run.verify import _goodput


def test_a_stream_gone_by_the_second_read_is_not_counted_as_lost():
    # seen on a TCG VM (CI, 27 Nov): the sum over the sockets ss listed fell between the reads, -17.6 Mb/s
    a, b = ("10.2.1.2", 5299, "10.1.1.2", 40000), ("10.2.1.2", 5300, "10.1.1.2", 40001)
    first = (10.0, {a: 1_000_000, b: 2_000_000})
    last = (15.0, {a: 4_125_000})                     # b closed; a received 3.125 MB in 5 s
    assert _goodput([first, last]) == pytest.approx(5.0)
    assert _goodput([first, (15.0, {})]) is None      # nothing open at both reads
    assert _goodput([first]) is None
