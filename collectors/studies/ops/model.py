"""A trained background-recognition model, stored as data (never as a pickle).

The file is a NumPy .npz read with allow_pickle=False, holding three arrays:
  X     float64 (n, w)  the training windows (RTT in ms)
  y     unicode (n,)    their classes
  meta  unicode ()      a JSON object: format, version, w, classes, classifier, k, dtw_window,
                        probing, random_state, normalisation, lab conditions, the dataset it came
                        from, and the decision mapping (class -> foreground CCA)
For k-NN the training windows *are* the model. MLP, SVM and NB are refitted from them when the
model is loaded; with the stored random_state that refit is deterministic, and no executable
state ever has to be deserialised.
"""
from __future__ import annotations

import datetime as dt
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longhaul.collectors.studies.ops import classify as ops_classify
from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.collectors.studies.ops import dtw_knn
from longhaul.core.documents import DocumentFormat, DocumentVersionError

MODEL = DocumentFormat("longhaul-ops-model", 1, "an OPS model")


class ModelError(ValueError):
    """A model file that cannot be used; the message names the file and what is wrong."""


@dataclass
class Model:
    X: np.ndarray
    y: np.ndarray
    meta: dict
    _estimator: object = field(default=None, repr=False)

    @property
    def w(self) -> int:
        return int(self.meta["w"])

    @property
    def probing(self) -> str:
        return str(self.meta.get("probing"))

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    @property
    def decision(self) -> ops_decision.Decision:
        return ops_decision.from_dict(self.meta["decision"], self.classes)

    def estimator(self):
        """The fitted classifier, built on first use."""
        if self._estimator is None:
            m = self.meta
            est = ops_classify.make_estimator(m["classifier"], m.get("random_state", 0), k=m.get("k") or 1)
            ops_classify.fit_quietly(est, self.X, self.y)
            self._estimator = est
        return self._estimator


def train(dataset: ops_dataset.Dataset, probing: str, w: int, classifier: str = "knn", k: int = 1,
          decision: ops_decision.Decision | None = None,
          random_state: int = ops_classify.RANDOM_STATE) -> Model:
    """A model from every window of one probing mode of a dataset."""
    if classifier not in ops_classify.CLASSIFIERS:
        raise ValueError(f"classifier {classifier!r}: one of {ops_classify.CLASSIFIERS}")
    X, y = ops_dataset.build_xy(dataset, probing, w)
    if len(y) == 0:
        raise ValueError(f"{dataset.path}: no {probing} windows of w={w}")
    classes = dataset.classes
    decision = decision or ops_decision.Decision(ops_decision.rule_mapping(dataset.meta["classes"]),
                                                 "Figure 12 rule applied to the dataset's classes")
    ops_decision.validate(decision.mapping, classes)
    meta = {**MODEL.stamp(), "w": int(w), "classes": classes,
            "classifier": classifier, "k": int(k) if classifier == "knn" else None,
            "dtw_window": ops_classify.DTW_WINDOW if classifier == "knn" else None,
            "probing": probing, "random_state": int(random_state),
            "normalisation": ops_classify.NORMALISATION[classifier], "lab": dataset.lab,
            "dataset": {k_: v for k_, v in ops_classify.dataset_info(dataset).items() if k_ != "lab"},
            "decision": decision.to_dict(),
            "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    return Model(X=np.ascontiguousarray(X, dtype=np.float64), y=np.asarray(y, dtype=str), meta=meta)


def save(model: Model, path: Path) -> Path:
    """Write the model to `path` exactly (no suffix added)."""
    path = Path(path)
    buf = io.BytesIO()
    np.savez_compressed(buf, X=model.X, y=np.asarray(model.y, dtype=str),
                        meta=np.asarray(json.dumps(model.meta, sort_keys=True)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def load(path: Path) -> Model:
    """Read a model written by save(); never unpickles anything."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):  # np.load would fall back to unpickling (refused) for other files
        raise ModelError(f"{path}: not a longhaul OPS model (expected an .npz file written by `ops train`)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in ("X", "y", "meta")}
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{path}: not a readable longhaul OPS model ({exc})") from exc
    try:
        meta = json.loads(str(arrays["meta"]))
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}: the model's metadata is not valid JSON ({exc.msg})") from exc
    model = Model(X=arrays["X"].astype(np.float64), y=arrays["y"].astype(str), meta=meta)
    _check(path, model)
    return model


def _check(path: Path, model: Model) -> None:
    try:
        model.meta = m = MODEL.read(model.meta, path)
    except DocumentVersionError as e:
        raise ModelError(str(e)) from None
    if m.get("classifier") not in ops_classify.CLASSIFIERS:
        raise ModelError(f"{path}: unknown classifier {m.get('classifier')!r}")
    if model.X.ndim != 2 or model.X.shape[1] != m.get("w") or model.y.shape != (model.X.shape[0],):
        raise ModelError(f"{path}: arrays X {model.X.shape} / y {model.y.shape} do not match w={m.get('w')}")
    stray = set(np.unique(model.y)) - set(m.get("classes", []))
    if stray:
        raise ModelError(f"{path}: labels {sorted(stray)} are not among the model's classes")
    try:
        ops_decision.validate(m["decision"]["mapping"], m["classes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{path}: invalid decision mapping ({exc})") from exc




def classify(model: Model, rtt_series) -> str:
    """The predicted background class of the last w points of an RTT series (ms, one per second)."""
    return classify_detail(model, rtt_series)["class"]


def decide(model: Model, rtt_series) -> tuple[str, str]:
    """(class, foreground CCA) for the last w points, through the model's decision mapping."""
    out = classify_detail(model, rtt_series)
    return out["class"], out["cca"]


def classify_detail(model: Model, rtt_series) -> dict:
    """Class of the last w points, the decision for it, and what it was based on (for --json)."""
    x = np.asarray(rtt_series, dtype=np.float64).ravel()
    if len(x) < model.w:
        raise ValueError(f"need at least w={model.w} RTT values, got {len(x)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("RTT values must be finite numbers")
    window = x[-model.w:]
    est = model.estimator()
    out = {"class": None, "cca": None, "w": model.w, "points_used": model.w, "points_given": int(len(x)),
           "classifier": model.meta["classifier"], "k": model.meta.get("k"),
           "probing": model.meta.get("probing"), "window_ms": [float(v) for v in window]}
    if isinstance(est, dtw_knn.DTWKNNClassifier):
        idx, dist = est.kneighbors(window[None, :])
        out["neighbours"] = [{"class": str(model.y[i]), "distance": float(d)} for i, d in zip(idx[0], dist[0])]
    cls = str(est.predict(window[None, :])[0])
    out["class"], out["cca"] = cls, model.decision.decide(cls)
    flows = ops_dataset.class_flows(model.meta["dataset"].get("class_flows") or {}).get(cls)
    out["flows"] = None if flows is None else [list(f) for f in flows]
    return out
