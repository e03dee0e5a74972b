"""Report section "Throughput profiles" (seed 001): profiles, box plots, sigmoid fits with tauT,
Poincare maps, Lyapunov exponents, throughput vs exponent and the transport selection per RTT.

Shown only for runs that sweep the RTT (at least 3 distinct RTTs among foreground TCP trials). The
numbers are study.analyse()'s, the analysis `longhaul analyze profile` prints; this module only
draws them. The section must never break the report, so an analysis failure becomes a note in the
section. SECTION is the reports.sections.Section; its template, throughput_profile.html.j2, lies
beside this file.
"""
from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.studies.throughput_profile import dynamics as dyn
from longhaul.collectors.studies.throughput_profile.analysis import (
    box_stats,
    buffer_rank,
    distinct_rtts,
    load_trace,
    trials_from_store,
)
from longhaul.collectors.studies.throughput_profile.paper import PAPER_TAU_T, paper_tau_t
from longhaul.collectors.studies.throughput_profile.study import ProfileAnalysis, analyse
from longhaul.collectors.studies.throughput_profile.transport_selection import selection_table, table_rtts
from longhaul.reports.fmt import DASH
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, to_svg
from longhaul.reports.sections import figure

log = logging.getLogger(__name__)
MIN_RTTS = 3
PAPER_RTTS = (11.8, 183.0)  # seed 001 Figures 12-13 compare a short and a long path
# Point clouds of a full sweep are ~10^4 markers per figure: as vector SVG that is megabytes per
# figure, so the clouds (only) are embedded as an image; axes, text and legends stay vector.
RASTER, RASTER_DPI = True, 150


class ThroughputProfileSection:
    """Seed 001's throughput profiles of an RTT sweep."""

    name = "throughput-profile"
    template = Path(__file__).with_name("throughput_profile.html.j2")

    def applies(self, store: StoredRun) -> bool:
        try:
            trials = trials_from_store(store)
        except Exception:  # noqa: BLE001 - an unreadable store is the rest of the report's business
            return False
        return len(distinct_rtts(trials)) >= MIN_RTTS

    def context(self, store: StoredRun) -> dict:
        try:
            return {"error": None, **_context(analyse(trials_from_store(store)))}
        except Exception as exc:  # noqa: BLE001 - the report must survive a bug in one analysis
            log.exception("throughput-profile section failed")
            return {"error": f"The throughput-profile analysis failed: {exc}"}


SECTION = ThroughputProfileSection()


def _context(a: ProfileAnalysis) -> dict:
    profiles, fits, scale, rtts = a.profiles, a.fits, a.capacity_mbps, a.rtts_ms
    ccas = sorted({c.cca for c in profiles})
    buffers = sorted({c.buffer for c in profiles}, key=buffer_rank)
    streams = sorted({c.streams for c in profiles})
    traced = [t for t in a.trials if t.trace is not None]
    figures = []
    for cca in ccas:
        figures.append(figure(_profile_plot(cca, profiles, buffers, scale),
                              f"{cca}: mean throughput over repeats vs RTT, one line per stream count, one "
                              f"panel per buffer; bars: ±1 std; dashed: the bottleneck rate."))
        figures.append(figure(_box_plot(cca, profiles, buffers, streams),
                              f"{cca}: distribution of the repeats' average throughput per RTT (box: "
                              f"quartiles, whiskers: 1.5 IQR, dots: outliers), fewest and most streams."))
    return {
        "intro": {"trials": len(a.trials), "configs": len(profiles), "rtts": ", ".join(f"{r:g}" for r in rtts),
                  "ccas": ", ".join(ccas), "traced": len(traced), "scale": f"{scale:.0f}"},
        "profiles": figures,
        "tau": _tau_table(fits, ccas, buffers, streams),
        "tau_figure": figure(_tau_plot(fits, ccas, buffers, streams),
                             "Transition RTT tauT vs stream count per buffer (as seed 001 Figure 10): the "
                             "profile is concave up to tauT and convex beyond it. Hollow squares, dotted: "
                             "seed 001's CUBIC values as its text gives them (section 2.3)."),
        "fit_figures": [figure(_fit_plot(cca, fits, buffers, streams),
                               f"{cca}: scaled profile (throughput / {scale:.0f} Mb/s) with the concave "
                               f"sigmoid fit (solid) up to tauT and the convex fit (dashed) from it; dotted "
                               f"line: tauT (seed 001 Figure 9).") for cca in ccas],
        "dynamics": _dynamics(a, ccas, buffers) if traced else None,
        "selection": _selection(profiles, rtts),
    }


def _dynamics(a: ProfileAnalysis, ccas, buffers) -> dict:
    big = buffers[-1]
    pair = _paper_pair(a.rtts_ms)
    figures = []
    for cca in ccas:
        chosen = [t for t in a.trials if t.cca == cca and t.buffer == big and t.rtt_ms in pair]
        if not any(t.trace is not None for t in chosen):
            continue
        figures.append(figure(_poincare_plot(cca, chosen, pair),
                              f"{cca}, {big} buffer: Poincaré maps X(i+1) vs X(i) of the first trace of "
                              f"each stream count; left: every stream separately, right: aggregate."))
        figures.append(figure(_lyapunov_plot(cca, chosen, pair),
                              f"{cca}, {big} buffer: per-point Lyapunov exponents ln|dM/dX| of the "
                              f"first aggregate trace of each stream count, dM/dX from successive points (X(i+2)-X(i+1))/(X(i+1)-X(i)); "
                              f"compact and near zero is stable (seed 001 Figure 13)."))
    per_trace = [d for d in a.traces or [] if d.trial.buffer == big]
    rho = dyn.throughput_vs_exponent(per_trace)["spearman"]
    note = "" if rho is None else f" Spearman rank correlation over traces: {rho:+.2f}."
    if per_trace:
        figures.append(figure(_exponent_plot(per_trace, ccas, a.rtts_ms),
                              f"Average throughput vs the trace's Lyapunov exponent (mean ln|dM/dX|, dM/dX "
                              f"from the nearest state), {big} buffer, every trace (seed 001 Figure 14): "
                              f"section 4.2 expects throughput to fall as the exponent rises.{note}"))
    return {"buffer": big, "pair": [f"{r:g}" for r in pair], "figures": figures}


def _selection(profiles, rtts) -> list[dict]:
    rows = []
    for s in selection_table(profiles, table_rtts(rtts)):
        b, r = s.best, s.runner_up
        rows.append({"rtt": f"{s.rtt_ms:g}", "how": "measured" if b.bracket_ms[0] == b.bracket_ms[1] else "interpolated",
                     "best": b.config.label, "expected": f"{b.expected_mbps:.0f}",
                     "ci": f"{b.ci_mbps[0]:.0f}–{b.ci_mbps[1]:.0f}" if b.ci_mbps else DASH,
                     "spread": f"{b.p10_mbps:.0f}–{b.p90_mbps:.0f}",
                     "runner_up": f"{r.config.label} ({r.expected_mbps:.0f})" if r else DASH,
                     "clear_cut": DASH if s.clear is None else "yes" if s.clear else "no"})
    return rows


def _tau_table(fits, ccas, buffers, streams) -> dict:
    """tauT per (cca, buffer) row and stream-count column; "≥"/"≤" mark a one-sided profile; in
    brackets seed 001's value where its text gives one (paper.py)."""
    rows = []
    for cca in ccas:
        for b in buffers:
            cells = []
            for n in streams:
                f = _lookup(fits, cca, b, n)
                mark = "" if f is None else {"concave": "≥ ", "convex": "≤ "}.get(f.kind, "")
                paper = paper_tau_t(cca, b, n)
                cells.append((DASH if f is None else f"{mark}{f.tau_t_ms:g}") + ("" if paper is None else f" ({paper:g})"))
            rows.append({"cca": cca, "buffer": b, "cells": cells})
    return {"streams": [f"{n} stream{'s' * (n > 1)}" for n in streams], "rows": rows}


# ---- figures ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _figure(ncols: int, nrows: int = 1, height: float = 2.5):
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, height * nrows), layout="constrained", dpi=RASTER_DPI)
        FigureCanvasAgg(fig)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        try:
            yield fig, axes
        finally:
            fig.clear()


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3, lw=0.5)


def _streams_colors(streams) -> dict:
    """One colour per stream count in every figure; a colour ramp once the palette runs out."""
    streams = sorted(streams)
    if len(streams) <= len(PALETTE):
        return {n: PALETTE[i] for i, n in enumerate(streams)}
    cmap = matplotlib.colormaps["viridis"]
    return {n: cmap(i / (len(streams) - 1) * 0.85) for i, n in enumerate(streams)}


def _profile_plot(cca, profiles, buffers, scale) -> str:
    streams = sorted({c.streams for c in profiles if c.cca == cca})
    colors = _streams_colors(streams)
    with _figure(len(buffers)) as (fig, axes):
        for ax, b in zip(axes, buffers):
            for c, p in profiles.items():
                if c.cca == cca and c.buffer == b:
                    ax.errorbar(p.rtt_ms, p.mean, yerr=p.std, marker="o", ms=3, lw=1, capsize=2,
                                color=colors[c.streams], label=f"{c.streams}")
            ax.axhline(scale, color="0.3", ls="--", lw=0.8, label="bottleneck")
            ax.set_ylim(0, scale * 1.08)
            _label(ax, f"buffer {b}", "RTT (ms)", "mean throughput (Mb/s)")
        axes[-1].legend(title="streams", loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
        fig.suptitle(f"Throughput profile: {cca}", fontweight="bold")
        return to_svg(fig, f"tp-profile-{cca}")


def _box_plot(cca, profiles, buffers, streams) -> str:
    shown = sorted({streams[0], streams[-1]})
    colors = _streams_colors(streams)
    with _figure(len(buffers)) as (fig, axes):
        for ax, b in zip(axes, buffers):
            rtts = sorted({float(r) for c, p in profiles.items() if c.cca == cca and c.buffer == b for r in p.rtt_ms})
            for k, n in enumerate(shown):
                p = _lookup(profiles, cca, b, n)
                if p is None:
                    continue
                stats = []
                for r, s in zip(p.rtt_ms, p.samples):
                    st = box_stats(s)
                    stats.append({"med": st["median"], "q1": st["q1"], "q3": st["q3"], "whislo": st["whisker_low"],
                                  "whishi": st["whisker_high"], "fliers": st["outliers"], "label": f"{r:g}"})
                pos = [rtts.index(float(r)) + (k - (len(shown) - 1) / 2) * 0.38 for r in p.rtt_ms]
                color = colors[n]
                ax.bxp(stats, positions=pos, widths=0.32, patch_artist=True,
                       boxprops={"facecolor": color, "edgecolor": color, "alpha": 0.6},
                       whiskerprops={"color": color}, capprops={"color": color},
                       medianprops={"color": "black"}, flierprops={"marker": ".", "markersize": 3})
            ax.set_xticks(range(len(rtts)), [f"{r:g}" for r in rtts], fontsize=7,
                          rotation=45 if len(rtts) > 4 else 0)
            ax.set_ylim(bottom=0)
            _label(ax, f"buffer {b}", "RTT (ms)", "throughput (Mb/s)")
        handles = [Patch(color=colors[n], alpha=0.6, label=f"{n} stream{'s' * (n > 1)}") for n in shown]
        axes[-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
        fig.suptitle(f"Throughput box plots: {cca}", fontweight="bold")
        return to_svg(fig, f"tp-box-{cca}")


def _lookup(by_config: dict, cca, buffer, streams):
    """The value of the (cca, buffer, streams) configuration, whatever else the key carries."""
    return next((v for c, v in by_config.items() if (c.cca, c.buffer, c.streams) == (cca, buffer, streams)), None)


def _fit_plot(cca, fits, buffers, streams) -> str:
    shown = sorted({streams[0], streams[-1]})
    colors = _streams_colors(streams)
    with _figure(len(buffers)) as (fig, axes):
        for ax, b in zip(axes, buffers):
            for k, n in enumerate(shown):
                f = _lookup(fits, cca, b, n)
                if f is None:
                    continue
                color = colors[n]
                ax.plot(f.rtt_ms, f.scaled, "o", ms=4, color=color, label=f"{n} str. (tauT {f.tau_t_ms:g})")
                if f.concave:
                    x = np.linspace(f.rtt_ms[0], f.tau_t_ms, 60)
                    ax.plot(x, f.concave(x), "-", color=color, lw=1.2)
                if f.convex:
                    x = np.linspace(f.tau_t_ms, f.rtt_ms[-1], 60)
                    ax.plot(x, f.convex(x), "--", color=color, lw=1.2)
                ax.axvline(f.tau_t_ms, color=color, ls=":", lw=1)
            ax.set_ylim(0, 1.02)
            _label(ax, f"buffer {b}", "RTT (ms)", "scaled throughput")
            ax.legend(loc="lower left", fontsize=6.5, frameon=False)
        fig.suptitle(f"Sigmoid fits and transition RTT: {cca}", fontweight="bold")
        return to_svg(fig, f"tp-fit-{cca}")


def _tau_plot(fits, ccas, buffers, streams) -> str:
    with _figure(len(ccas)) as (fig, axes):
        for ax, cca in zip(axes, ccas):
            for k, b in enumerate(buffers):
                color = PALETTE[k % len(PALETTE)]
                pts = sorted((c.streams, f.tau_t_ms) for c, f in fits.items() if c.cca == cca and c.buffer == b)
                if pts:
                    ax.plot(*zip(*pts), "o-", ms=4, lw=1, color=color, label=b)
                paper = sorted((n, v) for n, v in PAPER_TAU_T.get((cca, b), {}).items() if n in streams)
                if pts and paper:                 # seed 001's text, where it gives values
                    ax.plot(*zip(*paper), "s:", ms=4, lw=0.8, color=color, mfc="none", label=f"{b}, seed 001")
            ax.set_xticks(streams)
            _label(ax, cca, "parallel streams", "tauT (ms)")
            ax.legend(title="buffer", fontsize=6.5, frameon=False)
        fig.suptitle("Transition RTT per configuration", fontweight="bold")
        return to_svg(fig, "tp-tau")


def _poincare_plot(cca, chosen, pair) -> str:
    streams = sorted({t.streams for t in chosen})
    colors = _streams_colors(streams)
    with _figure(2, 2, height=2.4) as (fig, axes):
        for row, rtt in enumerate(pair):
            sep, agg = axes[2 * row], axes[2 * row + 1]
            for n in streams:
                trace = _first_trace(chosen, rtt, n)
                if trace is None:
                    continue
                for i, series in enumerate(trace.streams.values() or [trace.aggregate]):
                    sep.plot(*dyn.poincare(series), ".", ms=2.5, color=colors[n], label=None if i else f"{n}",
                             rasterized=RASTER)
                agg.plot(*dyn.poincare(trace.aggregate), ".", ms=3, color=colors[n], label=f"{n}",
                         rasterized=RASTER)
            for ax, kind in ((sep, "per stream"), (agg, "aggregate")):
                _diagonal(ax)
                _label(ax, f"{rtt:g} ms, {kind}", "X(i) throughput (Mb/s)", "X(i+1) (Mb/s)")
                ax.legend(title="streams", loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, markerscale=2.5)
        fig.suptitle(f"Poincaré maps: {cca}", fontweight="bold")
        return to_svg(fig, f"tp-poincare-{cca}")


def _diagonal(ax) -> None:
    lo, hi = 0.0, max(ax.get_xlim()[1], ax.get_ylim()[1])
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.7, ls="--", label="X(i+1) = X(i)")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)


def _lyapunov_plot(cca, chosen, pair) -> str:
    streams = sorted({t.streams for t in chosen})
    colors = _streams_colors(streams)
    rng = np.random.default_rng(0)  # fixed jitter: the same data gives the same figure
    with _figure(2) as (fig, axes):
        for ax, rtt in zip(axes, pair):
            for k, n in enumerate(streams):
                trace = _first_trace(chosen, rtt, n)
                v = dyn.successive_exponents(trace.aggregate).values if trace else np.array([])
                ax.plot(k + rng.uniform(-0.25, 0.25, v.size), v, ".", ms=2.5, color=colors[n], label=f"{n}",
                        rasterized=RASTER)
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(range(len(streams)), [str(n) for n in streams])
            _label(ax, f"{rtt:g} ms", "parallel streams", "ln|dM/dX| (per 1 s step)")
        axes[-1].legend(title="streams", loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, markerscale=2.5)
        fig.suptitle(f"Lyapunov exponents: {cca}", fontweight="bold")
        return to_svg(fig, f"tp-lyap-{cca}")


def _exponent_plot(per_trace, ccas, rtts) -> str:
    cmap = matplotlib.colormaps["plasma"]
    colors = {r: cmap(i / max(1, len(rtts) - 1) * 0.85) for i, r in enumerate(rtts)}
    with _figure(len(ccas)) as (fig, axes):
        for ax, cca in zip(axes, ccas):
            for r in rtts:
                pts = [(d.exponent, d.mean_mbps) for d in per_trace
                       if d.trial.cca == cca and d.trial.rtt_ms == r and math.isfinite(d.exponent)]
                if pts:
                    ax.plot(*zip(*pts), "o", ms=3, alpha=0.8, color=colors[r], label=f"{r:g}", rasterized=RASTER)
            ax.set_ylim(bottom=0)
            _label(ax, cca, "Lyapunov exponent (trace)", "average throughput (Mb/s)")
        axes[-1].legend(title="RTT (ms)", loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
        fig.suptitle("Throughput vs Lyapunov exponent", fontweight="bold")
        return to_svg(fig, "tp-exponent")


# ---- helpers -------------------------------------------------------------------------------------

def _first_trace(trials, rtt: float, streams: int):
    """The lowest repeat's trace: one trace per stream count keeps the figures legible."""
    for t in sorted(trials, key=lambda t: t.repeat):
        if t.rtt_ms == rtt and t.streams == streams and (trace := load_trace(t)) is not None:
            return trace
    return None


def _paper_pair(rtts: list[float]) -> tuple[float, float]:
    """The measured RTTs nearest (on a log scale) to the paper's 11.8 and 183 ms."""
    near = [min(rtts, key=lambda r: abs(math.log(max(r, 0.01) / p))) for p in PAPER_RTTS]
    return (near[0], near[1]) if near[0] != near[1] else (rtts[0], rtts[-1])
