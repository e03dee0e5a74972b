"""The lab page's check: `longhaul check --config CONFIG` run on an operator's request, as a
process of the console's own (an argv list, never a shell), its output and exit status kept for
the page until the next check."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CHECK_TIMEOUT_S = 300.0      # an SSH lab's preflight reaches every host


@dataclass(frozen=True)
class CheckResult:
    started: str
    seconds: float
    status: int | None       # `longhaul check`'s exit status: 0 ready, 1 not ready, 2 a bad config; None: timed out
    output: str


def run_check(config: Path) -> CheckResult:
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "longhaul.appliance.cli", "check", "--config", str(config)]
    try:
        res = subprocess.run(argv, cwd=Path(config).parent, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S,
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "COLUMNS": "120", "TERM": "dumb",
                                  "LANG": "C.UTF-8"})
        status, output = res.returncode, res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        status = None
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        output += f"\n(stopped after {CHECK_TIMEOUT_S:.0f} s)"
    return CheckResult(started, round(time.monotonic() - t0, 1), status, output)
