"""The section-6 derivation of a testbed trace (collectors/studies/planning/compress.py)."""

from __future__ import annotations

import numpy as np
import pytest

from longhaul.collectors.studies.planning.compress import (
    COMPRESSION,
    compress,
    peak_demand_bps,
    rate_factor_for,
    thin,
)
from longhaul.collectors.studies.planning.trace import Trace, TraceError, Transfer


def day_trace(n: int = 120) -> Trace:
    """n transfers spread over 24 h, each 10-100 s at 1-10 Gb/s."""
    rng = np.random.default_rng(7)
    starts = np.sort(rng.uniform(0, 86_000, n))
    return Trace([Transfer(float(s), float(rng.uniform(10, 100)), int(rng.uniform(1e9, 1e10) / 8 * 50),
                           where=f"log:{i}") for i, s in enumerate(starts)], name="day")


def test_thin_takes_one_of_each_chunk_including_the_partial_last():
    idx = thin(30, 12, np.random.default_rng(0))
    assert len(idx) == 3
    assert 0 <= idx[0] < 12 <= idx[1] < 24 <= idx[2] < 30
    assert list(thin(5, 1, np.random.default_rng(0))) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        thin(5, 0, np.random.default_rng(0))


def test_the_papers_derivation_keeps_durations_and_scales_bytes():
    trace = day_trace()
    out = compress(trace, keep_one_in=12, span_s=7200, period_s=86_400, rate_factor=0.1, seed=3)
    assert len(out.transfers) == 10
    by_where = {t.where: t for t in trace.transfers}
    for t in out.transfers:
        original = by_where[t.where]
        assert t.start_s == pytest.approx(original.start_s / 12)       # 24 h -> 2 h
        assert t.seconds == original.seconds                             # duration kept
        assert t.rate_bps == pytest.approx(original.rate_bps * 0.1, rel=1e-6)
        assert t.nbytes == round(original.nbytes * 0.1)                 # so the bytes scale
    assert out.generator["kind"] == COMPRESSION
    assert out.generator == {**out.generator, "keep_one_in": 12, "time_factor": pytest.approx(1 / 12),
                             "rate_factor": 0.1, "seed": 3, "transfers_in": 120, "transfers_out": 10}
    assert out.generator["from"]["name"] == "day"


def test_same_seed_same_trace_and_another_seed_another():
    trace = day_trace()
    a = compress(trace, span_s=7200, seed=5)
    b = compress(trace, span_s=7200, seed=5)
    c = compress(trace, span_s=7200, seed=6)
    assert [t.where for t in a.transfers] == [t.where for t in b.transfers]
    assert [t.where for t in a.transfers] != [t.where for t in c.transfers]


def test_default_period_is_the_traces_span_and_no_span_keeps_times():
    trace = day_trace(24)
    out = compress(trace, keep_one_in=1, span_s=trace.span_s() / 2)
    assert [t.start_s for t in out.transfers] == pytest.approx([t.start_s / 2 for t in trace.transfers])
    same = compress(trace, keep_one_in=1)
    assert [t.start_s for t in same.transfers] == [t.start_s for t in trace.transfers]
    assert [t.nbytes for t in same.transfers] == [t.nbytes for t in trace.transfers]


def test_rate_factor_for_fills_the_lab_with_the_peak():
    # two overlapping 10 s transfers of 4 and 6 Mb/s, then one alone: peak 10 Mb/s
    trace = Trace([Transfer(0, 10, 5_000_000), Transfer(0, 10, 7_500_000), Transfer(20, 10, 2_500_000)])
    assert peak_demand_bps(trace) == pytest.approx(10e6)
    factor = rate_factor_for(trace, 50e6)
    assert factor == pytest.approx(5.0)
    scaled = compress(trace, keep_one_in=1, rate_factor=factor)
    assert peak_demand_bps(scaled) == pytest.approx(50e6)


def test_refusals():
    with pytest.raises(TraceError):
        compress(Trace([]))
    with pytest.raises(ValueError):
        compress(day_trace(), rate_factor=0)
    with pytest.raises(TraceError):
        rate_factor_for(Trace([]), 1e9)
