"""The overview of a sweep too large for one page per cell inline (reports/render.py
MAX_CELL_SECTIONS): heat maps of each cell's results over the sweep's axes, to find the cells
worth opening. The axes are the cells' parameters that take more than one value; the two with
the most values span each map, the others make one panel per combination."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import matplotlib
import numpy as np

from longhaul.collectors.store.records import CellEntry, CellStats
from longhaul.reports.fmt import mean, num
from longhaul.reports.plots import RC, WIDTH_IN, new_figure, to_svg
from longhaul.reports.sections import Figure, figure

MAX_PANELS = 12             # beyond this many combinations of the other axes a map says nothing


@dataclass(frozen=True)
class Axis:
    key: str                # the parameter, e.g. "topology.rtt_ms"
    values: tuple           # in order: numbers ascending, other values as first met


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    colormap: str

    def of(self, cell: CellEntry) -> float | None:
        stats = cell.stats or CellStats()
        if self.name == "aggregate throughput":
            values = [num(s.mean_mbps) for s in stats.flows.values()]
            return sum(v for v in values if v is not None) if any(v is not None for v in values) else None
        if self.name == "Jain fairness":
            return num(stats.jain.mean) if stats.jain else None
        return mean(t.rtt.inflation_p95_ms for t in cell.ok_trials if t.rtt)


METRICS = (Metric("aggregate throughput", "Mb/s", "viridis"), Metric("Jain fairness", "", "magma"),
           Metric("RTT inflation p95", "ms", "cividis"))


def sweep_axes(cells: list[CellEntry]) -> list[Axis]:
    seen: dict[str, list] = {}
    for cell in cells:
        for key, value in (cell.params or {}).items():
            if value is not None and value not in seen.setdefault(key, []):
                seen[key].append(value)
    axes = [Axis(k, tuple(sorted(v) if all(isinstance(x, (int, float)) for x in v) else v))
            for k, v in seen.items() if len(v) > 1]
    return sorted(axes, key=lambda a: -len(a.values))


def heatmaps(cells: list[CellEntry]) -> tuple[list[Figure], str | None]:
    """One figure per metric that any cell has, and a note when the sweep cannot be mapped."""
    axes = sweep_axes(cells)
    if len(axes) < 2:
        return [], None
    x, y, rest = axes[0], axes[1], axes[2:]
    panels = list(product(*(a.values for a in rest)))
    if len(panels) > MAX_PANELS:
        return [], (f"The sweep's heat maps are left out: {len(panels)} combinations of "
                    f"{', '.join(a.key for a in rest)} would each need a panel.")
    where = {_key(cell, [x, y, *rest]): cell for cell in cells}
    out = []
    for metric in METRICS:
        grids = [_grid(where, metric, x, y, panel) for panel in panels]
        if all(np.isnan(g).all() for g in grids):
            continue
        out.append(figure(_draw(metric, x, y, rest, panels, grids),
                          f"{metric.name} per cell{f' ({metric.unit})' if metric.unit else ''}: "
                          f"{x.key} across, {y.key} down"
                          + (f", one panel per {' and '.join(a.key for a in rest)}" if rest else "")
                          + "; grey: no value. Each cell's own page is linked from the tables."))
    return out, None


def _key(cell: CellEntry, axes: list[Axis]) -> tuple:
    return tuple((cell.params or {}).get(a.key) for a in axes)


def _grid(where: dict, metric: Metric, x: Axis, y: Axis, panel: tuple) -> np.ndarray:
    grid = np.full((len(y.values), len(x.values)), np.nan)
    for (i, yv), (j, xv) in product(enumerate(y.values), enumerate(x.values)):
        cell = where.get((xv, yv, *panel))
        value = metric.of(cell) if cell is not None else None
        if value is not None:
            grid[i, j] = value
    return grid


def _draw(metric: Metric, x: Axis, y: Axis, rest: list[Axis], panels: list[tuple], grids: list[np.ndarray]) -> str:
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    finite = np.concatenate([g[np.isfinite(g)] for g in grids])
    lo, hi = float(finite.min()), float(finite.max())
    with new_figure(height=0.4 + 2.1 * rows, frame=None) as (fig, ax):
        fig.set_size_inches(WIDTH_IN, 0.4 + 2.1 * rows)
        fig.set_layout_engine("constrained")        # tight_layout cannot place a shared colour bar
        fig.delaxes(ax)
        image = None
        for k, (panel, grid) in enumerate(zip(panels, grids)):
            sub = fig.add_subplot(rows, cols, k + 1)
            image = sub.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower",
                               cmap=matplotlib.colormaps[metric.colormap].with_extremes(bad="#d0d0d0"),
                               vmin=lo, vmax=hi if hi > lo else lo + 1)
            sub.set_xticks(range(len(x.values)), [f"{v:g}" if isinstance(v, float) else str(v) for v in x.values],
                           fontsize=6, rotation=45 if len(x.values) > 6 else 0)
            sub.set_yticks(range(len(y.values)), [str(v) for v in y.values], fontsize=6)
            sub.set_title(", ".join(f"{a.key.rsplit('.', 1)[-1]}={v}" for a, v in zip(rest, panel)) or metric.name,
                          fontsize=7.5)
            if k % cols == 0:
                sub.set_ylabel(y.key.rsplit(".", 1)[-1], fontsize=7)
            if k >= len(panels) - cols:
                sub.set_xlabel(x.key.rsplit(".", 1)[-1], fontsize=7)
        if image is not None:
            fig.colorbar(image, ax=fig.axes, shrink=0.8, label=f"{metric.name} {metric.unit}".strip())
        return to_svg(fig, f"sweep-{metric.name.replace(' ', '-')}", f"{metric.name} over the sweep")


__all__ = ["RC", "Axis", "heatmaps", "sweep_axes"]
