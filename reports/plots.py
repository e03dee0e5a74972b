"""Report figures, rendered by matplotlib into inline SVG strings.

Figures are built with matplotlib.figure.Figure on an explicit Agg canvas, never through pyplot, so
rendering keeps no global figure registry and cannot leak figures between reports. Text stays text
in the SVG (svg.fonttype "none"): it is searchable, smaller, and WeasyPrint sets it in the page font.
The studies draw with the same kit: new_figure, decorate, to_svg, and RC, PALETTE and WIDTH_IN.
"""
from __future__ import annotations

import contextlib
import html
import io
import re
from typing import Iterator, Sequence

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from longhaul.collectors.store.reader import TrialSeries
from longhaul.collectors.store.records import CellEntry
from longhaul.reports.fmt import num

WIDTH_IN, HEIGHT_IN = 7.2, 2.3
# Time-series axes share one fixed frame (legend outside on the right) so that the figures of a
# cell line up vertically and their time axes can be compared by eye.
TIME_FRAME = {"left": 0.085, "right": 0.80, "bottom": 0.19, "top": 0.88}
TRIAL_STYLES = ("-", "--", ":", "-.")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
RC = {"font.size": 8.5, "axes.titlesize": 10, "axes.titleweight": "bold", "legend.fontsize": 7.5,
      "svg.fonttype": "none", "font.family": "DejaVu Sans"}


def flow_colors(names: Sequence[str]) -> dict[str, str]:
    """One colour per flow name for the whole report, so "fg" looks the same in every figure."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(names))}


def throughput_timeseries(cell_id: str, trials: list[tuple[int, TrialSeries]],
                          colors: dict[str, str]) -> str | None:
    """Aggregate throughput per flow over time: colour = flow, line style = trial."""
    drawn = [(k, s) for k, s in trials if s.throughput]
    if not drawn:
        return None
    with new_figure() as (fig, ax):
        for i, (k, series) in enumerate(drawn):
            for flow, (t, v) in series.throughput.items():
                ax.plot(t, v, TRIAL_STYLES[i % len(TRIAL_STYLES)], color=colors.get(flow, "k"), lw=1.0)
        flows = list(dict.fromkeys(f for _, s in drawn for f in s.throughput))
        # Legend by proxy: one entry per flow (colour) and per trial (style), not flows x trials.
        for flow in flows:
            ax.plot([], [], "-", color=colors.get(flow, "k"), lw=2, label=flow)
        for i, (k, _) in enumerate(drawn):
            ax.plot([], [], TRIAL_STYLES[i % len(TRIAL_STYLES)], color="0.3", lw=1.0, label=f"trial {k}")
        decorate(ax, f"Throughput over time: {cell_id}", "time since trial start (s)",
                  "throughput (Mb/s)")
        ax.set_ylim(bottom=0)
        return to_svg(fig, f"thr-{cell_id}")


def rtt_timeseries(cell_id: str, trials: list[tuple[int, TrialSeries]],
                   idle_ms: float | None) -> str | None:
    """Probe RTT per trial, with the idle (empty-path) RTT as the floor it inflates from."""
    drawn = [(k, s) for k, s in trials if s.rtt is not None and s.rtt[0].size]
    if not drawn:
        return None
    with new_figure() as (fig, ax):
        for i, (k, series) in enumerate(drawn):
            ax.plot(*series.rtt, TRIAL_STYLES[i % len(TRIAL_STYLES)], color=PALETTE[i % len(PALETTE)],
                    lw=1.0, label=f"trial {k}")
        if idle_ms is not None:
            ax.axhline(idle_ms, color="black", ls="--", lw=1.0, label=f"idle RTT\n({idle_ms:.1f} ms)")
        decorate(ax, f"RTT over time: {cell_id}", "time since trial start (s)", "RTT (ms)")
        return to_svg(fig, f"rtt-{cell_id}")


def inflight_timeseries(cell_id: str, trial: int, series: TrialSeries, colors: dict[str, str],
                        bdp_bytes: float | None) -> str | None:
    """Bytes in flight per TCP flow (summed over its sockets) against the path's BDP."""
    if not series.inflight:
        return None
    with new_figure() as (fig, ax):
        for flow, (t, v) in series.inflight.items():
            ax.plot(t, v / 1e6, color=colors.get(flow, "k"), lw=0.9, label=f"{flow}, trial {trial}")
        if bdp_bytes:
            ax.axhline(bdp_bytes / 1e6, color="black", ls="--", lw=1.0,
                       label=f"BDP\n({bdp_bytes / 1e6:.1f} MB)")
        decorate(ax, f"Bytes in flight (tcp_info): {cell_id}", "time since trial start (s)",
                  "bytes in flight (MB)")
        ax.set_ylim(bottom=0)
        return to_svg(fig, f"inf-{cell_id}")


def flow_rtt_timeseries(cell_id: str, trial: int, series: TrialSeries, colors: dict[str, str],
                        idle_ms: float | None) -> str | None:
    """Smoothed RTT per TCP flow from tcp_info (the largest of its sockets'), seed 004's view."""
    if not series.srtt:
        return None
    with new_figure() as (fig, ax):
        for flow, (t, v) in series.srtt.items():
            ax.plot(t, v, color=colors.get(flow, "k"), lw=0.9, label=f"{flow}, trial {trial}")
        if idle_ms is not None:
            ax.axhline(idle_ms, color="black", ls="--", lw=1.0, label=f"idle RTT\n({idle_ms:.1f} ms)")
        decorate(ax, f"sRTT per flow (tcp_info): {cell_id}", "time since trial start (s)", "sRTT (ms)")
        return to_svg(fig, f"srtt-{cell_id}")


def flow_retrans_timeseries(cell_id: str, trial: int, series: TrialSeries, colors: dict[str, str]) -> str | None:
    """Retransmitted segments per second per TCP flow (loss as the sender sees it)."""
    if not series.retrans or not any(v.sum() for _, v in series.retrans.values()):
        return None
    with new_figure() as (fig, ax):
        for flow, (t, v) in series.retrans.items():
            ax.step(t, v, where="post", color=colors.get(flow, "k"), lw=0.9, label=f"{flow}, trial {trial}")
        decorate(ax, f"Retransmissions per flow (tcp_info): {cell_id}", "time since trial start (s)",
                  "retransmitted (segments/s)")
        ax.set_ylim(bottom=0)
        return to_svg(fig, f"rtx-{cell_id}")


def throughput_bars(cells: list[CellEntry], colors: dict[str, str]) -> str | None:
    """Mean throughput per cell and flow, error bars = std over repeats, paper values as markers."""
    groups = [c for c in cells if c.stats and c.stats.flows]
    if not groups:
        return None
    names = list(colors)
    width = 0.8 / max(1, max(len(c.stats.flows) for c in groups))
    with new_figure(height=HEIGHT_IN + 0.5, frame=None) as (fig, ax):
        seen: set[str] = set()
        for x, cell in enumerate(groups):
            flows = [n for n in names if n in cell.stats.flows]
            refs = (cell.reference or {}).get("values") or {}
            for j, name in enumerate(flows):
                pos = x + (j - (len(flows) - 1) / 2) * width
                st = cell.stats.flows[name]
                # one repeat has no spread (the store's std 0.0 for n = 1 is not a measurement)
                spread = (st.std_mbps or 0) if st.n >= 2 else None
                ax.bar(pos, st.mean_mbps, width * 0.9, yerr=spread,
                       capsize=3, color=colors[name], label=None if name in seen else name)
                seen.add(name)
                if num(refs.get(name)) is not None:
                    ax.plot(pos, refs[name], "D", color="black", ms=5,
                            label=None if "paper" in seen else "paper (reference)")
                    seen.add("paper")
        ax.set_xticks(range(len(groups)), [_bar_label(c) for c in groups])
        decorate(ax, "Mean throughput per cell and flow (error bars: std over repeats)",
                  "cell", "throughput (Mb/s)", outside=False)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # headroom so the legend row never covers a bar
        return to_svg(fig, "bars")


def _bar_label(cell: CellEntry) -> str:
    labels = cell.labels or {}
    extra = " · ".join(str(labels[k]) for k in ("column", "mode") if labels.get(k))
    return f"{cell.id}\n{extra}" if extra else str(cell.id)


@contextlib.contextmanager
def new_figure(height: float = HEIGHT_IN, frame: dict | None = TIME_FRAME
            ) -> Iterator[tuple[Figure, object]]:
    """A figure on an explicit Agg canvas; frame=None lets tight_layout place the axes instead."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, height), layout=None if frame else "tight")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        if frame:
            fig.subplots_adjust(**frame)
        try:
            yield fig, ax
        finally:
            fig.clear()  # releases artists now rather than at the next GC pass


def decorate(ax, title: str, xlabel: str, ylabel: str, outside: bool = True) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3, lw=0.5)
    if outside:  # outside the axes the legend can never hide data
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.legend(loc="upper center", ncol=len(ax.get_legend_handles_labels()[0]), framealpha=0.9)


def to_svg(fig: Figure, uid: str, title: str | None = None) -> str:
    """The figure as inline SVG; `title` adds a <title> element (screen readers, tooltips)."""
    buf = io.StringIO()
    # hashsalt + no date make the output reproducible for the same data.
    with matplotlib.rc_context({"svg.hashsalt": uid}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: invalid inside HTML
    if title is not None:
        end = svg.index(">") + 1
        svg = f"{svg[:end]}<title>{html.escape(title)}</title>{svg[end:]}"
    return _prefix_ids(svg, re.sub(r"[^A-Za-z0-9_-]", "_", uid))


def _prefix_ids(svg: str, prefix: str) -> str:
    """Make ids unique per figure: several inline SVGs share one HTML id namespace."""
    ids = set(re.findall(r'\sid="([^"]+)"', svg))
    svg = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{prefix}-{m.group(2)}"', svg)
    return re.sub(r'(url\(#|href="#)([^")]+)',
                  lambda m: f"{m.group(1)}{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(0),
                  svg)
