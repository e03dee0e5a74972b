"""Benchmark: longhaul's DTW k-NN (C, LB_Keogh + early abandoning) against tslearn's.

Same windows, same folds, same warping window (Sakoe-Chiba radius 10): for w = 10 and 30 and
k = 1 and 3, every fold of a stratified 5-fold split is classified by
  - ours:        collectors.dtw_knn.kneighbors (C library, pruned), one search per k,
  - ours, brute: the same C search with pruning off (what the pruning saves),
  - ours, numpy: the numpy fallback used when the C library is missing,
  - tslearn:     KNeighborsTimeSeriesClassifier(metric="dtw", metric_params={"sakoe_chiba_radius": 10}).
Predictions must be identical to tslearn's, fold by fold, or the benchmark fails. For that
comparison our vote uses tie="lowest" (scikit-learn's rule); the accuracy with longhaul's default
rule (ties to the nearest neighbour's class) is reported beside it.

    .venv/bin/python bench/dtw_knn.py [--dataset CSV] [--minutes 60] [--probing passive]

Without --dataset the windows come from tests/support/ops_synthetic.py (6 classes x --minutes of RTT).
Needs tslearn (`pip install -e '.[bench]'`) and the built C library (`make`). Writes
bench/RESULTS-dtw-knn.md. Single-threaded; takes about a minute on the 2-core VM.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import dtw_knn

OUT = HERE / "RESULTS-dtw-knn.md"
WS, KS, RADIUS, FOLDS, SEED = (10, 30), (1, 3), 10, 5, 0


def _windows(args):
    if args.dataset:
        data = ops_dataset.load(Path(args.dataset))
        name = f"recorded dataset {Path(args.dataset).name}"
    else:
        import tempfile

        import ops_synthetic

        path = ops_synthetic.write(Path(tempfile.mkdtemp(prefix="lh-bench-ops-")) / "synthetic.csv",
                                   minutes=args.minutes, seed=SEED, probings=(args.probing,))
        data = ops_dataset.load(path)
        name = f"synthetic (tests/support/ops_synthetic.py), 6 classes x {args.minutes} min"
    return data, name


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _tslearn(Xtr, ytr, Xte, k):
    from tslearn.neighbors import KNeighborsTimeSeriesClassifier

    clf = KNeighborsTimeSeriesClassifier(n_neighbors=k, metric="dtw", metric_params={"sakoe_chiba_radius": RADIUS})
    return clf.fit(Xtr[:, :, None], ytr).predict(Xte[:, :, None])


def _ours(Xtr, ytr, Xte, k, tie, backend="c", prune=True, stats=None):
    idx, _ = dtw_knn.kneighbors(Xtr, Xte, k, RADIUS, prune=prune, backend=backend, stats=stats)
    return dtw_knn.predict_from_neighbours(idx, ytr, k, tie)


def run_case(X, y, w, k, folds) -> dict:
    row = {"w": w, "k": k, "windows": len(y), "wall": {}, "cpu": {}, "acc": {}, "stats": {}}
    keys = ("ours", "brute", "numpy", "tslearn")
    for key in keys:
        row["wall"][key] = row["cpu"][key] = 0.0
    correct = {"tslearn": 0, "ours_lowest": 0, "ours_nearest": 0}
    for train, test in folds:
        Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
        stats: dict = {}
        runs = {"ours": lambda: _ours(Xtr, ytr, Xte, k, "lowest", stats=stats),
                "brute": lambda: _ours(Xtr, ytr, Xte, k, "lowest", prune=False),
                "numpy": lambda: _ours(Xtr, ytr, Xte, k, "lowest", backend="numpy"),
                "tslearn": lambda: _tslearn(Xtr, ytr, Xte, k)}
        preds = {}
        for key in keys:
            preds[key], wall, cpu = _timed(runs[key])
            row["wall"][key] += wall
            row["cpu"][key] += cpu
        for key in ("ours", "brute", "numpy"):
            if not np.array_equal(preds[key], preds["tslearn"]):
                bad = np.flatnonzero(preds[key] != preds["tslearn"])
                raise SystemExit(f"w={w} k={k}: {key} differs from tslearn on {len(bad)} windows, e.g. {bad[:5]}")
        for name, value in stats.items():
            row["stats"][name] = row["stats"].get(name, 0) + value
        correct["tslearn"] += int(np.sum(preds["tslearn"] == yte))
        correct["ours_lowest"] += int(np.sum(preds["ours"] == yte))
        correct["ours_nearest"] += int(np.sum(_ours(Xtr, ytr, Xte, k, "nearest") == yte))
    row["acc"] = {key: value / len(y) for key, value in correct.items()}
    return row


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _versions() -> str:
    import sklearn
    import tslearn

    return f"Python {platform.python_version()}, numpy {np.__version__}, scikit-learn {sklearn.__version__}, " \
           f"tslearn {tslearn.__version__}"


def write_results(rows: list[dict], source: str, probing: str, load: tuple) -> str:
    lines = [
        "# DTW k-NN benchmark: longhaul vs tslearn", "",
        f"Written by `bench/dtw_knn.py` on {time.strftime('%Y-%m-%d', time.gmtime())}: {platform.node()}, "
        f"{_cpu_model()}, {os.cpu_count()} cores (shared with a running lab experiment; load average "
        f"{load[0]:.2f} at the start), kernel {platform.release()}; {_versions()}.", "",
        f"Windows: {source}, {probing} probing. Stratified {FOLDS}-fold split (shuffled, random_state {SEED}), "
        f"the same folds for every implementation; Sakoe-Chiba radius {RADIUS}. Times are summed over the "
        "folds (fit + predict of every test window); CPU = process CPU seconds, which the other load on "
        "this machine disturbs less than wall time.", "",
        "| w | k | windows | longhaul C (pruned) | C brute force | numpy fallback | tslearn | "
        "**tslearn / longhaul** (wall, CPU) | accuracy: tslearn = ours (tie lowest) | ours, ties to nearest | "
        "pairs pruned by LB_Keogh / abandoned / computed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wall, cpu, st = r["wall"], r["cpu"], r["stats"]
        total = sum(st.values()) or 1
        lines.append(
            f"| {r['w']} | {r['k']} | {r['windows']} | {wall['ours']:.3f} s | {wall['brute']:.3f} s | "
            f"{wall['numpy']:.2f} s | {wall['tslearn']:.2f} s | **{wall['tslearn'] / wall['ours']:.0f}x**, "
            f"{cpu['tslearn'] / max(cpu['ours'], 1e-9):.0f}x | {r['acc']['tslearn']:.4f} = {r['acc']['ours_lowest']:.4f} | "
            f"{r['acc']['ours_nearest']:.4f} | {100 * st.get('lb_pruned', 0) / total:.0f} % / "
            f"{100 * st.get('abandoned', 0) / total:.0f} % / {100 * st.get('computed', 0) / total:.0f} % |")
    lines += [
        "", "Predictions were identical to tslearn's for every test window of every fold (the benchmark exits "
        "with an error otherwise), for the pruned C search, the C brute force and the numpy fallback alike. "
        "tslearn computes the full test x train DTW matrix, one pair at a time from Python through "
        "joblib and a numba kernel; longhaul runs the whole search in C and skips the pairs whose lower "
        "bound already exceeds the current k-th best.", "",
        "Raw: ```" + json.dumps(rows) + "```", ""]
    OUT.write_text("\n".join(lines))
    return OUT.read_text()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", help="a recorded dataset CSV instead of synthetic windows")
    parser.add_argument("--minutes", type=int, default=60, help="synthetic minutes per class")
    parser.add_argument("--probing", default="passive", choices=ops_dataset.PROBING)
    args = parser.parse_args(argv)
    if dtw_knn.load_library() is None:
        raise SystemExit("build the C library first: make -C collectors/studies/ops/dtw OUT=$PWD/build/lib")
    from sklearn.model_selection import StratifiedKFold

    load = os.getloadavg()
    data, source = _windows(args)
    rng = np.random.default_rng(SEED)
    _tslearn(rng.normal(size=(6, 10)), np.array(list("aabbcc")), rng.normal(size=(2, 10)), 1)  # numba JIT warm-up
    rows = []
    for w in WS:
        X, y = ops_dataset.build_xy(data, args.probing, w)
        folds = list(StratifiedKFold(FOLDS, shuffle=True, random_state=SEED).split(X, y))
        for k in KS:
            rows.append(run_case(X, y, w, k, folds))
            print(f"w={w} k={k}: ours {rows[-1]['wall']['ours']:.3f} s, tslearn {rows[-1]['wall']['tslearn']:.2f} s",
                  file=sys.stderr)
    print(write_results(rows, source, args.probing, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
