"""What the bottleneck shaper actually sends, read from its own counters (tc -s -j).

While the shaper is saturated it sends at exactly its rate, so the byte counter's slope over
windows in which it stayed saturated is the achieved bottleneck rate, in the frame bytes the shaper
meters, with no TCP dynamics in the way. Saturated, between two samples: the queue had a backlog,
or the shaper held packets back for want of tokens (its overlimits counter grew); the second
matters for small queues (a 1-BDP queue at 0.4 ms is a few dozen packets and is often empty at
the instant of a sample although the link never idles).
"""

from __future__ import annotations

import json
import statistics
import threading
import time

from ..hardware.executor import Executor


def tbf_counters(text: str) -> tuple[int, int, int] | None:
    """(bytes sent, backlog bytes, overlimits) of the tbf in `tc -s -j qdisc show` output."""
    for qdisc in json.loads(text or "[]"):
        if qdisc.get("kind") == "tbf":
            return int(qdisc.get("bytes", 0)), int(qdisc.get("backlog", 0)), int(qdisc.get("overlimits", 0))
    return None


def _saturated(samples: list[tuple], i: int) -> bool:
    if samples[i][2] > 0:
        return True
    return i > 0 and len(samples[i]) > 3 and samples[i][3] > samples[i - 1][3]


def backlogged_rate(samples: list[tuple], window_s: float = 1.0) -> float | None:
    """Median Mb/s over consecutive windows of `window_s` in which the shaper stayed saturated.
    samples: (t, bytes, backlog) or (t, bytes, backlog, overlimits)."""
    rates, start = [], 0
    for end in range(len(samples)):
        if not _saturated(samples, end):
            start = end + 1
            continue
        if start < len(samples) and samples[end][0] - samples[start][0] >= window_s:
            t0, b0 = samples[start][:2]
            t1, b1 = samples[end][:2]
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
