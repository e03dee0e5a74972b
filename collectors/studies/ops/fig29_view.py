"""The OPS section's Figure 29 part: fixed and adaptive foregrounds against each background, beside
the paper's, and each adaptive scheme's probe-transfer cycles (what the probe saw, what OPS chose)."""
from __future__ import annotations

from longhaul.collectors.studies.ops.paper import PAPER_FIG29, SCHEMES
from longhaul.reports.fmt import DASH, finite, fmt
from longhaul.reports.plots import PALETTE, decorate, new_figure, to_svg
from longhaul.reports.sections import figure


def selection(data: dict, notes: list[str]) -> dict | None:
    schemes = [s for s in data.get("schemes") or [] if isinstance(s, dict)]
    if not schemes:
        notes.append("fig29.json has no schemes")
        return None
    for s in schemes:  # the text's Jain values when the file leaves them out
        if not isinstance(s.get("paper"), dict):
            s["paper"] = {}
        if s["paper"].get("jain") is None:
            s["paper"]["jain"] = PAPER_FIG29.get((s.get("background"), s.get("scheme")), {}).get("jain")
    rows = [{"background": s.get("background"), "scheme": s.get("scheme"),
             "fg": fmt(s.get("fg_mbps"), 1), "bg": fmt(s.get("bg_mbps"), 1), "jain": fmt(s.get("jain"), 2),
             "paper_jain": fmt(s["paper"].get("jain"), 2), "completion": fmt(s.get("completion_s"), 0),
             "paper_fg": fmt(s["paper"].get("fg_mbps"), 1), "paper_bg": fmt(s["paper"].get("bg_mbps"), 1)}
            for s in schemes]
    return {"figure": figure(_fig29_plot(schemes), "Mean foreground (FG) and background (BG) throughput per "
                             "background and scheme, with the Jain index of the two; diamonds mark the paper's "
                             "throughputs where fig29.json gives them (the paper prints them only in the figure "
                             "image)."),
            "rows": rows, "cycles": _cycles(schemes)}


def _cycles(schemes: list[dict]) -> list[dict]:
    """Each scheme's probe-transfer cycles: what the probe saw, what OPS chose, what was used."""
    rows = []
    for s in schemes:
        cycles = [d for d in s.get("decisions") or [] if isinstance(d, dict)]
        if not cycles:
            continue
        steps = [{"cls": d.get("class") or "?", "probe_ms": fmt(d.get("probe_ms"), 0), "cca": d.get("cca"),
                  "mbps": fmt(d.get("mbps"), 0)} for d in cycles]
        right = s.get("ops_right")
        rows.append({"background": s.get("background"), "scheme": s.get("scheme"), "cycles": len(cycles),
                     "right": fmt(100 * right, 1) if finite(right) else DASH, "steps": steps})
    return rows


def _fig29_plot(schemes: list[dict]) -> str | None:
    title = "OPS: adaptive vs fixed foreground CCA (Figure 29)"
    order = {name: i for i, name in enumerate(SCHEMES)}
    schemes = sorted(schemes, key=lambda s: (str(s.get("background")) != "cubic", order.get(s.get("scheme"), 9)))
    with new_figure(height=2.8, frame={"left": 0.085, "right": 0.80, "bottom": 0.25, "top": 0.88}) as (fig, ax):
        seen: set[str] = set()
        for x, s in enumerate(schemes):
            for off, key, name, color in ((-0.2, "fg_mbps", "FG (ours)", PALETTE[0]), (0.2, "bg_mbps", "BG (ours)", PALETTE[1])):
                if finite(s.get(key)):
                    ax.bar(x + off, s[key], 0.38, color=color, label=None if name in seen else name)
                    seen.add(name)
                ref = (s.get("paper") or {}).get(key)
                if finite(ref):
                    ax.plot(x + off, ref, "D", color="black", ms=5, label=None if "paper" in seen else "paper")
                    seen.add("paper")
        if not seen:
            return None
        top = max([v for s in schemes for key in ("fg_mbps", "bg_mbps") for v in (s.get(key), (s.get("paper") or {}).get(key)) if finite(v)], default=1)
        for x, s in enumerate(schemes):  # the fairness of each scheme, ours and the paper's, above its bars
            ax.text(x, top * 1.04, f"Jain {fmt(s.get('jain'), 2)}\n(paper {fmt((s.get('paper') or {}).get('jain'), 2)})",
                    ha="center", va="bottom", fontsize=6.5)
        ax.set_ylim(0, top * 1.3)
        ax.set_xticks(range(len(schemes)), [f"BG {s.get('background')}\n{s.get('scheme')}" for s in schemes],
                      fontsize=7)
        decorate(ax, title, "background traffic and foreground scheme", "throughput (Mb/s)")
        return to_svg(fig, "ops-fig29", title)
