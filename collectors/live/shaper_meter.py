"""What the bottleneck shaper actually sends, read from its own counters (the router OS says how:
tc's tbf on Linux, the Dummynet pipe on FreeBSD; hardware/routers/).

While the shaper is saturated it sends at exactly its rate, so the byte counter's slope over
windows in which it stayed saturated is the achieved bottleneck rate, in the frame bytes the shaper
meters, with no TCP dynamics in the way. Saturated, between two samples: the queue had a backlog,
or the shaper held packets back for want of tokens (its overlimits counter grew); the second
matters for small queues (a 1-BDP queue at 0.4 ms is a few dozen packets and is often empty at
the instant of a sample although the link never idles).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from longhaul.hardware.executors.process import Executor
from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.linux_tc import LinuxTc


def _busy(samples: list[tuple], i: int) -> bool:
    if samples[i][2] > 0:
        return True
    return i > 0 and len(samples[i]) > 3 and samples[i][3] > samples[i - 1][3]


def _saturated(samples: list[tuple], i: int) -> bool:
    """Busy up to sample i (a backlog at it, or tokens ran out since the last); an empty queue whose
    tokens stop running out after it is where the sources stopped and the queue drained, so the
    interval before it was partly idle (a drained last second read 1.2-6 Mb/s of a 10 Mb/s shaper
    where the meter samples every 1-3 s)."""
    if samples[i][2] > 0:
        return True
    return _busy(samples, i) and i + 1 < len(samples) and _busy(samples, i + 1)


# A sample's time is known only to within its read of the counters (0.3-1 s on a router VM under
# TCG, which then samples every 1.4 s): a window of two such samples reads 8-12 Mb/s off a 10 Mb/s
# shaper. A window spanning this many sampling intervals keeps that error to a few per cent.
MIN_INTERVALS = 3


def window_for(samples: list[tuple], window_s: float = 1.0) -> float:
    """window_s, or MIN_INTERVALS of the meter's median sampling interval where it samples slower."""
    gaps = sorted(b[0] - a[0] for a, b in zip(samples, samples[1:]))
    return max(window_s, MIN_INTERVALS * gaps[len(gaps) // 2]) if gaps else window_s


def backlogged_rate(samples: list[tuple], window_s: float = 1.0) -> float | None:
    """Median Mb/s over consecutive windows of `window_s` in which the shaper stayed saturated.
    samples: (t, bytes, backlog) or (t, bytes, backlog, overlimits)."""
    rates = saturated_windows(samples, window_s)
    return statistics.median(rates) if rates else None


def saturated_windows(samples: list[tuple], window_s: float = 1.0) -> list[float]:
    """The rate (Mb/s) of each consecutive window of `window_s` in which the shaper stayed saturated."""
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
    return rates


# one long-lived sampling loop on the router: a new SSH session per sample would cost a handshake
# each time, which on a slow router (a VM under TCG) takes the CPU the forwarding needs. The clock
# is read before and after tc (the second stamp marked "="): a fork and exec of tc takes 0.3-1 s on a
# VM under TCG, and a sample stamped only before it put a 1 s window's rate 15 % off.
# $3 is the router OS's own counter read (a constant of its module, with "$1" the interface)
_LOOP_SH = 'while :; do date +%s.%N; eval "$3"; date +=%s.%N; sleep "$2"; done'
LOOP = "longhaul-shaper-meter"       # the loop's name ($0)


def parse_samples(text: str, router: RouterOS = LinuxTc()) -> list[tuple[float, int, int, int]]:
    """(router time, bytes, backlog, overlimits) from the loop's output: a `date +%s.%N` line, the
    router OS's counters (router.meter_counters), then `=` and the time again; the sample's time is the midpoint of the two stamps (the
    counters were read somewhere between them). A block cut short at the end is dropped; one with
    no closing stamp (the loop's older form) is timed by its opening stamp."""
    samples, t, body = [], None, []

    def flush(t_end):
        if t is not None and body:
            try:
                counters = router.meter_counters("\n".join(body))
            except ValueError:
                return
            if counters:
                samples.append((t if t_end is None else (t + t_end) / 2, *counters))

    for line in text.splitlines():
        stripped = line.strip()
        closing = stripped.startswith("=")
        stamp = stripped.lstrip("=")
        if stamp and stamp.replace(".", "", 1).isdigit() and "." in stamp:
            flush(float(stamp) if closing else None)
            t, body = (None, []) if closing else (float(stamp), [])
        elif stripped:
            body.append(stripped)
    return samples


class ShaperMeter:
    """Reads a tbf's counters every period_s with one sampling loop on its host (local, namespace or
    SSH), timestamped by the host's own clock, for as long as the context is open."""

    def __init__(self, executor: Executor, ifname: str, out_path: Path, period_s: float = 0.2,
                 router: RouterOS = LinuxTc()):
        self.executor, self.router = executor, router
        self.ifname = ifname
        self.out_path = Path(out_path)
        self.period_s = period_s
        self.samples: list[tuple[float, int, int, int]] = []
        self._proc = None

    def __enter__(self):
        self._proc = self.executor.start(["sh", "-c", _LOOP_SH, LOOP, self.ifname, f"{self.period_s:g}",
                                          self.router.meter_sh],
                                         label="shaper-meter", stdout=self.out_path)
        return self

    def read(self) -> list[tuple[float, int, int, int]]:
        """The samples so far (while the loop runs: a probe may end once it has what it needs)."""
        return parse_samples(self.out_path.read_text(errors="replace") if self.out_path.exists() else "", self.router)

    def __exit__(self, *exc):
        self._proc.stop(term_timeout=3)
        self.samples = self.read()
        return False
