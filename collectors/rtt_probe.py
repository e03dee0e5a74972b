"""RTT probe across the bottleneck, in seed 000's burst mode or at a fixed interval.

Burst mode runs one fping round (10 pings 1 ms apart) at the start of every second and records
their mean; a round still in flight when the next second starts is not doubled up. Interval mode
runs one long fping with a ping every N ms and parses its timestamped replies at the end.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..drivers import fping
from ..hardware.executor import CommandError, Executor

log = logging.getLogger(__name__)


@dataclass
class RttSample:
    t_s: float
    rtt_ms: float | None
    sent: int
    received: int
    mode: str


class RttProbe:
    def __init__(self, executor: Executor, target: str, mode: str = "burst", interval_ms: float = 10.0,
                 raw_path: Path | None = None):
        self.executor = executor
        self.target = target
        self.mode = mode
        self.interval_ms = interval_ms
        self.raw_path = raw_path
        self.samples: list[RttSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = None
        self._t0 = 0.0
        self._wall0 = 0.0

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._wall0 = time.time() - (time.monotonic() - t0)
        if self.mode == "burst":
            self._thread = threading.Thread(target=self._burst_loop, name="rtt-probe", daemon=True)
            self._thread.start()
        else:
            self._proc = self.executor.start(fping.interval_argv(self.target, self.interval_ms),
                                             label="fping", stdout=self.raw_path)

    def latest(self) -> float | None:
        if self.mode != "burst":
            return self._latest_interval_reply()
        for sample in reversed(self.samples):
            if sample.rtt_ms is not None:
                return sample.rtt_ms
        return None

    def _latest_interval_reply(self) -> float | None:
        """For the live display: the newest reply in fping's output so far (its tail only)."""
        if self.raw_path is None:
            return None
        try:
            with open(self.raw_path, "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 2048))
                tail = fh.read().decode(errors="replace")
        except OSError:
            return None
        for line in reversed(tail.splitlines()[1:]):     # the first may be cut
            reply = fping.parse_interval_line(line)
            if reply is not None:
                return reply.rtt_ms
        return None

    def _burst_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            t_s = time.monotonic() - self._t0
            try:
                res = self.executor.run(fping.burst_argv(self.target), timeout=5, check=False)
                burst = fping.parse_burst(res.stderr + res.stdout)
                self.samples.append(RttSample(round(t_s, 3), burst.mean_ms, len(burst.rtts_ms), burst.received, "burst"))
            except (ValueError, CommandError) as exc:
                log.warning("RTT probe round failed: %s", exc)
            next_at += 1.0
            while next_at < time.monotonic():  # a late round skips, it does not bunch up
                next_at += 1.0
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> list[RttSample]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        if self._proc:
            self._proc.stop(sig=2)  # SIGINT: fping prints its summary and exits
            self.samples = self._parse_interval_output(self._proc.read_stdout())
        return self.samples

    def _parse_interval_output(self, text: str) -> list[RttSample]:
        out = []
        for line in text.splitlines():
            reply = fping.parse_interval_line(line)
            if reply:
                out.append(RttSample(round(reply.timestamp - self._wall0, 3), reply.rtt_ms, 1, 1, "interval"))
        return out


def idle_rtt(executor: Executor, target: str, rounds: int = 3) -> float | None:
    """The lab's RTT with no traffic: the median of a few burst rounds' means."""
    means = []
    for _ in range(rounds):
        res = executor.run(fping.burst_argv(target), timeout=10, check=False)
        try:
            mean = fping.parse_burst(res.stderr + res.stdout).mean_ms
        except ValueError:
            mean = None
        if mean is not None:
            means.append(mean)
    if not means:
        return None
    means.sort()
    return means[len(means) // 2]
