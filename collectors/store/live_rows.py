"""A trial's provisional view while it runs: cells/<id>/trial-<k>/live.csv (format.LIVE_CSV), one
row per flow each second with its delivery rate from tcp_info and the probe's latest RTT, written
from the trial's own progress ticks (appliance/run/trial/drive.py), so that a reader of the store
(the console's live page) sees the trial second by second without asking the lab. It is not a
result: the senders' estimate of what was delivered, not what the receivers counted. The file is
removed once the trial's record (trial.json and its tables) is stored; a run killed mid-trial
leaves it in that trial's directory, which `run --resume` runs again."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from longhaul.collectors.store.format import LIVE_COLUMNS, LIVE_CSV
from longhaul.collectors.store.series import Series, read_rows

PERIOD_S = 1.0


class LiveRows:
    def __init__(self, trial_dir: Path, period_s: float = PERIOD_S):
        self.path = Path(trial_dir) / LIVE_CSV
        self.period_s = period_s
        self._next = 0.0
        self._fh = None

    def tick(self, elapsed: float, flows: dict[str, dict], rtt_ms: float | None) -> None:
        """A progress tick: written when a period has passed since the last row."""
        if elapsed < self._next:
            return
        self._next = math.floor(elapsed / self.period_s + 1) * self.period_s
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("w", newline="")
            csv.writer(self._fh).writerow(LIVE_COLUMNS)
        t = round(elapsed, 3)
        rows = [(t, flow, _num(v.get("mbps")), _num(rtt_ms)) for flow, v in flows.items()] or [(t, "", "", _num(rtt_ms))]
        csv.writer(self._fh).writerows(rows)
        self._fh.flush()                   # a reader sees each second as it is written

    def chained(self, then):
        """An on_tick that writes a row, then calls `then` (the terminal's progress)."""
        def on_tick(elapsed: float, flows: dict, rtt_ms: float | None) -> None:
            self.tick(elapsed, flows, rtt_ms)
            if then is not None:
                then(elapsed, flows, rtt_ms)
        return on_tick

    def close(self) -> None:
        """The trial is stored: its view goes."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.path.unlink(missing_ok=True)


def _num(value) -> str | float:
    return "" if value is None or not math.isfinite(value) else round(float(value), 3)


def load_live(trial_dir: Path) -> tuple[dict[str, Series], Series | None] | None:
    """(per-flow delivery rate, probe RTT) from a running trial's live.csv; None without one."""
    problems: list[str] = []
    rows = read_rows(Path(trial_dir) / LIVE_CSV, problems)
    if rows is None:
        return None
    flows: dict[str, list[tuple[float, float]]] = {}
    rtt: dict[float, float] = {}
    for row in rows:
        t, mbps, ms = _float(row.get("t_s")), _float(row.get("mbps")), _float(row.get("rtt_ms"))
        if t is None:
            continue                       # the line being written
        if row.get("flow") and mbps is not None:
            flows.setdefault(row["flow"], []).append((t, mbps))
        if ms is not None:
            rtt[t] = ms
    as_series = lambda pts: (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return ({f: as_series(pts) for f, pts in flows.items()},
            as_series(sorted(rtt.items())) if rtt else None)


def _float(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
