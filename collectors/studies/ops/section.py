"""Report section for OPS (seed 000 §6.6-6.7, Figures 22-29), from files in the run directory.

    ops/evaluation.json  written by `longhaul ops evaluate --out RUN_DIR` (docs/ops.md): accuracy
                         per (probing, w, classifier[, k]) with fold accuracies, and confusion
                         matrices / per-class metrics for the detail window lengths
    ops/fig29.json       {"schemes": [{"background", "scheme", "fg_mbps", "bg_mbps", "jain",
                         "paper": {"fg_mbps", "bg_mbps", "jain"}}]} from the Figure 29 run

Either file may be missing (None is returned when both are). A file that cannot be read becomes a
note in the section rather than an exception: the rest of the report must still render.
"""
from __future__ import annotations

import contextlib
import html
import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, _decorate, _figure, _to_svg
from longhaul.collectors.store.reader import load_json_object

EVAL_FORMAT = "longhaul-ops-evaluation"
DETAIL_W = 10
# Seed 000 §6.7: Jain indices given in the text; the throughputs are only in the figure image.
PAPER_FIG29_JAIN = {("cubic", "Fixed:BBR"): 0.62, ("cubic", "Adaptive"): 0.99,
                    ("bbr", "Fixed:CUBIC"): 0.60, ("bbr", "Adaptive"): 0.96}
SCHEMES = ("Fixed:CUBIC", "Fixed:BBR", "Adaptive")
# Seed 000's text on recognition: §7 "up to 85% accuracy" passive (Figure 23), "up to 0.96" active
# (Figure 25a, 1-NN at w = 50), and active above passive "by between 7% (for w = 5) to 16% (for
# w = 50)" (Figure 24a).
PAPER_BEST = {"passive": "up to 85 (1-NN)", "active": "up to 96 (1-NN, w = 50)"}
PAPER_GAP = {5: "+7", 50: "+16"}
# Figure 26's four panels: (probing, k) of the 1/3/5-NN matrices.
CONFUSION_PANELS = (("active", 1), ("active", 3), ("active", 5), ("passive", 1))


def section(store) -> str | None:
    ops_dir = Path(store.run_dir) / "ops"
    ev_path, f29_path = ops_dir / "evaluation.json", ops_dir / "fig29.json"
    if not ev_path.is_file() and not f29_path.is_file():
        return None
    notes: list[str] = []
    parts = ['<section id="ops">', "<h2>Optimization through protocol selection (seed 000 §6.6-6.7)</h2>"]
    evaluation = load_json_object(ev_path, notes, required=False)
    if evaluation is not None and evaluation.get("format") != EVAL_FORMAT:
        notes.append(f"{ev_path.name}: format {evaluation.get('format')!r} is not {EVAL_FORMAT!r}; not shown")
        evaluation = None
    if evaluation is not None:
        parts += _recognition(evaluation)
    fig29 = load_json_object(f29_path, notes, required=False)
    if fig29 is not None:
        parts += _selection(fig29, notes)
    if notes:
        parts.append('<ul class="missing">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def _e(value) -> str:
    return html.escape(str(value))


def _figure_html(svg: str | None, caption: str) -> str:
    return f"<figure>{svg}<figcaption class=\"caption\">{_e(caption)}</figcaption></figure>" if svg else ""


# ---- recognition (Figures 22-28) ---------------------------------------------------------------

def _recognition(ev: dict) -> list[str]:
    results = [r for r in ev.get("results") or [] if isinstance(r, dict)]
    settings, ds = ev.get("settings") or {}, ev.get("dataset") or {}
    probings = [p for p in ("passive", "active") if any(r.get("probing") == p for r in results)]
    labels = list(dict.fromkeys(str(r.get("label")) for r in results))
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    out = ["<h3>Background recognition</h3>", f"<p>{_setup_text(ds, settings)}</p>"]
    held = settings.get("mode") == "held-out"
    over = "on the held-out recording" if held else "over the folds"
    for probing in probings:
        rows = [r for r in results if r.get("probing") == probing]
        baseline = [r for r in results if r.get("probing") == "passive" and r.get("classifier") == "knn"
                    and r.get("k") == 1] if probing == "active" else []
        out.append(_figure_html(_accuracy_plot(rows, baseline, colors, probing),
                                f"{'Accuracy' if held else 'Mean accuracy'} {over} per window length w ({probing} probing"
                                f"{'; dashed: 1-NN with passive probing as the baseline' if baseline else ''}): "
                                f"Figure {'24a' if probing == 'active' else '22a'}."))
        out.append(_figure_html(_box_by_classifier(rows, colors, probing),
                                f"Accuracy of every {'w' if held else 'fold at every w'}, per classifier ({probing} probing): "
                                f"Figure {'24b' if probing == 'active' else '22b'}."))
        out.append(_figure_html(_box_by_w(rows, probing), f"k-NN (DTW) accuracy {over} per w "
                                f"({probing} probing): Figure 25."))
        out.append(_accuracy_table(rows, probing, over=over))
        out.append(_accuracy_table(rows, probing, "decision_accuracy", over=over, caption=
                                   "Decision accuracy: windows whose predicted class leads to the same congestion "
                                   f"control as the true one ({_mapping_text(settings.get('decision'))})"))
    out.append(_paper_table(results))
    details = [d for d in ev.get("details") or [] if isinstance(d, dict) and d.get("w") == DETAIL_W]
    out.append(_figure_html(_confusion_grid(details), f"Confusion matrices of the k-NN (DTW) at w = {DETAIL_W}, "
                            f"{'predictions on the held-out recording' if held else 'out-of-fold predictions of all folds'}"
                            ": Figure 26 (27a and 28a are its 1-NN panels)."))
    out.append(_metrics_table(details))
    return out


def _setup_text(ds: dict, settings: dict) -> str:
    minutes = ds.get("minutes") or {}
    length = "; ".join(f"{p}: {_per_class(v)} min per class" for p, v in minutes.items() if v) or "length unknown"
    classes = ", ".join(ds.get("classes") or [])
    sources = ds.get("sources") or []
    made = f", merged from {len(sources)} recordings" if len(sources) > 1 else ""
    test = settings.get("test_dataset") if settings.get("mode") == "held-out" else None
    if "active" in minutes:
        made += ("; active bursts on the probe's clock (windows of whole cycles see the same phases)"
                 if ds.get("active_aligned") else "; active bursts back to back (their cycle drifts against the windows)")
    method = (f"Trained on all of it and tested on every window of <span class=\"mono\">{_e(test.get('name', '?'))}"
              f"</span>, a recording under the same conditions that the model did not see "
              f"({_e('; '.join(f'{p}: {_per_class(v)} min per class' for p, v in (test.get('minutes') or {}).items() if v))})"
              if isinstance(test, dict) else
              f"Stratified {_e(settings.get('folds', '?'))}-fold cross-validation (shuffled, random_state "
              f"{_e(settings.get('random_state', '?'))})")
    return (f"Dataset <span class=\"mono\">{_e(ds.get('name', '?'))}</span> ({_e(length)}{_e(made)}), classes "
            f"{_e(classes)}; lab {_e(_lab_text(ds.get('lab') or dict()))}. {method}; "
            f"DTW warping window {_e(settings.get('dtw_window', '?'))}; "
            f"k-NN ties go to the {_e(settings.get('tie_break', 'nearest neighbour'))}.")


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
    if _finite(scaled.get("queue_bytes")):
        scaled["queue_mb"] = scaled["queue_bytes"] / 1e6
    keys = (("bottleneck_rate_mbps", " Mb/s"), ("rtt_ms", " ms RTT"), ("queue_mb", " MB queue"))
    text = ", ".join(f"{scaled[k]:g}{unit}" for k, unit in keys if _finite(scaled.get(k)))
    return " ".join(x for x in (str(lab.get("name", "")), f"({text})" if text else "") if x) or "not recorded"


def _series(rows: list[dict], label: str) -> tuple[list[int], list[float]]:
    pts = sorted((r["w"], r["accuracy_mean"]) for r in rows if r.get("label") == label
                 and _finite(r.get("accuracy_mean")) and isinstance(r.get("w"), int))
    return [w for w, _ in pts], [100 * a for _, a in pts]


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _accuracy_plot(rows, baseline, colors, probing) -> str | None:
    labels = list(dict.fromkeys(r.get("label") for r in rows))
    if not rows:
        return None
    with _figure() as (fig, ax):
        for label in labels:
            ax.plot(*_series(rows, label), "o-", ms=3, lw=1.2, color=colors.get(label, "k"), label=label)
        if baseline:
            ax.plot(*_series(baseline, baseline[0]["label"]), "s--", ms=3, lw=1.0, color="0.35",
                    label="1-NN (DTW),\npassive (baseline)")
        _decorate(ax, f"OPS: accuracy vs window length: {probing} probing", "window length w (s = points)",
                  "accuracy (%)")
        return _titled(_to_svg(fig, f"ops-acc-{probing}"), f"OPS: accuracy vs window length: {probing} probing")


def _box_by_classifier(rows, colors, probing) -> str | None:
    labels = list(dict.fromkeys(r.get("label") for r in rows))
    data = [[100 * a for r in rows if r.get("label") == label for a in r.get("accuracy_folds") or []
             if _finite(a)] for label in labels]
    if not any(data):
        return None
    title = f"OPS: accuracy per classifier over folds and w: {probing} probing"
    with _figure(height=2.7, frame={"left": 0.085, "right": 0.80, "bottom": 0.2, "top": 0.9}) as (fig, ax):
        box = ax.boxplot(data, patch_artist=True, widths=0.6)
        for patch, label in zip(box["boxes"], labels):
            patch.set_facecolor(colors.get(label, "0.7"))
            patch.set_label(label)
        ax.set_xticks(range(1, len(labels) + 1), [str(label).replace(" (", "\n(") for label in labels],
                      fontsize=7)
        _decorate(ax, title, "classifier", "accuracy (%)")
        return _titled(_to_svg(fig, f"ops-box-{probing}"), title)


def _box_by_w(rows, probing) -> str | None:
    knn = [r for r in rows if r.get("classifier") == "knn"]
    ks = sorted({r.get("k") for r in knn if isinstance(r.get("k"), int)})
    ws = sorted({r.get("w") for r in knn if isinstance(r.get("w"), int)})
    if not ks or not ws:
        return None
    title = f"OPS: k-NN (DTW) accuracy over folds per w: {probing} probing"
    width, labelled = 0.8 / len(ks), set()
    with _figure() as (fig, ax):
        for j, k in enumerate(ks):
            color = PALETTE[j % len(PALETTE)]
            for i, w in enumerate(ws):
                folds = [100 * a for r in knn if r.get("k") == k and r.get("w") == w
                         for a in r.get("accuracy_folds") or [] if _finite(a)]
                if folds:
                    b = ax.boxplot([folds], positions=[i + (j - (len(ks) - 1) / 2) * width], widths=width * 0.85,
                                   patch_artist=True, manage_ticks=False)
                    b["boxes"][0].set_facecolor(color)
                    if k not in labelled:  # one legend entry per k
                        b["boxes"][0].set_label(f"{k}-NN (DTW)")
                        labelled.add(k)
        ax.set_xticks(range(len(ws)), [str(w) for w in ws])
        ax.set_xlim(-0.6, len(ws) - 0.4)
        _decorate(ax, title, "window length w (s = points)", "accuracy (%)")
        return _titled(_to_svg(fig, f"ops-boxw-{probing}"), title)


def _accuracy_table(rows, probing, key: str = "accuracy", caption: str = "Accuracy", over: str = "over the folds") -> str:
    rows = [r for r in rows if f"{key}_mean" in r]
    if not rows:
        return ""
    ws = sorted({r["w"] for r in rows if isinstance(r.get("w"), int)})
    spread = any(len(r.get(f"{key}_folds") or []) > 1 for r in rows)
    labels = list(dict.fromkeys(r.get("label") for r in rows))
    head = "".join(f"<th>w={w}</th>" for w in ws)
    body = []
    for label in labels:
        cells = {r["w"]: r for r in rows if r.get("label") == label}
        tds = "".join(f"<td class=\"num\">{_pct(cells[w].get(f'{key}_mean'))}"
                      + (f"<span class=\"n\"> ±{_pct(_std(cells[w], key))}</span>" if spread else "") + "</td>"
                      if w in cells else "<td class=\"num\">–</td>" for w in ws)
        body.append(f"<tr><th scope=\"row\">{_e(label)}</th>{tds}</tr>")
    return (f"<table class=\"data\"><caption>{_e(caption)} (%), {'mean ± std ' if spread else ''}{_e(over)}, {_e(probing)} probing"
            f"</caption><thead><tr><th>classifier</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _std(row: dict, key: str):
    folds = [a for a in row.get(f"{key}_folds") or [] if _finite(a)]
    return row.get(f"{key}_std", float(np.std(folds)) if folds else None)


def _best(rows) -> dict | None:
    rows = [r for r in rows if _finite(r.get("accuracy_mean"))]
    return max(rows, key=lambda r: r["accuracy_mean"]) if rows else None


def _one_nn(results, probing: str, w: int) -> float | None:
    return next((r["accuracy_mean"] for r in results if r.get("probing") == probing and r.get("classifier") == "knn"
                 and r.get("k") == 1 and r.get("w") == w and _finite(r.get("accuracy_mean"))), None)


def _paper_table(results: list[dict]) -> str:
    """Ours beside what the paper's text states (its Figures 22-25 are images without values)."""
    rows = []
    for probing in ("passive", "active"):
        best = _best([r for r in results if r.get("probing") == probing])
        ours = f"{_pct(best['accuracy_mean'])} ({_e(best.get('label'))}, w = {best.get('w')})" if best else "–"
        rows.append((f"best accuracy, {probing} probing", ours, PAPER_BEST[probing]))
    for w in (5, 50):
        a, p = _one_nn(results, "active", w), _one_nn(results, "passive", w)
        gap = f"{100 * (a - p):+.1f} points" if a is not None and p is not None else "–"
        rows.append((f"1-NN active minus passive, w = {w}", gap, PAPER_GAP[w]))
    body = "".join(f"<tr><th scope=\"row\">{_e(what)}</th><td class=\"num\">{ours}</td>"
                   f"<td class=\"num paper-inline\">{_e(paper)}</td></tr>" for what, ours, paper in rows)
    return ("<table class=\"data\"><caption>Recognition: ours beside the paper's text (§6.6, §7; its accuracy "
            "figures are images)</caption><thead><tr><th></th><th>ours (%)</th><th>paper</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _pct(value) -> str:
    return f"{100 * value:.1f}" if _finite(value) else "–"


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
        return _titled(_to_svg(fig, "ops-confusion"), title)


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


def _metrics_table(details: list[dict]) -> str:
    chosen = [d for p, k in (("active", 1), ("passive", 1)) for d in details
              if d.get("classifier") == "knn" and d.get("probing") == p and d.get("k") == k]
    if not chosen:
        return ""
    labels = list(dict.fromkeys(c for d in chosen for c in d.get("labels") or []))
    head = "".join(f"<th colspan=\"3\">1-NN (DTW), {_e(d['probing'])}</th>" for d in chosen)
    sub = "<th>precision</th><th>recall</th><th>F1</th>" * len(chosen)
    body = []
    for c in labels + ["macro average"]:
        tds = ""
        for d in chosen:
            m = (d.get("macro") if c == "macro average" else (d.get("per_class") or {}).get(c)) or {}
            tds += "".join(f"<td class=\"num\">{_num(m.get(key))}</td>" for key in ("precision", "recall", "f1"))
        body.append(f"<tr><th scope=\"row\" class=\"mono\">{_e(c)}</th>{tds}</tr>")
    return (f"<table class=\"data\"><caption>Per-class precision, recall and F1 at w = {DETAIL_W} "
            "(Figures 27b and 28b)</caption>"
            f"<thead><tr><th rowspan=\"2\">class</th>{head}</tr><tr>{sub}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _num(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if _finite(value) else "–"


# ---- selection (Figure 29) ---------------------------------------------------------------------

def _selection(data: dict, notes: list[str]) -> list[str]:
    schemes = [s for s in data.get("schemes") or [] if isinstance(s, dict)]
    if not schemes:
        notes.append("fig29.json has no schemes")
        return []
    for s in schemes:  # the text's Jain values when the file leaves them out
        if not isinstance(s.get("paper"), dict):
            s["paper"] = {}
        if s["paper"].get("jain") is None:
            s["paper"]["jain"] = PAPER_FIG29_JAIN.get((s.get("background"), s.get("scheme")))
    rows = "".join(
        f"<tr><td class=\"mono\">{_e(s.get('background'))}</td><td>{_e(s.get('scheme'))}</td>"
        f"<td class=\"num\">{_num(s.get('fg_mbps'), 1)}</td><td class=\"num\">{_num(s.get('bg_mbps'), 1)}</td>"
        f"<td class=\"num\"><strong>{_num(s.get('jain'))}</strong> <span class=\"paper-inline\">"
        f"(paper {_num(s['paper'].get('jain'))})</span></td>"
        f"<td class=\"num\">{_num(s.get('completion_s'), 0)}</td>"
        f"<td class=\"num paper-inline\">{_num(s['paper'].get('fg_mbps'), 1)} / {_num(s['paper'].get('bg_mbps'), 1)}</td></tr>"
        for s in schemes)
    return ["<h3>Adaptive vs fixed protocol selection (Figure 29)</h3>",
            _figure_html(_fig29_plot(schemes), "Mean foreground (FG) and background (BG) throughput per "
                         "background and scheme, with the Jain index of the two; diamonds mark the paper's throughputs where "
                         "fig29.json gives them (the paper prints them only in the figure image)."),
            "<table class=\"data\"><caption>Figure 29: ours, with the paper's values in grey (its throughputs "
            "are only in the figure image, so they show as –); FG Mb/s is over the foreground's transfer "
            "seconds, and 'done in' includes the adaptive scheme's probing</caption><thead><tr><th>background</th>"
            "<th>scheme</th><th>FG Mb/s</th><th>BG Mb/s</th><th>Jain</th><th>FG done in (s)</th>"
            "<th>paper FG / BG Mb/s</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>", _cycles_table(schemes)]


def _cycles_table(schemes: list[dict]) -> str:
    """Each scheme's probe-transfer cycles: what the probe saw, what OPS chose, what was used."""
    rows = []
    for s in schemes:
        cycles = [d for d in s.get("decisions") or [] if isinstance(d, dict)]
        if not cycles:
            continue
        seq = "; ".join(f"{_e(d.get('class') or '?')} ({_num(d.get('probe_ms'), 0)} ms) -> {_e(d.get('cca'))} "
                        f"{_num(d.get('mbps'), 0)}" for d in cycles)
        right = s.get("ops_right")
        rows.append(f"<tr><td class=\"mono\">{_e(s.get('background'))}</td><td>{_e(s.get('scheme'))}</td>"
                    f"<td class=\"num\">{len(cycles)}</td><td class=\"num\">"
                    f"{_pct(right) if _finite(right) else '–'}</td><td class=\"small\">{seq}</td></tr>")
    if not rows:
        return ""
    return ("<table class=\"data\"><caption>Figure 29 cycles (probe w s, classify, decide, transfer): the "
            "class the probe's window was taken for and its mean RTT, the CCA used and its Mb/s. 'OPS right' is "
            "the share of cycles whose decision is the one the true background leads to (a fixed scheme ignores "
            "the decision)</caption><thead><tr><th>background</th><th>scheme</th><th>cycles</th>"
            "<th>OPS right (%)</th><th>class (probe mean) -> CCA Mb/s</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _fig29_plot(schemes: list[dict]) -> str | None:
    title = "OPS: adaptive vs fixed foreground CCA (Figure 29)"
    order = {name: i for i, name in enumerate(SCHEMES)}
    schemes = sorted(schemes, key=lambda s: (str(s.get("background")) != "cubic", order.get(s.get("scheme"), 9)))
    with _figure(height=2.8, frame={"left": 0.085, "right": 0.80, "bottom": 0.25, "top": 0.88}) as (fig, ax):
        seen: set[str] = set()
        for x, s in enumerate(schemes):
            for off, key, name, color in ((-0.2, "fg_mbps", "FG (ours)", PALETTE[0]), (0.2, "bg_mbps", "BG (ours)", PALETTE[1])):
                if _finite(s.get(key)):
                    ax.bar(x + off, s[key], 0.38, color=color, label=None if name in seen else name)
                    seen.add(name)
                ref = (s.get("paper") or {}).get(key)
                if _finite(ref):
                    ax.plot(x + off, ref, "D", color="black", ms=5, label=None if "paper" in seen else "paper")
                    seen.add("paper")
        if not seen:
            return None
        top = max([v for s in schemes for key in ("fg_mbps", "bg_mbps") for v in (s.get(key), (s.get("paper") or {}).get(key)) if _finite(v)], default=1)
        for x, s in enumerate(schemes):  # the fairness of each scheme, ours and the paper's, above its bars
            ax.text(x, top * 1.04, f"Jain {_num(s.get('jain'))}\n(paper {_num((s.get('paper') or {}).get('jain'))})",
                    ha="center", va="bottom", fontsize=6.5)
        ax.set_ylim(0, top * 1.3)
        ax.set_xticks(range(len(schemes)), [f"BG {s.get('background')}\n{s.get('scheme')}" for s in schemes],
                      fontsize=7)
        _decorate(ax, title, "background traffic and foreground scheme", "throughput (Mb/s)")
        return _titled(_to_svg(fig, "ops-fig29"), title)


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


def _titled(svg: str, title: str) -> str:
    """Give the SVG a <title> element (screen readers, tooltips) besides the drawn title."""
    end = svg.index(">", svg.index("<svg")) + 1
    return f"{svg[:end]}<title>{_e(title)}</title>{svg[end:]}"
