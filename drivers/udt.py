"""UDT4 (seed 000's UDP-based reliable transfer tool): argv builders and a parser for longhaul-udtperf.

longhaul-udtperf (drivers/udt/udtperf.cpp, built against Debian's libudt) moves memory to memory
and prints JSON lines: one "interval" per second on each side (application bytes plus UDT::perfmon
of that second) and a closing "summary" whose "last" is the last perfmon reading that succeeded
(perfmon fails once the peer has closed). The receiver's intervals are the throughput; the
sender's summary carries retransmissions, RTT and windows, since UDT's congestion control runs
at the sender.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from longhaul.core.paths import BUILD_BIN
from longhaul.drivers.jsonlines import json_lines
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, ServerSpec, listening

BINARY_NAME = "longhaul-udtperf"

# Flow options (BurstSpec.options) the tool understands, and the flag each becomes. Both sides get
# all of them: MSS and the flow window are negotiated, and a buffer a side does not use is harmless.
OPTION_FLAGS = {
    "mss": "--mss",                 # UDT_MSS: packet size incl. IP/UDP/UDT headers (default 1500)
    "fc": "--fc",                   # UDT_FC: max flow window in packets (default 25600)
    "udt_sndbuf": "--udt-sndbuf",   # UDT_SNDBUF bytes (default 8192 packets, ~12 MB)
    "udt_rcvbuf": "--udt-rcvbuf",   # UDT_RCVBUF bytes (default 8192 packets, ~12 MB): bounds the flow window
    "udp_sndbuf": "--udp-sndbuf",   # UDP_SNDBUF bytes (kernel caps it at net.core.wmem_max)
    "udp_rcvbuf": "--udp-rcvbuf",   # UDP_RCVBUF bytes (kernel caps it at net.core.rmem_max)
}


def helper_path() -> Path:
    """Where the binary is: $LONGHAUL_UDTPERF or <repo>/build/bin (built by the setup)."""
    env = os.environ.get("LONGHAUL_UDTPERF")
    if env:
        return Path(env)
    return BUILD_BIN / BINARY_NAME


def _option_args(options: dict | None) -> list[str]:
    """A cell's TCP buffer (BurstSpec.window_bytes) is deliberately not mapped onto UDT's buffers:
    seed 000 names no UDT tuning, and a TCP-sized UDT_RCVBUF would cap UDT's flow window.
    Note the defaults (~12 MB receive buffer) bound UDT to about 12 MB per RTT: 750 Mb/s at 128 ms;
    a faster or longer path needs udt_rcvbuf/udt_sndbuf (and fc) in the flow's options."""
    opts = options or {}
    argv: list[str] = []
    for key, flag in OPTION_FLAGS.items():
        value = opts.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"UDT option {key} must be a positive integer, got {value!r}")
        argv += [flag, str(value)]
    return argv


def receiver_argv(port: int, *, options: dict | None = None, bind: str | None = None,
                  binary: str | None = None) -> list[str]:
    argv = [binary or str(helper_path()), "recv", "--port", str(int(port))]
    if bind:
        argv += ["--bind", bind]
    return argv + _option_args(options)


def sender_argv(host: str, port: int, *, duration_s: float | None = None, bytes_: int | None = None,
                rate_mbps: float | None = None, options: dict | None = None,
                binary: str | None = None) -> list[str]:
    if (duration_s is None) == (bytes_ is None):
        raise ValueError("give exactly one of duration_s or bytes_")
    argv = [binary or str(helper_path()), "send", "--host", host, "--port", str(int(port))]
    argv += ["--seconds", f"{duration_s:g}"] if duration_s is not None else ["--bytes", str(int(bytes_))]
    if rate_mbps:   # UDT_MAXBW: a ceiling on UDT's own rate control, not a pacer of its own
        argv += ["--max-mbps", f"{rate_mbps:g}"]
    return argv + _option_args(options)


def events(text: str) -> list[dict]:
    """The JSON lines of one side's output; anything else (a stray warning) is skipped."""
    out = []
    for item in json_lines(text):
        if isinstance(item, dict) and "event" in item:
            out.append(item)
    return out


def _intervals(evts: list[dict]) -> list[Interval]:
    return [Interval(end_s=float(e["end_s"]), seconds=float(e["seconds"]), bytes=int(e["bytes"]),
                     streams=[int(e["bytes"])]) for e in evts if e["event"] == "interval"]


def _summary(evts: list[dict]) -> dict | None:
    return next((e for e in reversed(evts) if e["event"] == "summary"), None)


def _last(summary: dict | None) -> dict:
    return (summary or {}).get("last") or {}


def lost_percent(sender_last: dict, receiver_last: dict) -> float | None:
    """Packets the receiver found missing (each gap counted once, unlike the sender's NAK-driven
    count, which repeats when a NAK is resent) over the data packets the sender sent, retransmissions
    included."""
    lost = receiver_last.get("pktRcvLossTotal")
    sent = sender_last.get("pktSentTotal")
    if lost is None:
        return None
    if not sent:   # no sender reading: what arrived plus what went missing
        sent = (receiver_last.get("pktRecvTotal") or 0) + lost
    return 100.0 * lost / sent if sent else None


def parse(client_text: str, server_text: str, spec=None) -> Result:
    """Both sides' outputs -> Result; raises ValueError if neither is longhaul-udtperf output."""
    send_evts, recv_evts = events(client_text), events(server_text)
    if not send_evts and not recv_evts:
        raise ValueError("no longhaul-udtperf output")
    send_sum, recv_sum = _summary(send_evts), _summary(recv_evts)
    send_last, recv_last = _last(send_sum), _last(recv_sum)
    receiver, sender = _intervals(recv_evts), _intervals(send_evts)
    errors = []
    if send_sum is None:
        errors.append("sender gave no summary" if send_evts else "sender printed nothing")
    elif send_sum.get("reason") != "done":
        errors.append(f"sender: {send_sum.get('error') or send_sum.get('reason')}")
    if recv_sum is not None and recv_sum.get("reason") == "error":
        errors.append(f"receiver: {recv_sum.get('error')}")
    connected = next((e for e in send_evts if e["event"] == "connected"), {})
    local = str(connected.get("local", "")).rpartition(":")[2]
    peer = str(connected.get("peer", "")).rpartition(":")[2]
    retrans = send_last.get("pktRetransTotal")
    rtt = send_last.get("msRTT", recv_last.get("msRTT"))
    return Result(
        protocol="udt", cca=None, streams=1,
        seconds=float((send_sum or recv_sum or {}).get("seconds", 0.0)),
        bytes_sent=int(send_sum["bytes"]) if send_sum else sum(i.bytes for i in sender),
        bytes_received=int(recv_sum["bytes"]) if recv_sum else sum(i.bytes for i in receiver),
        retransmits=int(retrans) if retrans is not None else None,
        lost_percent=lost_percent(send_last, recv_last),
        receiver_intervals=receiver, sender_intervals=sender,
        local_ports=[int(local)] if local.isdigit() else [],
        remote_port=int(peer) if peer.isdigit() else (spec.port if spec is not None else None),
        error="; ".join(errors) or None,
        extra={
            "rtt_ms": rtt,
            "flow_window_pkts": send_last.get("pktFlowWindow"),
            "congestion_window_pkts": send_last.get("pktCongestionWindow"),
            "bandwidth_estimate_mbps": send_last.get("mbpsBandwidth"),
            "sender_loss_reports": send_last.get("pktSndLossTotal"),
            "receiver_end": recv_sum.get("reason") if recv_sum else None,
            # seconds between the last byte and the receiver's end: ~0 after a clean close, tens of
            # seconds when the sender vanished (UDT notices that only by timeout)
            "receiver_idle_s": recv_sum.get("idle_s") if recv_sum else None,
            "sender_last": send_last or None,
            "receiver_last": recv_last or None,
        },
    )


class Udt:
    """drivers.tool.Tool for UDT: one receiver per burst (it serves one connection and exits).
    UDT runs its own congestion control (DAIMD) at user level: the flow's cca does not apply."""

    name = "udt"
    shared_servers = False
    sets_cca = True                # no TCP socket: the trial's CCA shim has nothing to set
    counts_arrivals = False        # its receiver reads in user space: the arrival meter counts
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = tuple(OPTION_FLAGS)   # what a flow's [flows.options] may set
    rules = FlowRules(("udp",))

    def prepare(self, spec):
        return [], []

    @property
    def executables(self) -> tuple[str, ...]:
        # an absolute path: shutil.which checks it directly, so preflight finds the built binary
        return (str(helper_path()),)

    @staticmethod
    def _check(spec) -> None:
        if spec.streams != 1:
            raise ValueError("UDT is one connection per flow; streams must be 1")
        if spec.storage != "memory":
            raise ValueError("longhaul-udtperf moves memory to memory only")
        if spec.shape is not None:
            raise ValueError("UDT cannot follow a rate shape")
        if spec.duration_s is not None and not (math.isfinite(spec.duration_s) and spec.duration_s > 0):
            raise ValueError(f"bad duration {spec.duration_s!r}")

    def server(self, spec):
        self._check(spec)
        # UDT is UDP underneath: the receiver's port shows as an unconnected UDP socket
        return ServerSpec(receiver_argv(spec.port, options=spec.options),
                          listening(spec.port, "udp"))

    def client(self, spec) -> list[str]:
        self._check(spec)
        return sender_argv(spec.receiver, spec.port, duration_s=spec.duration_s, bytes_=spec.bytes,
                           rate_mbps=spec.rate_mbps, options=spec.options)

    def parse(self, client_text: str, server_text: str, spec) -> Result:
        return parse(client_text, server_text, spec)
