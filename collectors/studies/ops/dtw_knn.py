"""k-nearest-neighbour classification of RTT windows under dynamic time warping (seed 000, §5.4).

The distance is tslearn's `dtw`: square root of the sum of squared differences along the best
warping path inside a Sakoe-Chiba band |i - j| <= window (the paper's warping window is 10).

The work is done by a small C library (collectors/studies/ops/dtw/dtw.c, built into
build/lib/liblonghaul_dtw.so by `make`) that searches neighbours with LB_Keogh pruning and early
abandoning; both only skip candidates that provably cannot enter the k best, so neighbours equal
brute force. When the library is missing a numpy implementation of the same recurrence is used
(bit-identical sums, much slower) and a warning says so.

Voting: majority of the k neighbours' classes; a tie between classes goes to the tied class of
the nearest neighbour (tie="nearest", the default). tie="lowest" picks the first tied class in
sorted order instead, which is what scikit-learn's and so tslearn's KNeighborsClassifier do; the
benchmark uses it to compare predictions one for one.
"""
from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

import numpy as np

from longhaul.core.paths import BUILD_LIB

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 10
LIB_NAME = "liblonghaul_dtw.so"
TIES = ("nearest", "lowest")
_CHUNK_CELLS = 4_000_000  # numpy fallback: doubles per DP row buffer, bounds its memory
_lib_cache: dict[str, object] = {}


def library_path() -> Path:
    """Where the C library is: $LONGHAUL_DTW_LIB or <repo>/build/lib."""
    env = os.environ.get("LONGHAUL_DTW_LIB")
    if env:
        return Path(env)
    return BUILD_LIB / LIB_NAME


def load_library():
    """The ctypes handle of the C library, or None (warned once) when it cannot be loaded."""
    path = str(library_path())
    if path in _lib_cache:
        return _lib_cache[path]
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        log.warning("DTW library %s not loadable (%s); using the slower numpy DTW. "
                    "Build it with `make -C collectors/studies/ops/dtw`.", path, exc)
        lib = None
    if lib is not None:
        _declare(lib)
    _lib_cache[path] = lib
    return lib


def _declare(lib) -> None:
    dbl_p = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    long_p = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
    c_long, c_int = ctypes.c_long, ctypes.c_int
    lib.lh_dtw_sq.argtypes = [dbl_p, dbl_p, c_int, c_int]
    lib.lh_dtw_sq.restype = ctypes.c_double
    lib.lh_dtw_cdist_sq.argtypes = [dbl_p, c_long, dbl_p, c_long, c_int, c_int, dbl_p]
    lib.lh_dtw_cdist_sq.restype = c_int
    lib.lh_dtw_knn.argtypes = [dbl_p, c_long, dbl_p, c_long, c_int, c_int, c_int, c_int,
                               long_p, dbl_p, long_p]
    lib.lh_dtw_knn.restype = c_int


def _backend(backend: str | None):
    """("c", lib) or ("numpy", None); backend=None picks C when it loads."""
    if backend not in (None, "c", "numpy"):
        raise ValueError(f"backend {backend!r}: use 'c', 'numpy' or None")
    if backend == "numpy":
        return "numpy", None
    lib = load_library()
    if lib is None and backend == "c":
        raise RuntimeError(f"the DTW C library is not available at {library_path()}")
    return ("c", lib) if lib is not None else ("numpy", None)


def _as_windows(x, name: str) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(x, dtype=np.float64))
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"{name}: expected a (n, length) array of series, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: series contain NaN or infinite values")
    return arr


# ---- distances ---------------------------------------------------------------------------------

def dtw(a, b, window: int | None = DEFAULT_WINDOW, backend: str | None = None) -> float:
    """DTW distance of two equal-length series; window=None means no band."""
    return float(np.sqrt(cdist_dtw(a, b, window, backend)[0, 0]))


def cdist_dtw(a, b, window: int | None = DEFAULT_WINDOW, backend: str | None = None,
              squared: bool = True) -> np.ndarray:
    """DTW between every series of a and every series of b (equal lengths): squared by default."""
    A, B = _as_windows(a, "a"), _as_windows(b, "b")
    _same_length(A, B)
    win = -1 if window is None else int(window)
    kind, lib = _backend(backend)
    if kind == "c":
        out = np.empty((A.shape[0], B.shape[0]), dtype=np.float64)
        if lib.lh_dtw_cdist_sq(A, A.shape[0], B, B.shape[0], A.shape[1], win, out) != 0:
            raise MemoryError("lh_dtw_cdist_sq failed")
    else:
        out = _numpy_cdist_sq(A, B, win)
    return out if squared else np.sqrt(out)


def _same_length(A: np.ndarray, B: np.ndarray) -> None:
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"series lengths differ: {A.shape[1]} and {B.shape[1]}")


def _numpy_cdist_sq(A: np.ndarray, B: np.ndarray, window: int) -> np.ndarray:
    """The C recurrence, vectorised over pairs: same operations in the same order, same sums."""
    out = np.empty((A.shape[0], B.shape[0]), dtype=np.float64)
    step = max(1, _CHUNK_CELLS // max(1, B.shape[0] * (A.shape[1] + 1)))
    for start in range(0, A.shape[0], step):
        out[start:start + step] = _numpy_block(A[start:start + step], B, window)
    return out


def _numpy_block(A: np.ndarray, B: np.ndarray, window: int) -> np.ndarray:
    n = A.shape[1]
    r = n if window < 0 or window > n else window
    shape = (n + 1, A.shape[0], B.shape[0])
    prev, cur = np.full(shape, np.inf), np.full(shape, np.inf)
    prev[0] = 0.0
    for i in range(1, n + 1):
        lo, hi = max(1, i - r), min(n, i + r)
        cur[lo - 1] = np.inf  # band edges as in dtw.c; cells beyond them are never read
        for j in range(lo, hi + 1):
            d = A[:, i - 1, None] - B[None, :, j - 1]
            best = np.minimum(np.minimum(prev[j - 1], prev[j]), cur[j - 1])
            cur[j] = d * d + best
        if hi < n:
            cur[hi + 1] = np.inf
        prev, cur = cur, prev
    return prev[n].copy()


# ---- neighbours --------------------------------------------------------------------------------

def kneighbors(train, queries, k: int, window: int | None = DEFAULT_WINDOW, prune: bool = True,
               backend: str | None = None, stats: dict | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Indices (n_query, k) of the k nearest training series and their DTW distances.

    Nearest first; equal distances keep training order. `stats`, when given, receives the C
    search's counts: pruned by LB_Keogh, abandoned early, computed in full.
    """
    T, Q = _as_windows(train, "train"), _as_windows(queries, "queries")
    _same_length(T, Q)
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = int(k)
    win = -1 if window is None else int(window)
    kind, lib = _backend(backend)
    if kind == "numpy":
        idx, d2 = _numpy_kneighbors(T, Q, k, win)
    else:
        idx = np.empty((Q.shape[0], k), dtype=np.int64)
        d2 = np.empty((Q.shape[0], k), dtype=np.float64)
        counters = np.zeros(3, dtype=np.int64)
        rc = lib.lh_dtw_knn(T, T.shape[0], Q, Q.shape[0], T.shape[1], win, k, int(bool(prune)),
                            idx, d2, counters)
        if rc != 0:
            raise MemoryError("lh_dtw_knn failed")
        if stats is not None:
            stats.update(lb_pruned=int(counters[0]), abandoned=int(counters[1]),
                         computed=int(counters[2]))
    return idx, np.sqrt(d2)


def _numpy_kneighbors(T: np.ndarray, Q: np.ndarray, k: int, window: int):
    d2 = _numpy_cdist_sq(Q, T, window)
    order = np.argsort(d2, axis=1, kind="stable")[:, :k]  # stable: ties keep training order
    dist = np.take_along_axis(d2, order, axis=1)
    if k > T.shape[0]:  # same padding as the C search
        pad = k - T.shape[0]
        order = np.hstack([order, np.full((Q.shape[0], pad), -1)])
        dist = np.hstack([dist, np.full((Q.shape[0], pad), np.inf)])
    return order.astype(np.int64), dist


def vote(neighbour_labels, tie: str = "nearest"):
    """Majority class of one query's neighbour labels (nearest first), ties as the module says."""
    labels = list(neighbour_labels)
    if not labels:
        raise ValueError("no neighbours to vote with")
    if tie not in TIES:
        raise ValueError(f"tie {tie!r}: use one of {TIES}")
    counts: dict = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    top = max(counts.values())
    tied = [c for c in counts if counts[c] == top]  # dict order = order of first (nearest) appearance
    return tied[0] if tie == "nearest" else sorted(tied)[0]


class DTWKNNClassifier:
    """k-NN over DTW with a Sakoe-Chiba band; fit/predict like a scikit-learn classifier."""

    def __init__(self, k: int = 1, window: int | None = DEFAULT_WINDOW, prune: bool = True,
                 tie: str = "nearest", backend: str | None = None):
        if tie not in TIES:
            raise ValueError(f"tie {tie!r}: use one of {TIES}")
        self.k, self.window, self.prune, self.tie, self.backend = int(k), window, prune, tie, backend

    def fit(self, X, y) -> "DTWKNNClassifier":
        self.X_ = _as_windows(X, "X")
        self.y_ = np.asarray(y)
        if self.y_.shape != (self.X_.shape[0],):
            raise ValueError(f"y has shape {self.y_.shape}, expected ({self.X_.shape[0]},)")
        self.classes_ = np.unique(self.y_)
        return self

    def kneighbors(self, X, k: int | None = None, stats: dict | None = None):
        return kneighbors(self.X_, X, k or self.k, self.window, self.prune, self.backend, stats)

    def predict(self, X) -> np.ndarray:
        idx, _ = self.kneighbors(X)
        return predict_from_neighbours(idx, self.y_, self.k, self.tie)


def predict_from_neighbours(idx: np.ndarray, labels: np.ndarray, k: int,
                            tie: str = "nearest") -> np.ndarray:
    """Votes of the first k columns of a neighbour table: one search at k=5 serves k = 1, 3, 5."""
    if idx.shape[1] < k:
        raise ValueError(f"neighbour table has {idx.shape[1]} columns, need {k}")
    labels = np.asarray(labels)
    out = [vote(labels[row[:k][row[:k] >= 0]], tie) for row in idx]
    return np.asarray(out, dtype=labels.dtype)
