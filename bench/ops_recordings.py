"""How far one OPS recording carries: the numbers behind docs/ops-results.md ("The shipped datasets and
what they show").

    .venv/bin/python bench/ops_recordings.py datasets/ops-overlay1.csv datasets/ops-overlay1-s4.csv

For 1-NN DTW (warping window 10) and each w: accuracy when trained on one recording and tested on
the other (class, and the Figure 12 decision), stratified shuffled 5-fold CV inside the second
recording against folds of contiguous time blocks (leakage between neighbouring windows would
show as a gap), and a learning curve inside the second recording (the first fraction, in time
order, of each class's training windows in every fold).
"""
from __future__ import annotations

import argparse

import numpy as np
from sklearn.model_selection import StratifiedKFold

from longhaul.collectors.studies.ops import dataset as ds
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.collectors.studies.ops.dtw_knn import DTWKNNClassifier

FOLDS = 5


def one_nn(Xtr, ytr, Xte) -> np.ndarray:
    return DTWKNNClassifier(1).fit(Xtr, ytr).predict(Xte)


def blocked(d: ds.Dataset, probing: str, w: int):
    """Windows, labels and fold numbers: each run's windows cut into FOLDS contiguous blocks."""
    X, y, f = [], [], []
    for run in d.runs:
        if run.probing == probing:
            win = ds.run_windows(run, d.interval_s, w)
            X.append(win)
            y += [run.cls] * len(win)
            f += list((np.arange(len(win)) * FOLDS) // max(len(win), 1))
    return np.vstack(X), np.asarray(y), np.asarray(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--probing", default="passive")
    ap.add_argument("--w", default="5,10,20,30")
    args = ap.parse_args()
    a, b = ds.load(args.first), ds.load(args.second)
    decide = ops_decision.rule_mapping(b.meta["classes"])

    def decision(pred, true) -> float:
        return float(np.mean([decide[p] == decide[t] for p, t in zip(pred, true)]))

    for w in (int(x) for x in args.w.split(",")):
        Xa, ya = ds.build_xy(a, args.probing, w)
        Xb, yb = ds.build_xy(b, args.probing, w)
        pab, pba = one_nn(Xa, ya, Xb), one_nn(Xb, yb, Xa)
        X, y, f = blocked(b, args.probing, w)
        blocks = [np.mean(one_nn(X[f != i], y[f != i], X[f == i]) == y[f == i]) for i in range(FOLDS)]
        skf = StratifiedKFold(FOLDS, shuffle=True, random_state=0)
        shuffled = [np.mean(one_nn(X[tr], y[tr], X[te]) == y[te]) for tr, te in skf.split(X, y)]
        print(f"{args.probing} w={w:2d}: first->second class {np.mean(pab == yb):.2f} decision {decision(pab, yb):.2f}; "
              f"second->first class {np.mean(pba == ya):.2f} decision {decision(pba, ya):.2f}; "
              f"inside second: shuffled folds {np.mean(shuffled):.2f}, time-block folds {np.mean(blocks):.2f}")
        for frac in (0.1, 0.2, 0.35, 0.5, 0.75, 1.0):
            accs, per_class = [], []
            for tr, te in skf.split(X, y):
                keep = np.concatenate([tr[y[tr] == c][: max(1, round(frac * np.sum(y[tr] == c)))] for c in np.unique(y)])
                accs.append(np.mean(one_nn(X[keep], y[keep], X[te]) == y[te]))
                per_class.append(len(keep) / len(np.unique(y)))
            minutes = np.mean(per_class) * w * b.interval_s / 60
            print(f"    learning curve: {minutes:4.1f} min per class -> {np.mean(accs):.2f} ± {np.std(accs):.2f}")


if __name__ == "__main__":
    main()
