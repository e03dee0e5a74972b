"""DTW k-NN: hand-computed distances, C and numpy agree bit for bit, pruning keeps the neighbours."""
from __future__ import annotations

import logging
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from longhaul.collectors.studies.ops import dtw_knn

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def c_lib(tmp_path_factory):
    """The C library: the built one, or built here into a temporary directory when a compiler exists."""
    if dtw_knn.load_library() is not None:
        yield dtw_knn.library_path()
        return
    if not shutil.which("make") or not shutil.which("cc"):
        pytest.skip("DTW C library not built and no compiler to build it")
    out = tmp_path_factory.mktemp("dtwlib")
    subprocess.run(["make", "-s", "-C", str(REPO / "collectors" / "dtw"), f"OUT={out}"], check=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("LONGHAUL_DTW_LIB", str(out / dtw_knn.LIB_NAME))
    assert dtw_knn.load_library() is not None
    yield dtw_knn.library_path()
    mp.undo()


BACKENDS = ["c", "numpy"]


def _rtt_like(rng, n, w, levels=(130, 160, 200)):
    """Windows around a few RTT levels: structured enough for LB_Keogh to prune."""
    base = rng.choice(levels, size=(n, 1)).astype(float)
    return base + np.cumsum(rng.normal(0, 2, (n, w)), axis=1)


# ---- distances ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_hand_computed_3x3(backend, c_lib):
    # point costs (a_i - b_j)^2 = [[1,1,25],[1,1,9],[9,9,1]];
    # cumulative D = [[1,2,27],[2,2,11],[11,11,3]], so DTW = sqrt(3)
    a, b = [0.0, 2.0, 4.0], [1.0, 1.0, 5.0]
    assert dtw_knn.dtw(a, b, window=None, backend=backend) == pytest.approx(math.sqrt(3))
    assert dtw_knn.cdist_dtw(a, b, None, backend)[0, 0] == 3.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_warping_window_matters(backend, c_lib):
    # The 5 in a sits two steps before the 5 in b: a band of 2 lets the path reach it, a band of 1
    # forces the diagonal-ish path that pays 25 twice, a band of 0 is the Euclidean distance.
    a, b = [0.0, 5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0, 0.0]
    assert dtw_knn.dtw(a, b, None, backend) == 0.0
    assert dtw_knn.dtw(a, b, 2, backend) == 0.0
    assert dtw_knn.dtw(a, b, 1, backend) == pytest.approx(math.sqrt(50))
    assert dtw_knn.dtw(a, b, 0, backend) == pytest.approx(math.sqrt(50))


@pytest.mark.parametrize("backend", BACKENDS)
def test_identity_symmetry_and_warp(backend, c_lib):
    a, b = [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]
    assert dtw_knn.dtw(a, a, 10, backend) == 0.0
    assert dtw_knn.dtw(a, b, 10, backend) == 0.0  # a warp absorbs the shift
    assert dtw_knn.dtw(a, b, 0, backend) == 1.0
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(2, 12))
    assert dtw_knn.dtw(x, y, 3, backend) == dtw_knn.dtw(y, x, 3, backend)


@pytest.mark.parametrize("n, window", [(5, 10), (10, 10), (30, 10), (60, 10), (17, 0), (17, 3), (20, None)])
def test_c_and_numpy_give_identical_distances(c_lib, n, window):
    rng = np.random.default_rng(n)
    A, B = _rtt_like(rng, 20, n), _rtt_like(rng, 25, n)
    c = dtw_knn.cdist_dtw(A, B, window, "c")
    py = dtw_knn.cdist_dtw(A, B, window, "numpy")
    assert np.array_equal(c, py)  # bit-identical, not merely close


def test_bad_input():
    with pytest.raises(ValueError, match="lengths differ"):
        dtw_knn.cdist_dtw(np.zeros((2, 5)), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="NaN"):
        dtw_knn.cdist_dtw([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="k must be"):
        dtw_knn.kneighbors(np.zeros((3, 4)), np.zeros((1, 4)), 0)


# ---- neighbours and pruning --------------------------------------------------------------------

@pytest.mark.parametrize("w, k", [(10, 1), (10, 5), (30, 3), (60, 5)])
def test_pruning_keeps_brute_force_neighbours(c_lib, w, k):
    rng = np.random.default_rng(w * 10 + k)
    train, queries = _rtt_like(rng, 300, w), _rtt_like(rng, 40, w)
    train[10:20] = train[0]  # exact duplicates: equal distances must keep training order
    queries[0] = train[0]
    stats = {}
    idx_p, d_p = dtw_knn.kneighbors(train, queries, k, 10, prune=True, backend="c", stats=stats)
    idx_b, d_b = dtw_knn.kneighbors(train, queries, k, 10, prune=False, backend="c")
    idx_n, d_n = dtw_knn.kneighbors(train, queries, k, 10, backend="numpy")
    assert np.array_equal(idx_p, idx_b) and np.array_equal(d_p, d_b)
    assert np.array_equal(idx_p, idx_n) and np.array_equal(d_p, d_n)
    assert stats["lb_pruned"] + stats["abandoned"] > 0  # pruning did something
    assert sum(stats.values()) == len(train) * len(queries)
    if k > 1:
        assert idx_p[0, :2].tolist() == [0, 10]  # duplicates tie at 0: training order


def test_neighbours_sorted_and_distances_true(c_lib):
    rng = np.random.default_rng(11)
    train, queries = _rtt_like(rng, 50, 15), _rtt_like(rng, 5, 15)
    idx, dist = dtw_knn.kneighbors(train, queries, 5, 10)
    full = dtw_knn.cdist_dtw(queries, train, 10, squared=False)
    assert np.all(np.diff(dist, axis=1) >= 0)
    assert np.array_equal(np.take_along_axis(full, idx, axis=1), dist)


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_larger_than_training_set(backend, c_lib):
    idx, dist = dtw_knn.kneighbors(np.array([[1.0, 2.0], [5.0, 5.0]]), np.array([[1.0, 2.0]]), 3, 10,
                                   backend=backend)
    assert idx.tolist() == [[0, 1, -1]] and dist[0, 2] == np.inf


def test_fallback_to_numpy_with_warning(monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("LONGHAUL_DTW_LIB", str(tmp_path / "missing.so"))
    with caplog.at_level(logging.WARNING, logger="longhaul.collectors.studies.ops.dtw_knn"):
        assert dtw_knn.load_library() is None
        d = dtw_knn.dtw([0.0, 2.0, 4.0], [1.0, 1.0, 5.0], None)
    assert d == pytest.approx(math.sqrt(3))
    assert any("numpy DTW" in r.message for r in caplog.records)
    with pytest.raises(RuntimeError):
        dtw_knn.cdist_dtw([1.0], [1.0], backend="c")


# ---- votes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("labels, nearest, lowest", [
    (["a"], "a", "a"),
    (["b", "a", "a"], "a", "a"),                 # plain majority
    (["b", "a"], "b", "a"),                      # 1-1 tie: the nearest neighbour's class
    (["c", "a", "b"], "c", "a"),                 # 1-1-1 tie
    (["b", "a", "a", "b", "c"], "b", "a"),       # 2-2-1 tie between a and b; b is nearest
    (["c", "a", "a", "b", "b"], "a", "a"),       # c is nearest but not among the tied
])
def test_vote(labels, nearest, lowest):
    assert dtw_knn.vote(labels) == nearest
    assert dtw_knn.vote(labels, tie="lowest") == lowest


def test_predict_from_one_neighbour_table():
    idx = np.array([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
    y = np.array(["x", "y", "y", "x", "z"])
    assert dtw_knn.predict_from_neighbours(idx, y, 1).tolist() == ["x", "z"]
    assert dtw_knn.predict_from_neighbours(idx, y, 3).tolist() == ["y", "z"]  # row 2: z,x,y all tie
    assert dtw_knn.predict_from_neighbours(idx, y, 5).tolist() == ["x", "x"]


def test_classifier_separates_levels(c_lib):
    rng = np.random.default_rng(0)
    X = np.vstack([130 + rng.normal(0, 1, (30, 10)), 200 + rng.normal(0, 1, (30, 10))])
    y = np.array(["low"] * 30 + ["high"] * 30)
    clf = dtw_knn.DTWKNNClassifier(k=3).fit(X, y)
    assert clf.predict(np.array([[131.0] * 10, [199.0] * 10])).tolist() == ["low", "high"]
    assert list(clf.classes_) == ["high", "low"]
