"""RTT probe across the bottleneck, in seed 000's burst mode or at a fixed interval.

Burst mode runs one fping round (10 pings 1 ms apart) at the start of every second and records
their mean; a round still in flight when the next second starts is not doubled up. Interval mode
runs one long fping with a ping every N ms and parses its timestamped replies at the end.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from longhaul.drivers import fping
from longhaul.hardware.executors.process import Executor

log = logging.getLogger(__name__)


@dataclass
class RttSample:
    t_s: float
    rtt_ms: float | None
    sent: int
    received: int
    mode: str


# one fping burst per second on the probe host, each stamped with the host's clock: one long-lived
# process instead of a session per round (over SSH a handshake per second costs the sender's CPU
# and, on a slow host, seconds: a VM under TCG managed one round in 2-3 s that way). Round k
# starts at s + k on the loop's own grid: sleeping "1 s minus this round" drifted by the date,
# awk and sleep start-up (7 ms a round here), so rounds slid against the seconds of the run and
# against an active probing cycle. A round that overruns its second skips the missed starts.
_BURST_LOOP_SH = ('s=$(date +%s.%N); k=0; while :; do echo "T $(date +%s.%N)"; "$@" 2>&1; '
                  'r=$(awk -v s="$s" -v k="$k" -v n="$(date +%s.%N)" \'BEGIN { k = k + 1; '
                  'if (s + k < n) k = int(n - s) + 1; printf "%d %.3f", k, s + k - n }\'); '
                  'k=${r%% *}; sleep "${r#* }"; done')


# the loop's name ($0): what `ps` shows and what a command is known by
LOOP = "longhaul-rtt-loop"


def burst_loop_argv(target: str) -> list[str]:
    return ["sh", "-c", _BURST_LOOP_SH, LOOP, *fping.burst_argv(target)]


def parse_burst_loop(text: str, wall0: float) -> list[RttSample]:
    """Samples from the loop's output: `T <epoch>` then fping's `target : r1 r2 ...` line; a
    round with no fping line (cut short at the end) is dropped, one with all pings lost kept."""
    out, t = [], None
    for line in text.splitlines():
        if line.startswith("T "):
            try:
                t = float(line[2:].strip())
            except ValueError:
                t = None
            continue
        if t is None:
            continue
        try:
            burst = fping.parse_burst(line)
        except ValueError:
            continue
        out.append(RttSample(round(t - wall0, 3), burst.mean_ms, len(burst.rtts_ms), burst.received, "burst"))
        t = None
    return out


class RttProbe:
    def __init__(self, executor: Executor, target: str, mode: str = "burst", interval_ms: float = 10.0,
                 raw_path: Path | None = None):
        self.executor = executor
        self.target = target
        self.mode = mode
        self.interval_ms = interval_ms
        self.raw_path = raw_path
        self.samples: list[RttSample] = []
        self._own_raw = False
        self._proc = None
        self._t0 = 0.0
        self._wall0 = 0.0

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._wall0 = time.time() - (time.monotonic() - t0)
        if self.mode == "burst":
            if self.raw_path is None:
                fd, name = tempfile.mkstemp(prefix="longhaul-rtt-", suffix=".txt")
                os.close(fd)
                self.raw_path, self._own_raw = Path(name), True
            self._proc = self.executor.start(burst_loop_argv(self.target), label="fping-bursts", stdout=self.raw_path)
        else:
            self._proc = self.executor.start(fping.interval_argv(self.target, self.interval_ms),
                                             label="fping", stdout=self.raw_path)

    def latest(self) -> float | None:
        """For the live display: the newest RTT in the probe's output so far (its tail only)."""
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
            if self.mode == "burst":
                try:
                    mean = fping.parse_burst(line).mean_ms
                except ValueError:
                    continue
                if mean is not None:
                    return mean
                continue
            reply = fping.parse_interval_line(line)
            if reply is not None:
                return reply.rtt_ms
        return None

    def so_far(self) -> list[RttSample]:
        """The rounds recorded until now (a burst's decision reads the window before it)."""
        if self.raw_path is None or not self.raw_path.exists():
            return []
        text = self.raw_path.read_text(errors="replace")
        return parse_burst_loop(text, self._wall0) if self.mode == "burst" else self._parse_interval_output(text)

    def stop(self) -> list[RttSample]:
        if self._proc:
            self._proc.stop(sig=2)  # SIGINT: fping prints its summary and exits (the loop with it)
            text = self._proc.read_stdout()
            self.samples = (parse_burst_loop(text, self._wall0) if self.mode == "burst"
                            else self._parse_interval_output(text))
            if self._own_raw:
                self.raw_path.unlink(missing_ok=True)
        return self.samples

    def _parse_interval_output(self, text: str) -> list[RttSample]:
        out = []
        for line in text.splitlines():
            reply = fping.parse_interval_line(line)
            if reply:
                out.append(RttSample(round(reply.timestamp - self._wall0, 3), reply.rtt_ms, 1, 1, "interval"))
        return out
