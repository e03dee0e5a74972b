"""Userspace delay line (NFQUEUE) used instead of netem on the emulated routers.

Pure helpers only: the argv of the C helper, the iptables rules that feed it, and
the parser for the JSON line it prints on exit.  Running things is the
executor's job.
"""
from __future__ import annotations

import math
import os
import pathlib

from longhaul.core.paths import BUILD_BIN
from longhaul.drivers.jsonlines import json_lines

BINARY_NAME = "longhaul-delayline"
RULE_COMMENT = "longhaul-delayline"
# The helper rejects longer delays; mirror it so a bad profile fails early.
MAX_DELAY_MS = 60_000.0
STAT_KEYS = ("packets", "bytes", "max_held", "enobufs", "late_us_max")


def helper_path() -> pathlib.Path:
    """Where the helper binary is: $LONGHAUL_DELAYLINE or <repo>/build/bin."""
    env = os.environ.get("LONGHAUL_DELAYLINE")
    if env:
        return pathlib.Path(env)
    return BUILD_BIN / BINARY_NAME


def _check_queue(queue_num: int) -> None:
    if isinstance(queue_num, bool) or not isinstance(queue_num, int):
        raise TypeError(f"queue number must be an int, got {queue_num!r}")
    if not 0 <= queue_num <= 65535:
        raise ValueError(f"queue number {queue_num} outside 0..65535")


def command(
    queue_num: int,
    delay_ms: float,
    ready_file: str | None = None,
    maxlen: int | None = None,
) -> list[str]:
    """argv for one delay-line instance holding queue `queue_num` for `delay_ms`."""
    _check_queue(queue_num)
    delay = float(delay_ms)
    if not math.isfinite(delay) or delay < 0 or delay > MAX_DELAY_MS:
        raise ValueError(f"delay {delay_ms!r} ms outside 0..{MAX_DELAY_MS:g}")
    argv = [
        str(helper_path()),
        "--queue", str(queue_num),
        "--delay-us", str(round(delay * 1000)),
    ]
    if maxlen is not None:
        if isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 1:
            raise ValueError(f"maxlen must be a positive int, got {maxlen!r}")
        argv += ["--maxlen", str(maxlen)]
    if ready_file is not None:
        if not ready_file:
            raise ValueError("ready_file must not be empty")
        argv += ["--ready-file", str(ready_file)]
    return argv


def iptables_rules(out_iface: str, queue_num: int) -> tuple[list[list[str]], list[list[str]]]:
    """(setup, teardown) argvs queueing everything forwarded out of `out_iface`.

    mangle/FORWARD rather than POSTROUTING: FORWARD sees only transit traffic,
    so the router's own packets (and anything an operator runs from inside the
    router namespace) are not delayed, and the output interface is already known
    there.  After the verdict the packet continues to POSTROUTING and the egress
    qdisc, so a tbf on the same interface acts as the bottleneck *after* the
    propagation delay, as on a real path.  No --queue-bypass: if the helper is
    not running, traffic stops instead of silently skipping the delay.
    IPv4 only: the lab addresses and the helper's bind are IPv4.
    """
    _check_queue(queue_num)
    if not out_iface or len(out_iface) > 15 or any(c.isspace() or c == "/" for c in out_iface):
        raise ValueError(f"bad interface name {out_iface!r}")
    spec = [
        "-o", out_iface,
        "-m", "comment", "--comment", RULE_COMMENT,
        "-j", "NFQUEUE", "--queue-num", str(queue_num),
    ]
    base = ["iptables", "-w", "-t", "mangle"]
    setup = [base + ["-A", "FORWARD"] + spec]
    teardown = [base + ["-D", "FORWARD"] + spec]
    return setup, teardown


def parse_stats(text: str) -> dict:
    """The counters from the helper's stdout (the last JSON object line wins)."""
    for data in reversed(list(json_lines(text))):
        if isinstance(data, dict) and all(k in data for k in STAT_KEYS):
            return data
    raise ValueError("no delay-line stats line in output")
