"""Report section "Throughput profiles" (seed 001): profiles, box plots, sigmoid fits with tauT,
Poincare maps, Lyapunov exponents, throughput vs exponent and the transport selection per RTT.

Shown only for runs that sweep the RTT (at least 3 distinct RTTs among foreground TCP trials). The
section must never break the report, so an analysis failure becomes a note in the section.
"""
from __future__ import annotations

import contextlib
import html
import logging
import math

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from longhaul.collectors.studies.throughput_profile import dynamics as dyn
from longhaul.collectors.studies.throughput_profile.analysis import (box_stats, buffer_rank, build_profiles, capacity_of,
                                             distinct_rtts, load_trace, trials_from_store)
from longhaul.collectors.studies.throughput_profile.transition_rtt import fit_profiles
from longhaul.collectors.studies.throughput_profile.transport_selection import selection_table, table_rtts
from longhaul.reports.plots import PALETTE, RC, WIDTH_IN, _to_svg

log = logging.getLogger(__name__)
MIN_RTTS = 3
PAPER_RTTS = (11.8, 183.0)  # seed 001 Figures 12-13 compare a short and a long path
# Point clouds of a full sweep are ~10^4 markers per figure: as vector SVG that is megabytes per
# figure, so the clouds (only) are embedded as an image; axes, text and legends stay vector.
RASTER, RASTER_DPI = True, 150


def section(store) -> str | None:
    try:
        trials = trials_from_store(store)
    except Exception:  # noqa: BLE001 - an unreadable store is the rest of the report's business
        return None
    if len(distinct_rtts(trials)) < MIN_RTTS:
        return None
    try:
        return _render(trials)
    except Exception as exc:  # noqa: BLE001 - the report must survive a bug in one analysis
        log.exception("throughput-profile section failed")
        return _wrap([f'<p class="missing">The throughput-profile analysis failed: {_e(exc)}</p>'])


def _render(trials) -> str:
    profiles = build_profiles(trials)
    scale = capacity_of(trials, profiles)
    fits = fit_profiles(profiles, scale)
    ccas = sorted({c.cca for c in profiles})
    buffers = sorted({c.buffer for c in profiles}, key=buffer_rank)
    streams = sorted({c.streams for c in profiles})
    rtts = distinct_rtts(trials)
    traced = [t for t in trials if t.trace is not None]
    parts = [_intro(trials, profiles, scale, rtts, len(traced))]
    parts.append("<h3>Profiles</h3>")
    for cca in ccas:
        parts.append(_fig(_profile_plot(cca, profiles, buffers, scale),
                          f"{cca}: mean throughput over repeats vs RTT, one line per stream count, one "
                          f"panel per buffer; bars: ±1 std; dashed: the bottleneck rate."))
        parts.append(_fig(_box_plot(cca, profiles, buffers, streams),
                          f"{cca}: distribution of the repeats' average throughput per RTT (box: "
                          f"quartiles, whiskers: 1.5 IQR, dots: outliers), fewest and most streams."))
    parts.append("<h3>Transition RTT</h3>")
    parts.append(_tau_table(fits, ccas, buffers, streams))
    parts.append(_fig(_tau_plot(fits, ccas, buffers, streams),
                      "Transition RTT tauT vs stream count per buffer (as seed 001 Figure 10): the "
                      "profile is concave up to tauT and convex beyond it."))
    for cca in ccas:
        parts.append(_fig(_fit_plot(cca, fits, buffers, streams),
                          f"{cca}: scaled profile (throughput / {scale:.0f} Mb/s) with the concave "
                          f"sigmoid fit (solid) up to tauT and the convex fit (dashed) from it; dotted "
                          f"line: tauT (seed 001 Figure 9)."))
    if traced:
        parts.append(_dynamics(trials, ccas, buffers, rtts))
    parts.append(_selection(profiles, rtts))
    return _wrap(parts)


def _intro(trials, profiles, scale, rtts, n_traced) -> str:
    ccas = ", ".join(sorted({c.cca for c in profiles}))
    return (f"<p>{len(trials)} successful trials of {len(profiles)} configurations (variant, streams, "
            f"buffer) at RTTs {', '.join(f'{r:g}' for r in rtts)} ms; variants {_e(ccas)}; "
            f"{n_traced} with a per-second trace. The bottleneck is {scale:.0f} Mb/s, where seed 001 "
            f"measured 10 Gb/s connections: compare the shapes (concave then convex, where tauT lies, "
            f"which configuration wins), not the absolute rates. How to read this section: "
            f"docs/throughput-profiles.md.</p>")


def _dynamics(trials, ccas, buffers, rtts) -> str:
    big = buffers[-1]
    pair = _paper_pair(rtts)
    parts = ["<h3>Dynamics</h3>",
             f"<p>Poincaré maps plot each second's throughput against the previous one (seed 001 "
             f"section 4.1); a tight cluster on the diagonal is stable, a wide cloud means nearby "
             f"rates evolve into very different ones. Shown for the {_e(big)} buffer at "
             f"{pair[0]:g} and {pair[1]:g} ms.</p>"]
    for cca in ccas:
        chosen = [t for t in trials if t.cca == cca and t.buffer == big and t.rtt_ms in pair]
        if not any(t.trace is not None for t in chosen):
            continue
        parts.append(_fig(_poincare_plot(cca, chosen, pair),
                          f"{cca}, {big} buffer: Poincaré maps X(i+1) vs X(i) of the first trace of "
                          f"each stream count; left: every stream separately, right: aggregate."))
        parts.append(_fig(_lyapunov_plot(cca, chosen, pair),
                          f"{cca}, {big} buffer: per-point Lyapunov exponents ln|dM/dX| of the "
                          f"first aggregate trace of each stream count, dM/dX from successive points (X(i+2)-X(i+1))/(X(i+1)-X(i)); "
                          f"compact and near zero is stable (seed 001 Figure 13)."))
    per_trace, _ = dyn.analyse_traces([t for t in trials if t.buffer == big])
    rho = dyn.throughput_vs_exponent(per_trace)["spearman"]
    note = "" if rho is None else f" Spearman rank correlation over traces: {rho:+.2f}."
    if per_trace:
        parts.append(_fig(_exponent_plot(per_trace, ccas, rtts),
                          f"Average throughput vs the trace's Lyapunov exponent (mean ln|dM/dX|, dM/dX "
                          f"from the nearest state), {big} buffer, every trace (seed 001 Figure 14): "
                          f"section 4.2 expects throughput to fall as the exponent rises.{note}"))
    return "".join(parts)


def _selection(profiles, rtts) -> str:
    rows = []
    for s in selection_table(profiles, table_rtts(rtts)):
        b, r = s.best, s.runner_up
        ci = f"{b.ci_mbps[0]:.0f}–{b.ci_mbps[1]:.0f}" if b.ci_mbps else "–"
        how = "measured" if b.bracket_ms[0] == b.bracket_ms[1] else "interpolated"
        runner = f"{_e(r.config.label)} ({r.expected_mbps:.0f})" if r else "–"
        clear = "–" if s.clear is None else "yes" if s.clear else "no"
        rows.append(f"<tr><td class='num'>{s.rtt_ms:g}</td><td>{how}</td><td>{_e(b.config.label)}</td>"
                    f"<td class='num'>{b.expected_mbps:.0f}</td><td class='num'>{ci}</td>"
                    f"<td class='num'>{b.p10_mbps:.0f}–{b.p90_mbps:.0f}</td><td>{runner}</td><td>{clear}</td></tr>")
    head = ("<tr><th>RTT (ms)</th><th></th><th>best: cca / streams / buffer</th><th>expected Mb/s</th>"
            "<th>95% CI of mean</th><th>p10–p90 of trials</th><th>runner-up (Mb/s)</th><th>clear?</th></tr>")
    return ("<h3>Transport selection</h3><p>The configuration with the highest profile mean at each "
            "measured RTT and, interpolated linearly, halfway between them (seed 001 section 5). "
            "“Clear” means the runner-up is at least two standard errors behind. For any other RTT: "
            "<span class='mono'>longhaul advise --rtt MS --from RUN_DIR</span>.</p>"
            f"<table class='selection'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")


def _tau_table(fits, ccas, buffers, streams) -> str:
    head = "".join(f"<th>{n} stream{'s' * (n > 1)}</th>" for n in streams)
    rows = []
    for cca in ccas:
        for b in buffers:
            cells = []
            for n in streams:
                f = _lookup(fits, cca, b, n)
                mark = "" if f is None else {"concave": "≥ ", "convex": "≤ "}.get(f.kind, "")
                cells.append(f"<td class='num'>{'–' if f is None else f'{mark}{f.tau_t_ms:g}'}</td>")
            rows.append(f"<tr><td>{_e(cca)}</td><td>{_e(b)}</td>{''.join(cells)}</tr>")
    return (f"<table class='tau'><thead><tr><th>cca</th><th>buffer</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p class='caption'>tauT in ms per stream count "
            f"(columns). “≤ smallest RTT”: entirely convex, only the convex fit (seed 001 Figure 9, "
            f"default buffer); “≥ largest RTT”: concave over every measured RTT.</p>")


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
        return _to_svg(fig, f"tp-profile-{cca}")


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
        return _to_svg(fig, f"tp-box-{cca}")


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
        return _to_svg(fig, f"tp-fit-{cca}")


def _tau_plot(fits, ccas, buffers, streams) -> str:
    with _figure(len(ccas)) as (fig, axes):
        for ax, cca in zip(axes, ccas):
            for k, b in enumerate(buffers):
                pts = sorted((c.streams, f.tau_t_ms) for c, f in fits.items() if c.cca == cca and c.buffer == b)
                if pts:
                    ax.plot(*zip(*pts), "o-", ms=4, lw=1, color=PALETTE[k % len(PALETTE)], label=b)
            ax.set_xticks(streams)
            _label(ax, cca, "parallel streams", "tauT (ms)")
            ax.legend(title="buffer", fontsize=6.5, frameon=False)
        fig.suptitle("Transition RTT per configuration", fontweight="bold")
        return _to_svg(fig, "tp-tau")


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
        return _to_svg(fig, f"tp-poincare-{cca}")


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
        return _to_svg(fig, f"tp-lyap-{cca}")


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
        return _to_svg(fig, "tp-exponent")


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


def _fig(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _wrap(parts: list[str]) -> str:
    return ('<section id="throughput-profile"><h2>Throughput profiles (seed 001)</h2>'
            + "".join(parts) + "</section>")


def _e(value) -> str:
    return html.escape(str(value))
