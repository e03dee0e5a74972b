"""Background-recognition classifiers and their cross-validated evaluation (seed 000 §5.4, §6.6).

Classifiers, as in the paper: k-NN with DTW (warping window 10; k = 1, 3, 5), an MLP with two
hidden layers of 64 ReLU units (scikit-learn's MLPClassifier; its multiclass output layer is a
softmax), an RBF SVM and Gaussian naive Bayes, all otherwise at scikit-learn's defaults.

Normalisation (the paper does not say; this is our choice, recorded in every evaluation):
  - k-NN/DTW: none. The RTT level in ms is itself the signal (how full the queue is tells one
    stream from two and CUBIC from BBR); DTW on raw values is also what tslearn computes, so the
    benchmark compares like with like.
  - MLP and SVM: StandardScaler per time step inside a pipeline, fitted on the training folds
    only. Both are scale-sensitive (Adam's step size, the RBF kernel's gamma) and raw RTTs sit
    around 130-230 ms; per-feature scaling keeps the level differences between windows, unlike
    per-window z-normalisation which would erase them.
  - Gaussian NB: none; it models each feature's own mean and variance, so scaling changes nothing.
Evaluation: StratifiedKFold(folds, shuffle=True, random_state) over the windows of one probing
mode and w; per fold the accuracy of each classifier; confusion matrices and per-class
precision/recall/F1 from the out-of-fold predictions of all folds together.
Held-out evaluation (`test=`): trained on every window of one recording, tested on every window
of another made under the same conditions. Cross-validation inside one recording cannot see how
much a class's signature moves between recordings (docs/ops.md); this can. It is one "fold".
Both ways (`both=True`): then also trained on the other recording and tested on the first, the
two directions' predictions pooled, so that every window of both is tested by a model that never saw
its recording, and the standard error rests on all of them. The accuracy is the pooled one (the
directions weighted by their windows); the two directions are the "folds".
"""
from __future__ import annotations

import datetime as dt
import hashlib
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.collectors.studies.ops import dtw_knn
from longhaul.core.documents import DocumentFormat

CLASSIFIERS = ("knn", "mlp", "svm", "gnb")
# settings["mode"]: how an evaluation tested its windows (the report words its figures by it)
CROSS_VALIDATION, HELD_OUT, BOTH_WAYS = "cross-validation", "held-out", "held-out both ways"
DEFAULT_KS = (1, 3, 5)
DEFAULT_WS = tuple(range(5, 61, 5))
DTW_WINDOW = 10
RANDOM_STATE = 0
DETAIL_WS = (10,)
EVALUATION = DocumentFormat("longhaul-ops-evaluation", 1, "an OPS evaluation")
EVALUATION_FILE = Path("ops") / "evaluation.json"      # in a run directory (`ops evaluate --out RUN_DIR`)
NORMALISATION = {
    "knn": "none: DTW on raw RTT in ms",
    "mlp": "StandardScaler per time step (fitted on the training folds) in a pipeline",
    "svm": "StandardScaler per time step (fitted on the training folds) in a pipeline",
    "gnb": "none: Gaussian NB is invariant to per-feature scaling",
}
LABELS = {"mlp": "MLP", "svm": "SVM (RBF)", "gnb": "GNB"}


def standard_error(accuracy: float, n_windows: int) -> float:
    """The binomial standard error of an accuracy over the windows tested, sqrt(p (1 - p) / n).

    Every window is tested once, in a cross-validation's folds as in a held-out test. Neighbouring
    windows of one run are not independent, so this is a lower bound; nan without windows.
    """
    return float(np.sqrt(accuracy * (1 - accuracy) / n_windows)) if n_windows else float("nan")


@dataclass(frozen=True)
class Spec:
    """One classifier configuration: name and, for k-NN, k."""

    classifier: str
    k: int | None = None

    @property
    def label(self) -> str:
        return f"{self.k}-NN (DTW)" if self.classifier == "knn" else LABELS[self.classifier]


def specs(classifiers: Iterable[str] = CLASSIFIERS, ks: Iterable[int] = DEFAULT_KS) -> list[Spec]:
    out = []
    for name in classifiers:
        if name not in CLASSIFIERS:
            raise ValueError(f"classifier {name!r}: one of {CLASSIFIERS}")
        if name == "knn":
            out.extend(Spec("knn", int(k)) for k in ks)
        else:
            out.append(Spec(name))
    return out


def make_estimator(name: str, random_state: int = RANDOM_STATE, k: int = 1):
    """A fresh, unfitted classifier with the settings the module docstring states."""
    if name == "knn":
        return dtw_knn.DTWKNNClassifier(k=k, window=DTW_WINDOW)
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    if name == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64, 64), activation="relu",
                                                             random_state=random_state))
    if name == "svm":
        return make_pipeline(StandardScaler(), SVC(kernel="rbf"))
    if name == "gnb":
        return GaussianNB()
    raise ValueError(f"classifier {name!r}: one of {CLASSIFIERS}")


def fit_quietly(estimator, X, y) -> bool:
    """Fit; returns False when the MLP stopped at max_iter without converging (kept, but counted)."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        estimator.fit(X, y)
    return not any(issubclass(w.category, ConvergenceWarning) for w in caught)


# ---- one fold ----------------------------------------------------------------------------------

def fold_predictions(X, y, train, test, spec_list: list[Spec], random_state: int = RANDOM_STATE
                     ) -> tuple[dict, dict, dict]:
    """Predictions on `test` of every spec trained on `train`: (preds, seconds, converged)."""
    preds, secs, ok = {}, {}, {}
    knn = [s for s in spec_list if s.classifier == "knn"]
    if knn:  # one neighbour search at the largest k serves every k: the first k columns are the k-NN
        t0 = time.perf_counter()
        idx, _ = dtw_knn.kneighbors(X[train], X[test], max(s.k for s in knn), DTW_WINDOW)
        search = time.perf_counter() - t0
        for s in knn:
            preds[s] = dtw_knn.predict_from_neighbours(idx, y[train], s.k)
            secs[s], ok[s] = search, True
    for s in spec_list:
        if s.classifier == "knn":
            continue
        t0 = time.perf_counter()
        est = make_estimator(s.classifier, random_state)
        ok[s] = fit_quietly(est, X[train], y[train])
        preds[s] = est.predict(X[test])
        secs[s] = time.perf_counter() - t0
    return preds, secs, ok


def cross_validate(X, y, spec_list: list[Spec], folds: int = 5, random_state: int = RANDOM_STATE,
                   decision: dict[str, str] | None = None) -> dict:
    """Per spec: fold accuracies, out-of-fold predictions, seconds, unconverged fits; with a
    decision mapping (class -> CCA) also the fold accuracies of the decision the class leads to."""
    from sklearn.model_selection import StratifiedKFold

    skf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=random_state)
    out = {s: {"folds": [], "decision_folds": [], "oof": np.empty(len(y), dtype=y.dtype), "seconds": 0.0,
               "not_converged": 0} for s in spec_list}
    for train, test in skf.split(X, y):
        preds, secs, ok = fold_predictions(X, y, train, test, spec_list, random_state)
        for s in spec_list:
            out[s]["folds"].append(float(np.mean(preds[s] == y[test])))
            if decision:
                out[s]["decision_folds"].append(_decision_accuracy(decision, preds[s], y[test]))
            out[s]["oof"][test] = preds[s]
            out[s]["seconds"] += secs[s]
            out[s]["not_converged"] += 0 if ok[s] else 1
    return out


def _decision_accuracy(decision: dict[str, str], predicted, truth) -> float:
    """The share of windows whose predicted class maps to the same CCA as the true class."""
    return float(np.mean([decision[p] == decision[t] for p, t in zip(predicted, truth)]))


def held_out(X_train, y_train, X_test, y_test, spec_list: list[Spec], random_state: int = RANDOM_STATE,
             decision: dict[str, str] | None = None) -> dict:
    """cross_validate's result for one split: train on all of one recording, test on another."""
    X, y = np.concatenate([X_train, X_test]), np.concatenate([y_train, y_test])
    train, test = np.arange(len(y_train)), np.arange(len(y_train), len(y))
    preds, secs, ok = fold_predictions(X, y, train, test, spec_list, random_state)
    out = {}
    for s in spec_list:
        out[s] = {"folds": [float(np.mean(preds[s] == y_test))], "sizes": [len(y_test)], "oof": preds[s],
                  "seconds": secs[s], "not_converged": 0 if ok[s] else 1,
                  "decision_folds": [_decision_accuracy(decision, preds[s], y_test)] if decision else []}
    return out


def both_ways(X_a, y_a, X_b, y_b, spec_list: list[Spec], random_state: int = RANDOM_STATE,
              decision: dict[str, str] | None = None) -> dict:
    """held_out a -> b and b -> a, pooled: predictions in the order of y_b then y_a."""
    one = held_out(X_a, y_a, X_b, y_b, spec_list, random_state, decision)
    other = held_out(X_b, y_b, X_a, y_a, spec_list, random_state, decision)
    return {s: {"folds": one[s]["folds"] + other[s]["folds"], "sizes": one[s]["sizes"] + other[s]["sizes"],
                "oof": np.concatenate([one[s]["oof"], other[s]["oof"]]),
                "seconds": one[s]["seconds"] + other[s]["seconds"],
                "not_converged": one[s]["not_converged"] + other[s]["not_converged"],
                "decision_folds": one[s]["decision_folds"] + other[s]["decision_folds"]} for s in spec_list}


def detail(y_true, y_pred, labels: list[str]) -> dict:
    """Confusion matrix (rows = true class, in `labels` order) and per-class precision/recall/F1."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    cm = confusion_matrix(y_true, y_pred, labels=labels)
    p, r, f, n = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    per_class = {c: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(n[i])}
                 for i, c in enumerate(labels)}
    macro = {key: float(np.mean(v)) for key, v in (("precision", p), ("recall", r), ("f1", f))}
    return {"labels": list(labels), "confusion": cm.astype(int).tolist(), "per_class": per_class,
            "macro": macro, "accuracy": float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))}


# ---- the whole evaluation ----------------------------------------------------------------------

def evaluate(dataset: ops_dataset.Dataset, probings: Iterable[str] | None = None,
             ws: Iterable[int] = DEFAULT_WS, classifiers: Iterable[str] = CLASSIFIERS,
             ks: Iterable[int] = DEFAULT_KS, folds: int = 5, random_state: int = RANDOM_STATE,
             detail_ws: Iterable[int] = DETAIL_WS, progress: Callable[[str], None] | None = None,
             test: ops_dataset.Dataset | None = None, both: bool = False) -> dict:
    """Accuracy per (probing, w, classifier[, k]): the evaluation.json object. Cross-validated
    within `dataset`, or, with `test`, trained on `dataset` and tested on `test` (and, `both`,
    the other way round too)."""
    if both and test is None:
        raise ValueError("both ways needs a test recording")
    t_start = time.perf_counter()
    spec_list = specs(classifiers, ks)
    probings = list(probings or dataset.probings())
    ws, detail_ws = [int(w) for w in ws], {int(w) for w in detail_ws}
    labels = dataset.classes
    # what OPS acts on is the decision, not the class: Figure 12's rule over this dataset's classes
    decision = ops_decision.rule_mapping(dataset.meta["classes"])
    results, details, skipped = [], [], []
    for probing in probings:
        for w in ws:
            X, y = ops_dataset.build_xy(dataset, probing, w)
            if test is None:
                reason = _cannot_split(y, folds)
            else:
                X_test, y_test = ops_dataset.build_xy(test, probing, w)
                reason = _cannot_hold_out(y, y_test, spec_list) or \
                    (_cannot_hold_out(y_test, y, spec_list) if both else None)
            if reason:
                skipped.append({"probing": probing, "w": w, "reason": reason})
                continue
            if progress:
                progress(f"{probing} w={w}: {len(y)} windows" + (f", {len(y_test)} to test" if test else ""))
            if test is None:
                cv = cross_validate(X, y, spec_list, folds, random_state, decision)
            elif both:
                cv = both_ways(X, y, X_test, y_test, spec_list, random_state, decision)
                y = np.concatenate([y_test, y])
            else:
                cv = held_out(X, y, X_test, y_test, spec_list, random_state, decision)
                y = y_test      # what the details and window counts describe
            present = [c for c in labels if c in set(y)]
            for s in spec_list:
                results.append(_result_entry(s, probing, w, len(y), cv[s]))
                if w in detail_ws:
                    details.append({"classifier": s.classifier, "k": s.k, "w": w, "probing": probing,
                                    "label": s.label, **detail(y, cv[s]["oof"], present)})
    held = {"mode": BOTH_WAYS if both else HELD_OUT, "folds": 2 if both else 1, "test_dataset": dataset_info(test)} \
        if test else {"mode": CROSS_VALIDATION, "folds": folds, "shuffle": True}
    return {**EVALUATION.stamp(),
            "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "dataset": dataset_info(dataset),
            "settings": {**held, "random_state": random_state, "ws": ws,
                         "probings": probings, "classifiers": list(dict.fromkeys(s.classifier for s in spec_list)),
                         "ks": sorted({s.k for s in spec_list if s.k}), "dtw_window": DTW_WINDOW,
                         "tie_break": "nearest neighbour's class", "detail_ws": sorted(detail_ws),
                         "decision": decision,
                         "normalisation": {c: NORMALISATION[c] for c in dict.fromkeys(s.classifier for s in spec_list)}},
            "results": results, "details": details, "skipped": skipped,
            "elapsed_s": round(time.perf_counter() - t_start, 2)}


def _cannot_hold_out(y_train: np.ndarray, y_test: np.ndarray, spec_list: list[Spec]) -> str | None:
    if len(np.unique(y_train)) < 2:
        return f"{len(np.unique(y_train))} class(es) with training windows; need at least 2"
    k = max((s.k for s in spec_list if s.k), default=1)
    if len(y_train) < k:
        return f"{len(y_train)} training windows, fewer than k = {k}"
    if not len(y_test):
        return "no windows of this length in the test recording"
    return None


def _cannot_split(y: np.ndarray, folds: int) -> str | None:
    _, counts = np.unique(y, return_counts=True)
    if len(counts) < 2:
        return f"{len(counts)} class(es) with windows; need at least 2"
    if counts.min() < folds:
        return f"fewest windows in a class is {counts.min()}, fewer than the {folds} folds"
    return None


def _result_entry(s: Spec, probing: str, w: int, n: int, cv: dict) -> dict:
    entry = {"classifier": s.classifier, "k": s.k, "w": w, "probing": probing, "label": s.label,
             "accuracy_mean": float(np.average(cv["folds"], weights=cv.get("sizes"))),
             "accuracy_std": float(np.std(cv["folds"])),
             "accuracy_folds": cv["folds"], "n_windows": n, "seconds": round(cv["seconds"], 3)}
    if cv["decision_folds"]:
        entry["decision_accuracy_mean"] = float(np.average(cv["decision_folds"], weights=cv.get("sizes")))
        entry["decision_accuracy_folds"] = cv["decision_folds"]
    if s.classifier == "mlp":
        entry["not_converged"] = cv["not_converged"]
    return entry


def dataset_info(dataset: ops_dataset.Dataset) -> dict:
    """Which recording(s) a result rests on: a joined dataset names every file, and its digest is
    that of the files' digests in order."""
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in dataset.paths]
    digest = digests[0] if len(digests) == 1 else hashlib.sha256("\n".join(digests).encode()).hexdigest()
    info = {"path": " + ".join(map(str, dataset.paths)), "name": " + ".join(p.stem for p in dataset.paths),
            "sha256": digest}
    if len(digests) > 1:
        info["files"] = [{"path": str(p), "sha256": d} for p, d in zip(dataset.paths, digests)]
    return {**info, "lab": dataset.lab,
            "classes": dataset.classes, "class_flows": ops_dataset.class_flows(dataset.meta["classes"]),
            "minutes": ops_dataset.summary(dataset), "sources": dataset.meta.get("sources"),
            "active_aligned": bool(dataset.meta.get("active_aligned"))}
