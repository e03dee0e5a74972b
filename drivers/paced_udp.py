"""paced-udp: a UDP source whose rate may change within a burst (seed 002's "stiff" sinusoid), which
iperf3 cannot do. The C helper (drivers/pacedudp, binary `longhaul-pacedudp`) sends on an absolute
schedule; its receiver bins bytes per second of the sender's schedule (kernel arrival times shifted
by the path's base delay) and prints JSON.

Pure helpers: argv builders, the declared schedule (so a shape can be checked against what arrived)
and parsers of the sender's summary and the receiver's per-second lines and summary.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

from longhaul.core.paths import BUILD_BIN
from longhaul.drivers.patterns import SINUSOID
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, ServerSpec, listening

BINARY_NAME = "longhaul-pacedudp"
DEFAULT_PAYLOAD = 1472          # UDP payload filling a 1500-byte MTU over IPv4
DEFAULT_IDLE_TIMEOUT_S = 10.0   # the receiver gives up this long after the last datagram


def helper_path() -> pathlib.Path:
    """Where the binary is: $LONGHAUL_PACEDUDP or <repo>/build/bin."""
    env = os.environ.get("LONGHAUL_PACEDUDP")
    if env:
        return pathlib.Path(env)
    return BUILD_BIN / BINARY_NAME


# ------------------------------------------------------------------------------ the declared schedule

def declared_megabits(t: float, rate_mbps: float | None = None, shape=None) -> float:
    """Megabits the schedule has sent by t s after the start: the integral of the declared rate.
    Sinusoid (seed 002): f(t) = Avg cos(t/c) + Min + Avg, Avg = (Max - Min)/2, c = period/(2 pi),
    so the integral is Avg c sin(t/c) + (Min + Avg) t. It starts at Max."""
    if shape is not None:
        if shape.kind != SINUSOID:
            raise ValueError(f"unknown shape {shape.kind!r}")
        avg = (shape.max_mbps - shape.min_mbps) / 2
        c = shape.period_s / (2 * math.pi)
        return avg * c * math.sin(t / c) + (shape.min_mbps + avg) * t
    if rate_mbps is None:
        raise ValueError("need a rate or a shape")
    return rate_mbps * t


def declared_mbps(t0: float, t1: float, rate_mbps: float | None = None, shape=None) -> float:
    """The declared rate averaged over [t0, t1) of the burst, in Mb/s."""
    if t1 <= t0:
        raise ValueError("empty window")
    return (declared_megabits(t1, rate_mbps, shape) - declared_megabits(t0, rate_mbps, shape)) / (t1 - t0)


def _check_shape(rate_mbps, shape) -> None:
    if (rate_mbps is None) == (shape is None):
        raise ValueError("give exactly one of rate_mbps and shape")
    if shape is not None:
        if shape.kind != SINUSOID:
            raise ValueError(f"unknown shape {shape.kind!r}")
        if not (0 <= shape.min_mbps <= shape.max_mbps and shape.max_mbps > 0 and shape.period_s > 0):
            raise ValueError(f"bad sinusoid {shape}")
    elif not rate_mbps > 0:
        raise ValueError(f"bad rate {rate_mbps!r}")


# ------------------------------------------------------------------------------------------ argv

def server_argv(port: int, *, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, bind: str | None = None,
                rcvbuf_bytes: int | None = None) -> list[str]:
    argv = [str(helper_path()), "recv", "--port", str(int(port)), "--idle-timeout", f"{idle_timeout_s:g}"]
    if bind:
        argv += ["--bind", bind]
    if rcvbuf_bytes:
        argv += ["--rcvbuf", str(int(rcvbuf_bytes))]
    return argv


def client_argv(receiver: str, port: int, *, rate_mbps: float | None = None, shape=None,
                duration_s: float | None = None, bytes_: int | None = None,
                payload_bytes: int = DEFAULT_PAYLOAD, catchup: float | None = None,
                burst_ms: float | None = None, max_lag_ms: float | None = None,
                tick_us: float | None = None) -> list[str]:
    if (duration_s is None) == (bytes_ is None):
        raise ValueError("give exactly one of duration_s or bytes_")
    _check_shape(rate_mbps, shape)
    argv = [str(helper_path()), "send", "--to", receiver, "--port", str(int(port)),
            "--size", str(int(payload_bytes))]
    if shape is not None:
        argv += ["--sine", f"{shape.min_mbps:g},{shape.max_mbps:g},{shape.period_s:g}"]
    else:
        argv += ["--rate-mbps", f"{rate_mbps:g}"]
    argv += ["--duration", f"{duration_s:g}"] if duration_s is not None else ["--bytes", str(int(bytes_))]
    for flag, value in (("--catchup", catchup), ("--burst-ms", burst_ms), ("--max-lag-ms", max_lag_ms),
                        ("--tick-us", tick_us)):
        if value is not None:
            argv += [flag, f"{value:g}"]
    return argv


# ------------------------------------------------------------------------------------------ parsing

def _json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue        # a line cut short by a kill
            if isinstance(item, dict):
                out.append(item)
    return out


def parse_sender(text: str) -> dict | None:
    """The sender's exit summary, or None if it printed none."""
    return next((d for d in reversed(_json_lines(text)) if d.get("role") == "sender"), None)


def parse_receiver(text: str) -> tuple[list[dict], dict | None]:
    """(per-second lines, final summary or None if the receiver was killed before it)."""
    items = _json_lines(text)
    return [d for d in items if "t_s" in d], next((d for d in reversed(items) if d.get("summary")), None)


def _bins_to_intervals(bins: list[int], end_s: float | None, last_s: float | None = None) -> list[Interval]:
    """Second i covers [i, i+1) of the sender's schedule, cut at the schedule's end when it falls
    inside; a last bin past the schedule (stragglers a queue held back) ends at the last arrival.
    Result.intervals folds such short tails into the second before."""
    out = []
    for i, nbytes in enumerate(bins):
        end = i + 1.0
        if end_s is not None and i < end_s < i + 1:
            end = end_s
        elif last_s is not None and i == len(bins) - 1 and (end_s is None or i >= end_s) and i < last_s < i + 1:
            end = last_s
        out.append(Interval(end_s=end, seconds=end - i, bytes=int(nbytes)))
    return out


def parse(client_text: str, server_text: str, spec=None) -> Result:
    sender = parse_sender(client_text)
    lines, summary = parse_receiver(server_text)
    schedule_s = (sender or {}).get("schedule_s") or (summary or {}).get("schedule_s")
    if schedule_s is None and spec is not None:
        schedule_s = spec.duration_s
    if summary is not None:
        receiver = _bins_to_intervals(summary.get("bins", []), schedule_s, summary.get("last_s"))
        received = int(summary.get("bytes", 0))
    else:       # killed before its summary: the per-second lines it flushed
        receiver = [Interval(float(d["t_s"]), float(d.get("seconds", 1.0)), int(d.get("bytes", 0))) for d in lines]
        received = sum(i.bytes for i in receiver)
    sent = int(sender["bytes"]) if sender else int((summary or {}).get("sent_bytes", 0))
    sent_dgrams = sender.get("datagrams") if sender else (summary or {}).get("sent_datagrams")
    lost = None
    if summary is not None and sent_dgrams:
        lost = 100.0 * max(0, int(sent_dgrams) - int(summary.get("datagrams", 0))) / int(sent_dgrams)
    elif lines and lines[-1].get("datagrams") is not None and sent_dgrams:
        lost = 100.0 * int(lines[-1].get("lost", 0)) / int(sent_dgrams)
    errors = []
    if sender is None:
        errors.append("sender printed no summary")
    if summary is None and not lines:
        errors.append("receiver printed nothing")
    elif summary is not None and summary.get("reason") not in ("end", "signal"):
        errors.append(f"receiver stopped: {summary.get('reason')}")
    extra = {k: sender[k] for k in ("send_errors", "max_late_ms", "size", "stopped")
             if sender and k in sender}
    extra.update({k: summary[k] for k in ("reason", "reordered", "late", "rcvbuf", "end_marker", "send_bins")
                  if summary and k in summary})
    return Result(
        protocol="udp", cca=None, streams=1,
        seconds=float(sender["seconds"]) if sender else float(schedule_s or 0.0),
        bytes_sent=sent, bytes_received=received, retransmits=None, lost_percent=lost,
        receiver_intervals=receiver,
        sender_intervals=_bins_to_intervals(sender.get("sent_per_s", []), schedule_s, float(sender["seconds"])) if sender else [],
        remote_port=spec.port if spec is not None else None,
        skipped_bytes=int(sender["skipped_bytes"]) if sender and "skipped_bytes" in sender else None,
        error="; ".join(errors) or None, extra=extra,
    )


class PacedUdp:
    """drivers.tool.Tool for the paced UDP source: one receiver per burst (it exits at the sender's
    end marker). spec.options may carry payload_bytes, catchup, burst_ms, max_lag_ms, tick_us
    (sender) and idle_timeout_s, rcvbuf_bytes (receiver)."""

    name = "paced-udp"
    shared_servers = False
    sets_cca = True                # UDP: no congestion control to set
    counts_arrivals = False        # its receiver reads in user space: the arrival meter counts
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = ("payload_bytes", "catchup", "burst_ms", "max_lag_ms", "tick_us", "idle_timeout_s", "rcvbuf_bytes")   # what a flow's [flows.options] may set
    rules = FlowRules(("udp",), declared_rate=True, in_burst_shapes=(SINUSOID,))

    def prepare(self, spec):
        return [], []

    @property
    def executables(self) -> tuple[str, ...]:
        return (str(helper_path()),)

    def server(self, spec):
        opts = spec.options or {}
        return ServerSpec(server_argv(spec.port, idle_timeout_s=float(opts.get("idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S)),
                                      rcvbuf_bytes=opts.get("rcvbuf_bytes")),
                          listening(spec.port, "udp"))

    def client(self, spec) -> list[str]:
        opts = spec.options or {}
        return client_argv(spec.receiver, spec.port, rate_mbps=None if spec.shape else spec.rate_mbps,
                           shape=spec.shape, duration_s=spec.duration_s, bytes_=spec.bytes,
                           payload_bytes=int(opts.get("payload_bytes", DEFAULT_PAYLOAD)),
                           catchup=opts.get("catchup"), burst_ms=opts.get("burst_ms"),
                           max_lag_ms=opts.get("max_lag_ms"), tick_us=opts.get("tick_us"))

    def parse(self, client_text: str, server_text: str, spec) -> Result:
        return parse(client_text, server_text, spec)
