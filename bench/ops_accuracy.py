"""Where longhaul's background recognition stands against seed 000's, from evaluation files
(`longhaul ops evaluate ... --json`): accuracy against w with its standard error and window count,
per recording and mode, and per classifier; the tables of bench/RESULTS-ops.md.

    .venv/bin/python bench/ops_accuracy.py "passive, session 4, CV=datasets/ops-overlay1-s4-evaluation.json:passive" ...
    .venv/bin/python bench/ops_accuracy.py --classifiers datasets/ops-overlay1-s4-evaluation.json:passive

A LABEL=FILE:PROBING argument is a row (1-NN unless --k says otherwise). The standard error is the
binomial one over the windows tested, sqrt(p (1 - p) / n): every window is tested once, in a
cross-validation's folds as in a held-out test; neighbouring windows of one run are not independent,
so it is a lower bound.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from longhaul.collectors.studies.ops.classify import EVALUATION, standard_error


def load(path: str) -> dict:
    doc = json.loads(Path(path).read_text())
    EVALUATION.check(doc, path)
    return doc


def results(doc: dict, probing: str, classifier: str | None = "knn", k: int | None = 1) -> list[dict]:
    return [r for r in doc["results"] if r["probing"] == probing
            and (classifier is None or (r["classifier"] == classifier and r.get("k", k) == k))]


def cell(r: dict) -> str:
    p, n = r["accuracy_mean"], r["n_windows"]
    return f"{p:.2f} ± {standard_error(p, n):.2f} ({n}) / {r['decision_accuracy_mean']:.2f}"


def table(rows: list[tuple[str, list[dict]]]) -> str:
    ws = sorted({r["w"] for _, rs in rows for r in rs})
    out = ["| | " + " | ".join(f"w = {w}" for w in ws) + " |", "|---" * (len(ws) + 1) + "|"]
    for label, rs in rows:
        by_w = {r["w"]: r for r in rs}
        out.append(f"| {label} | " + " | ".join(cell(by_w[w]) if w in by_w else "–" for w in ws) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", help="LABEL=EVALUATION.json:PROBING, or with --classifiers EVALUATION.json:PROBING")
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--classifiers", action="store_true", help="one row per classifier of one evaluation")
    args = ap.parse_args()
    rows = []
    if args.classifiers:
        path, _, probing = args.rows[0].rpartition(":")
        found = results(load(path), probing, classifier=None)
        for label in dict.fromkeys(r["label"] for r in found):
            rows.append((label, [r for r in found if r["label"] == label]))
    else:
        for arg in args.rows:
            label, _, rest = arg.partition("=")
            path, _, probing = rest.rpartition(":")
            rows.append((label, results(load(path), probing, k=args.k)))
    print("class accuracy ± standard error (windows tested) / decision accuracy\n")
    print(table(rows))


if __name__ == "__main__":
    main()
