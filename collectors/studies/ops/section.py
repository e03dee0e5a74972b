"""Report section for OPS (seed 000 §6.6-6.7, Figures 22-29), from files in the run directory.

    ops/evaluation.json  written by `longhaul ops evaluate --out RUN_DIR` (docs/ops.md): accuracy
                         per (probing, w, classifier[, k]) with fold accuracies, and confusion
                         matrices / per-class metrics for the detail window lengths
    ops/fig29.json       {"schemes": [{"background", "scheme", "fg_mbps", "bg_mbps", "jain",
                         "paper": {"fg_mbps", "bg_mbps", "jain"}}]} from the Figure 29 run

The section applies when either file exists. A file that cannot be read becomes a note in the
section rather than an exception: the rest of the report must still render. SECTION is the
reports.sections.Section; its template, ops.html.j2, lies beside this file.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from longhaul.collectors.store.reader import StoredRun, load_json_object
from longhaul.collectors.studies.ops import fig29_view
from longhaul.collectors.studies.ops.classify import (
    BOTH_WAYS,
    CROSS_VALIDATION,
    EVALUATION,
    EVALUATION_FILE,
    HELD_OUT,
    standard_error,
)
from longhaul.collectors.studies.ops.lab_runs import FIG29, FIG29_FILE
from longhaul.collectors.studies.ops.paper import (
    PAPER_ACCURACY,
    PAPER_BEST,
    PAPER_CONFUSION,
    PAPER_GAP,
)
from longhaul.core.documents import DocumentFormat, DocumentVersionError
from longhaul.reports.fmt import DASH, finite, fmt
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, decorate, new_figure, to_svg
from longhaul.reports.sections import figure

DETAIL_W = 10
# Figure 26's four panels: (probing, k) of the 1/3/5-NN matrices.
CONFUSION_PANELS = (("active", 1), ("active", 3), ("active", 5), ("passive", 1))


class OpsSection:
    """Seed 000's recognition (Figures 22-28) and adaptive selection (Figure 29) results."""

    name = "ops"
    template = Path(__file__).with_name("ops.html.j2")

    def applies(self, store: StoredRun) -> bool:
        ev_path, f29_path = _paths(store)
        return ev_path.is_file() or f29_path.is_file()

    def context(self, store: StoredRun) -> dict:
        ev_path, f29_path = _paths(store)
        notes: list[str] = []
        evaluation = load_json_object(ev_path, notes, required=False)
        evaluation = _stamped(EVALUATION, evaluation, ev_path, notes)
        recognition = _recognition(evaluation) if evaluation is not None else None
        fig29 = _stamped(FIG29, load_json_object(f29_path, notes, required=False), f29_path, notes)
        selection = fig29_view.selection(fig29, notes) if fig29 is not None else None
        return {"recognition": recognition, "selection": selection, "notes": notes}


SECTION = OpsSection()


def _stamped(kind: DocumentFormat, doc: dict | None, path: Path, notes: list[str]) -> dict | None:
    """`doc` in its current version, or None with a note when it is not `kind`."""
    if doc is None:
        return None
    try:
        return kind.read(doc, path.name)
    except DocumentVersionError as e:
        notes.append(f"{e}; not shown")
        return None


def _paths(store: StoredRun) -> tuple[Path, Path]:
    return Path(store.run_dir) / EVALUATION_FILE, Path(store.run_dir) / FIG29_FILE


# ---- recognition (Figures 22-28) ---------------------------------------------------------------

@dataclass(frozen=True)
class Tested:
    """How an evaluation's mode is worded in its captions."""
    accuracy: str       # "Mean accuracy" over folds, a pooled one otherwise
    over: str           # what it is taken over
    each: str           # what one box-plot point is
    table: str          # the tables' accuracy
    predictions: str    # what the confusion matrices count


TESTED = {
    CROSS_VALIDATION: Tested("Mean accuracy", "over the folds", "fold at every w", "mean over the folds",
                             "out-of-fold predictions of all folds"),
    HELD_OUT: Tested("Accuracy", "on the held-out recording", "w", "on the held-out recording",
                     "predictions on the held-out recording"),
    BOTH_WAYS: Tested("Accuracy", "on both recordings, each tested by a model trained on the other",
                      "direction at every w", "on both recordings, each tested by a model trained on the other",
                      "predictions on both recordings, each by a model trained on the other"),
}

def _recognition(ev: dict) -> dict:
    results = [r for r in ev.get("results") or [] if isinstance(r, dict)]
    settings, ds = ev.get("settings") or {}, ev.get("dataset") or {}
    probings = [p for p in ("passive", "active") if any(r.get("probing") == p for r in results)]
    labels = list(dict.fromkeys(str(r.get("label")) for r in results))
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    tested = TESTED.get(settings.get("mode"), TESTED[CROSS_VALIDATION])
    parts = []
    for probing in probings:
        rows = [r for r in results if r.get("probing") == probing]
        baseline = [r for r in results if r.get("probing") == "passive" and r.get("classifier") == "knn"
                    and r.get("k") == 1] if probing == "active" else []
        figures = [
            figure(_accuracy_plot(rows, baseline, colors, probing),
                   f"{tested.accuracy} {tested.over} per window length w ({probing} probing"
                   f"{'; dashed: 1-NN with passive probing as the baseline' if baseline else ''}): "
                   f"Figure {'24a' if probing == 'active' else '22a'}, with what the paper's text says of it in red; "
                   "the windows each point rests on are in the tables' last row."),
            figure(_box_by_classifier(rows, colors, probing),
                   f"Accuracy of every {tested.each}, per classifier ({probing} probing): "
                   f"Figure {'24b' if probing == 'active' else '22b'}."),
            figure(_box_by_w(rows, probing), f"k-NN (DTW) {tested.accuracy.lower()} {tested.over} "
                                             f"per w ({probing} probing): Figure 25.")]
        tables = [_accuracy_table(rows, probing, tested),
                  _accuracy_table(rows, probing, tested, "decision_accuracy", caption=
                                  "Decision accuracy: windows whose predicted class leads to the same congestion "
                                  f"control as the true one ({_mapping_text(settings.get('decision'))})")]
        parts.append({"figures": [f for f in figures if f], "tables": [t for t in tables if t]})
    details = [d for d in ev.get("details") or [] if isinstance(d, dict) and d.get("w") == DETAIL_W]
    return {"setup": _setup(ds, settings), "probings": parts, "paper": _paper_rows(results),
            "confusion": figure(_confusion_grid(details), f"Confusion matrices of the k-NN (DTW) at w = {DETAIL_W}, "
                                f"{tested.predictions}"
                                f"{_windows_text(details)}: Figure 26; its 1-NN panels are Figures 27a (active) and 23a "
                                f"and 28a (passive). {PAPER_CONFUSION}"),
            "metrics": _metrics(details)}


def _windows_text(details: list[dict]) -> str:
    counts = sorted({int(np.sum(d["confusion"])) for d in details if d.get("confusion")})
    return f" ({' or '.join(map(str, counts))} windows a panel)" if counts else ""


def _setup(ds: dict, settings: dict) -> dict:
    """The dataset and method, as the sentence under "Background recognition" tells them."""
    minutes = ds.get("minutes") or {}
    sources = ds.get("sources") or []
    made = f", merged from {len(sources)} recordings" if len(sources) > 1 else ""
    test = settings.get("test_dataset") if settings.get("mode") in (HELD_OUT, BOTH_WAYS) else None
    if "active" in minutes:
        made += ("; active bursts on the probe's clock (windows of whole cycles see the same phases)"
                 if ds.get("active_aligned") else "; active bursts back to back (their cycle drifts against the windows)")
    return {"name": ds.get("name", "?"), "length": _minutes_text(minutes) or "length unknown", "made": made,
            "classes": ", ".join(ds.get("classes") or []), "lab": _lab_text(ds.get("lab") or dict()),
            "test": {"name": test.get("name", "?"), "minutes": _minutes_text(test.get("minutes") or {}),
                     "both_ways": settings.get("mode") == BOTH_WAYS}
            if isinstance(test, dict) else None,
            "folds": settings.get("folds", "?"), "random_state": settings.get("random_state", "?"),
            "dtw_window": settings.get("dtw_window", "?"),
            "tie_break": settings.get("tie_break", "nearest neighbour")}


def _minutes_text(minutes: dict) -> str:
    return "; ".join(f"{p}: {_per_class(v)} min per class" for p, v in minutes.items() if v)


def _mapping_text(decision) -> str:
    if not isinstance(decision, dict) or not decision:
        return "Figure 12"
    by_cca: dict[str, list[str]] = {}
    for cls, cca in decision.items():
        by_cca.setdefault(str(cca), []).append(str(cls))
    return "Figure 12: " + "; ".join(f"{', '.join(c)} -> {cca}" for cca, c in by_cca.items())


def _per_class(minutes: dict) -> str:
    low, high = min(minutes.values()), max(minutes.values())
    return f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}-{high:.1f}"


def _lab_text(lab: dict) -> str:
    topology = lab.get("topology") if isinstance(lab.get("topology"), dict) else {}
    scaled = {**topology, **lab}  # the recorder nests rate and RTT under "topology"
    if finite(scaled.get("queue_bytes")):
        scaled["queue_mb"] = scaled["queue_bytes"] / 1e6
    keys = (("bottleneck_rate_mbps", " Mb/s"), ("rtt_ms", " ms RTT"), ("queue_mb", " MB queue"))
    text = ", ".join(f"{scaled[k]:g}{unit}" for k, unit in keys if finite(scaled.get(k)))
    return " ".join(x for x in (str(lab.get("name", "")), f"({text})" if text else "") if x) or "not recorded"


def _series(rows: list[dict], label: str) -> tuple[list[int], list[float]]:
    pts = sorted((r["w"], r["accuracy_mean"]) for r in rows if r.get("label") == label
                 and finite(r.get("accuracy_mean")) and isinstance(r.get("w"), int))
    return [w for w, _ in pts], [100 * a for _, a in pts]


def _accuracy_plot(rows, baseline, colors, probing) -> str | None:
    labels = list(dict.fromkeys(r.get("label") for r in rows))
    if not rows:
        return None
    with new_figure() as (fig, ax):
        for label in labels:
            ax.plot(*_series(rows, label), "o-", ms=3, lw=1.2, color=colors.get(label, "k"), label=label)
        if baseline:
            ax.plot(*_series(baseline, baseline[0]["label"]), "s--", ms=3, lw=1.0, color="0.35",
                    label="1-NN (DTW),\npassive (baseline)")
        _paper_marks(ax, probing)
        decorate(ax, f"OPS: accuracy vs window length: {probing} probing", "window length w (s = points)",
                  "accuracy (%)")
        return to_svg(fig, f"ops-acc-{probing}", f"OPS: accuracy vs window length: {probing} probing")


def _paper_marks(ax, probing: str) -> None:
    """What the paper's text says of its curves (its Figures 22-25 are images without values)."""
    mark = PAPER_ACCURACY.get(probing)
    if mark is None:
        return
    low, high = mark["range"]
    if "w" in mark:
        ax.plot([mark["w"]], [high], "*", ms=9, color="#d62728", label=mark["label"])
    else:
        ax.axhspan(low, high, color="#d62728", alpha=0.12, lw=0, label=mark["label"])


def _box_by_classifier(rows, colors, probing) -> str | None:
    labels = list(dict.fromkeys(r.get("label") for r in rows))
    data = [[100 * a for r in rows if r.get("label") == label for a in r.get("accuracy_folds") or []
             if finite(a)] for label in labels]
    if not any(data):
        return None
    title = f"OPS: accuracy per classifier over folds and w: {probing} probing"
    with new_figure(height=2.7, frame={"left": 0.085, "right": 0.80, "bottom": 0.2, "top": 0.9}) as (fig, ax):
        box = ax.boxplot(data, patch_artist=True, widths=0.6)
        for patch, label in zip(box["boxes"], labels):
            patch.set_facecolor(colors.get(label, "0.7"))
            patch.set_label(label)
        ax.set_xticks(range(1, len(labels) + 1), [str(label).replace(" (", "\n(") for label in labels],
                      fontsize=7)
        decorate(ax, title, "classifier", "accuracy (%)")
        return to_svg(fig, f"ops-box-{probing}", title)


def _box_by_w(rows, probing) -> str | None:
    knn = [r for r in rows if r.get("classifier") == "knn"]
    ks = sorted({r.get("k") for r in knn if isinstance(r.get("k"), int)})
    ws = sorted({r.get("w") for r in knn if isinstance(r.get("w"), int)})
    if not ks or not ws:
        return None
    title = f"OPS: k-NN (DTW) accuracy over folds per w: {probing} probing"
    width, labelled = 0.8 / len(ks), set()
    with new_figure() as (fig, ax):
        for j, k in enumerate(ks):
            color = PALETTE[j % len(PALETTE)]
            for i, w in enumerate(ws):
                folds = [100 * a for r in knn if r.get("k") == k and r.get("w") == w
                         for a in r.get("accuracy_folds") or [] if finite(a)]
                if folds:
                    b = ax.boxplot([folds], positions=[i + (j - (len(ks) - 1) / 2) * width], widths=width * 0.85,
                                   patch_artist=True, manage_ticks=False)
                    b["boxes"][0].set_facecolor(color)
                    if k not in labelled:  # one legend entry per k
                        b["boxes"][0].set_label(f"{k}-NN (DTW)")
                        labelled.add(k)
        ax.set_xticks(range(len(ws)), [str(w) for w in ws])
        ax.set_xlim(-0.6, len(ws) - 0.4)
        decorate(ax, title, "window length w (s = points)", "accuracy (%)")
        return to_svg(fig, f"ops-boxw-{probing}", title)


def _accuracy_table(rows, probing, tested: Tested, key: str = "accuracy", caption: str = "Accuracy") -> dict | None:
    """Per classifier (rows) and w (columns): the accuracy with its standard error over the windows
    tested, and a last row with how many windows that is (what each figure rests on)."""
    rows = [r for r in rows if f"{key}_mean" in r]
    if not rows:
        return None
    ws = sorted({r["w"] for r in rows if isinstance(r.get("w"), int)})
    body = []
    for label in dict.fromkeys(r.get("label") for r in rows):
        cells = {r["w"]: r for r in rows if r.get("label") == label}
        body.append({"label": label, "cells": [_with_error(cells[w], key) if w in cells else None for w in ws]})
    counts = {r["w"]: r.get("n_windows") for r in rows}
    body.append({"label": "windows tested", "cells": [
        {"mean": str(counts[w]), "std": None} if isinstance(counts.get(w), int) else None for w in ws]})
    return {"caption": f"{caption} (%), {tested.table}, ± its binomial "
                       f"standard error over the windows tested (a lower bound: neighbouring windows of a run are "
                       f"not independent), {probing} probing", "ws": ws, "rows": body}


def _with_error(row: dict, key: str) -> dict:
    mean, n = row.get(f"{key}_mean"), row.get("n_windows")
    error = standard_error(mean, n) if finite(mean) and isinstance(n, int) and n > 0 else None
    return {"mean": _pct(mean), "std": _pct(error) if error is not None else None}


def _best(rows) -> dict | None:
    rows = [r for r in rows if finite(r.get("accuracy_mean"))]
    return max(rows, key=lambda r: r["accuracy_mean"]) if rows else None


def _one_nn(results, probing: str, w: int) -> float | None:
    return next((r["accuracy_mean"] for r in results if r.get("probing") == probing and r.get("classifier") == "knn"
                 and r.get("k") == 1 and r.get("w") == w and finite(r.get("accuracy_mean"))), None)


def _paper_rows(results: list[dict]) -> list[tuple[str, str, str]]:
    """Ours beside what the paper's text states (its Figures 22-25 are images without values)."""
    rows = []
    for probing in ("passive", "active"):
        best = _best([r for r in results if r.get("probing") == probing])
        ours = f"{_pct(best['accuracy_mean'])} ({best.get('label')}, w = {best.get('w')})" if best else DASH
        rows.append((f"best accuracy, {probing} probing", ours, PAPER_BEST[probing]))
    for w in (5, 50):
        a, p = _one_nn(results, "active", w), _one_nn(results, "passive", w)
        gap = f"{100 * (a - p):+.1f} points" if a is not None and p is not None else DASH
        rows.append((f"1-NN active minus passive, w = {w}", gap, PAPER_GAP[w]))
    return rows


def _pct(value) -> str:
    return f"{100 * value:.1f}" if finite(value) else "–"


def _confusion_grid(details: list[dict]) -> str | None:
    panels = [(p, k, next((d for d in details if d.get("classifier") == "knn" and d.get("probing") == p
                           and d.get("k") == k), None)) for p, k in CONFUSION_PANELS]
    panels = [(p, k, d) for p, k, d in panels if d and d.get("confusion")]
    if not panels:
        return None
    title = f"OPS: confusion matrices, k-NN (DTW), w = {DETAIL_W}"
    rows = (len(panels) + 1) // 2
    with _grid(rows, 2, 3.3 * rows) as (fig, axes):
        for ax, (probing, k, d) in zip(axes, panels):
            _confusion_axes(fig, ax, d, f"{k}-NN (DTW), {probing} probing")
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        fig.suptitle(title, fontweight="bold")
        return to_svg(fig, "ops-confusion", title)


def _confusion_axes(fig, ax, d: dict, title: str) -> None:
    cm = np.asarray(d["confusion"], dtype=float)
    labels = d.get("labels") or [str(i) for i in range(len(cm))]
    share = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    image = ax.imshow(100 * share, cmap="Blues", vmin=0, vmax=100)
    for (i, j), count in np.ndenumerate(cm):
        ax.text(j, i, f"{count:.0f}", ha="center", va="center", fontsize=6.5,
                color="white" if share[i, j] > 0.6 else "black")
    for i in range(len(cm)):
        ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, ec="#d62728", lw=0.9,
                               label="correct (diagonal)" if i == 0 else None))
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=6.5)
    ax.set_yticks(range(len(labels)), labels, fontsize=6.5)
    ax.set_title(f"{title}: accuracy {100 * d.get('accuracy', float('nan')):.1f} %", fontsize=8.5)
    ax.set_xlabel("predicted class (windows)")
    ax.set_ylabel("true class (windows)")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03).set_label("share of true class (%)", fontsize=7)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.12), fontsize=6.5, frameon=False)


def _metrics(details: list[dict]) -> dict | None:
    """Precision, recall and F1 per class of the 1-NN (DTW), active then passive probing."""
    chosen = [d for p, k in (("active", 1), ("passive", 1)) for d in details
              if d.get("classifier") == "knn" and d.get("probing") == p and d.get("k") == k]
    if not chosen:
        return None
    labels = list(dict.fromkeys(c for d in chosen for c in d.get("labels") or []))
    rows = []
    for c in labels + ["macro average"]:
        values = []
        for d in chosen:
            m = (d.get("macro") if c == "macro average" else (d.get("per_class") or {}).get(c)) or {}
            values += [fmt(m.get(key), 2) for key in ("precision", "recall", "f1")]
        rows.append({"name": c, "cells": values})
    return {"detail_w": DETAIL_W, "probings": [d["probing"] for d in chosen], "rows": rows}


# ---- figure helpers ----------------------------------------------------------------------------

@contextlib.contextmanager
def _grid(rows: int, cols: int, height: float):
    """A rows x cols figure on an explicit Agg canvas (plots.py's _figure has one axes only)."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, height), layout="constrained")
        FigureCanvasAgg(fig)
        axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
        try:
            yield fig, axes
        finally:
            fig.clear()
