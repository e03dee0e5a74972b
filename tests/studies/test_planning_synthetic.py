"""The synthetic trace (collectors/studies/planning/synthetic.py) against the paper's numbers for its
four GridFTP traces (section 5.2, Figure 2, section 5.5), and its binning helpers against a slow,
obvious version."""
from __future__ import annotations

import numpy as np
import pytest

from longhaul.collectors.studies.planning import metrics, synthetic
from longhaul.collectors.studies.planning.trace import Trace, Transfer


def test_same_seed_same_trace_other_seed_other_trace():
    a, b = synthetic.generate(7), synthetic.generate(7)
    assert a.transfers == b.transfers and a.generator == b.generator
    assert synthetic.generate(8).transfers != a.transfers
    assert a.generator["seed"] == 7 and a.generator["peak_gbps"] == 10.0 and a.generator["mean_fraction"] == 0.15
    assert a.name == "synthetic-7" and a.origin is None and a.problems == []


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_day_has_the_papers_shape(seed):
    trace = synthetic.generate(seed)
    s = synthetic.stats(trace)
    assert s["peak_gbps"] == pytest.approx(10.0, rel=0.01)
    assert 0.10 <= s["mean_fraction"] <= 0.25 and s["mean_fraction"] == pytest.approx(0.15, abs=0.02)
    assert 4 <= s["peak_gbps"] / s["mean_gbps"] <= 10                       # "several times"
    assert 0.6 <= s["cov_throughput"] <= 1.3 and 0.6 <= s["cov_concurrency"] <= 1.3
    assert 10_000 <= s["transfers"] <= 40_000
    assert 23.5 * 3600 <= trace.span_s() <= 30 * 3600
    start, seconds, nbytes = trace.arrays()
    assert start.min() >= 0 and start.max() < 24 * 3600 and nbytes.min() >= 1
    rates = nbytes * 8 / seconds / 1e9
    assert rates.max() <= 0.25 * 10.0 * 1.001                               # well below the peak
    assert np.median(nbytes) < nbytes.mean() / 2                             # heavy-tailed sizes


@pytest.mark.parametrize(("peak", "fraction"), [(5.7, 0.25), (16.0, 0.10), (11.2, 0.22)])
def test_peak_and_mean_follow_the_arguments(peak, fraction):
    s = synthetic.stats(synthetic.generate(3, peak_gbps=peak, mean_fraction=fraction))
    assert s["peak_gbps"] == pytest.approx(peak, rel=0.01)
    assert s["mean_fraction"] == pytest.approx(fraction, abs=0.03)


def test_busier_in_the_afternoon_and_shorter_periods():
    start, _, _ = synthetic.generate(5, diurnal=0.8).arrays()
    hours = np.bincount((start // 3600).astype(int), minlength=24)
    assert hours[12:18].sum() > 2 * hours[0:6].sum()
    short = synthetic.generate(5, hours=2)
    assert short.generator["hours"] == 2 and 500 < len(short.transfers) < 5000
    assert max(t.start_s for t in short.transfers) < 2 * 3600


def test_rejects_impossible_arguments():
    for kw in ({"mean_fraction": 1.2}, {"mean_fraction": 0}, {"hours": 0}, {"rate_cap": 2}):
        with pytest.raises(ValueError):
            synthetic.generate(**kw)


def _slow_bins(trace: Trace, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    n = int(np.ceil(trace.span_s() / bin_s))
    gbytes, active = np.zeros(n), np.zeros(n)
    for t in trace.transfers:
        end = t.start_s + t.seconds
        for b in range(n):
            lo, hi = b * bin_s, (b + 1) * bin_s
            overlap = max(0.0, min(hi, end) - max(lo, t.start_s))
            gbytes[b] += t.nbytes * overlap / t.seconds
            active[b] += lo <= end and t.start_s < hi and overlap > 0
    return gbytes, active


def test_spread_and_concurrency_match_the_obvious_version():
    rng = np.random.default_rng(1)
    trace = Trace([Transfer(float(s), float(d), int(b)) for s, d, b in
                   zip(rng.uniform(0, 900, 60), rng.uniform(0.5, 400, 60), rng.integers(1, 10**10, 60))])
    start, seconds, nbytes = trace.arrays()
    slow_bytes, slow_active = _slow_bins(trace, 60.0)
    binned = metrics.spread(start, start + seconds, nbytes, 60.0)
    assert binned == pytest.approx(slow_bytes, rel=1e-9, abs=1e-3)
    assert metrics.concurrency(start, start + seconds, 60.0) == pytest.approx(slow_active)
    assert binned.sum() == pytest.approx(nbytes.sum(), rel=1e-12)
