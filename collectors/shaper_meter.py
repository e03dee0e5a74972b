"""What the bottleneck shaper actually sends, read from its own counters (tc -s -j).

While the shaper's queue is never empty it sends at exactly its rate, so the byte counter's slope
over windows in which every sample saw a backlog is the achieved bottleneck rate, in the frame
bytes the shaper meters, with no TCP dynamics in the way.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

from ..hardware.executor import Executor


def tbf_counters(text: str) -> tuple[int, int] | None:
    """(bytes sent, backlog bytes) of the tbf in `tc -s -j qdisc show` output."""
    for qdisc in json.loads(text or "[]"):
        if qdisc.get("kind") == "tbf":
            return int(qdisc.get("bytes", 0)), int(qdisc.get("backlog", 0))
    return None


def backlogged_rate(samples: list[tuple[float, int, int]], window_s: float = 1.0) -> float | None:
    """Median Mb/s over consecutive windows of `window_s` in which every sample had a backlog."""
    rates, start = [], 0
    for end in range(len(samples)):
        if samples[end][2] == 0:
            start = end + 1
            continue
        if start < len(samples) and samples[end][0] - samples[start][0] >= window_s:
            t0, b0, _ = samples[start]
            t1, b1, _ = samples[end]
            rates.append((b1 - b0) * 8 / (t1 - t0) / 1e6)
            start = end
    return statistics.median(rates) if rates else None


class ShaperMeter:
    def __init__(self, executor: Executor, ifname: str, period_s: float = 0.2):
        self.executor = executor
        self.ifname = ifname
        self.period_s = period_s
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shaper-meter", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            res = self.executor.run(["tc", "-s", "-j", "qdisc", "show", "dev", self.ifname], check=False)
            counters = tbf_counters(res.stdout) if res.returncode == 0 else None
            if counters:
                self.samples.append((time.monotonic(), *counters))
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False
