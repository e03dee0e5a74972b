"""iperf3: command builders and a parser for its --json output (with --get-server-output).

Per-second throughput is taken at the receiver (the server's intervals) when the server ran with
--json, since the sender's intervals count bytes written into a socket buffer, not delivered.
"""

from __future__ import annotations

import json

from longhaul.drivers.result import Interval, Result, merge_short_tail  # noqa: F401  (re-exported for callers)
from longhaul.drivers.tool import BurstSpec, FlowRules, ServerSpec, listening


def server_argv(port: int, bind: str | None = None) -> list[str]:
    argv = ["iperf3", "-s", "-p", str(port), "--json", "-i", "1"]
    if bind:
        argv += ["-B", bind]
    return argv


def client_argv(server: str, port: int | str, *, protocol: str = "tcp", duration_s: float | None = None,
                bytes_: int | None = None, streams: int = 1, cca: str | None = None,
                window_bytes: int | None = None, udp_rate_mbps: float | None = None,
                bind: str | None = None, pacing_bps: float | None = None) -> list[str]:
    """pacing_bps: the sockets' fair-queue pacing cap (--fq-rate), where a TCP flow must not
    outrun a requested rate (the planning replay's transfers)."""
    if (duration_s is None) == (bytes_ is None):
        raise ValueError("give exactly one of duration_s or bytes_")
    argv = ["iperf3", "-c", server, "-p", str(port), "--json", "--get-server-output", "-i", "1",
            "-P", str(streams)]
    argv += ["-t", f"{duration_s:g}"] if duration_s is not None else ["-n", str(bytes_)]
    if bind:
        argv += ["-B", bind]
    if protocol == "udp":
        if udp_rate_mbps is None:
            raise ValueError("UDP needs a rate")
        # iperf3 -b is per stream; the declared rate is the flow's total
        argv += ["-u", "-b", f"{udp_rate_mbps * 1e6 / streams:.0f}"]
    elif protocol == "tcp":
        if cca:
            argv += ["-C", cca]
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    if window_bytes:
        argv += ["-w", str(window_bytes)]
    if pacing_bps is not None:
        argv += ["--fq-rate", f"{pacing_bps:.0f}"]
    return argv


def _intervals(raw: list[dict]) -> list[Interval]:
    out = []
    for item in raw:
        total = item.get("sum", {})
        out.append(Interval(end_s=float(total.get("end", 0.0)), seconds=float(total.get("seconds", 0.0)),
                            bytes=int(total.get("bytes", 0)),
                            streams=[int(s.get("bytes", 0)) for s in item.get("streams", [])]))
    return out


def parse(text: str) -> Result:
    """Parse the client's --json output; raises ValueError if it is not iperf3 JSON at all."""
    data = json.loads(text)
    if not isinstance(data, dict) or "start" not in data:
        raise ValueError("not iperf3 JSON output")
    start = data.get("start", {})
    end = data.get("end", {})
    test = start.get("test_start", {})
    protocol = str(test.get("protocol", "TCP")).lower()
    server = data.get("server_output_json") or {}
    if protocol == "udp":
        total = end.get("sum", {})
        # the client's end.sum carries the receiver's loss for UDP; the server's bytes are per interval
        received = sum(i.bytes for i in _intervals(server.get("intervals", []))) or int(
            total.get("bytes", 0) * (1 - total.get("lost_percent", 0.0) / 100))
        sent, retrans, lost = int(total.get("bytes", 0)), None, total.get("lost_percent")
    else:
        sent = int(end.get("sum_sent", {}).get("bytes", 0))
        received = int(end.get("sum_received", {}).get("bytes", 0))
        retrans, lost = end.get("sum_sent", {}).get("retransmits"), None
    connected = start.get("connected", [])
    return Result(
        protocol=protocol,
        cca=end.get("sender_tcp_congestion"),
        streams=int(test.get("num_streams", len(connected) or 1)),
        seconds=float(end.get("sum_sent", end.get("sum", {})).get("seconds", 0.0)),
        bytes_sent=sent, bytes_received=received, retransmits=retrans, lost_percent=lost,
        receiver_intervals=_intervals(server.get("intervals", [])),
        sender_intervals=_intervals(data.get("intervals", [])),
        local_ports=[int(c["local_port"]) for c in connected if "local_port" in c],
        remote_port=int(connected[0]["remote_port"]) if connected else None,
        error=data.get("error"),
    )


class Iperf3:
    """drivers.tool.Tool for iperf3: long-lived --json servers a flow's bursts rotate over; the
    client's --get-server-output carries the receiver's per-second view, so the server's own
    output is not needed."""

    name = "iperf3"
    executables = ("iperf3",)
    shared_servers = True
    sets_cca = True                 # -C
    counts_arrivals = False         # its server counts what it read: tcp_info or the arrival meter
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = False
    # connect, cookie -> PARAM_EXCHANGE, parameters -> CREATE_STREAMS, the streams' cookies ->
    # TEST_START (tcp_info: a 1-stream client's data leaves 5 round trips after its start)
    setup_round_trips = 4
    start_allowance_s = 0.0
    # pacing_mbps: each TCP stream's pacing cap (--fq-rate: SO_MAX_PACING_RATE, which TCP's own
    # pacing honours without the fq qdisc), e.g. a burst of the OPS active profile at a set rate
    option_keys = ("pacing_mbps",)
    rules = FlowRules(("tcp", "udp"), declared_rate=True, multi_stream=True, check=lambda flow: _options_problem(flow))

    def prepare(self, spec):
        return [], []

    def server(self, spec: BurstSpec) -> ServerSpec:
        return ServerSpec(server_argv(spec.port), listening(spec.port))

    def client(self, spec: BurstSpec) -> list[str]:
        pacing = spec.options.get("pacing_mbps")
        return client_argv(spec.receiver, spec.port, protocol=spec.protocol, duration_s=spec.duration_s,
                           bytes_=spec.bytes, streams=spec.streams, cca=spec.cca, window_bytes=spec.window_bytes,
                           udp_rate_mbps=spec.rate_mbps, pacing_bps=float(pacing) * 1e6 if pacing else None)

    def parse(self, client_text: str, server_text: str, spec: BurstSpec) -> Result:
        return parse(client_text)


def _options_problem(flow) -> str | None:
    pacing = flow.options.get("pacing_mbps")
    if pacing is None:
        return None
    if isinstance(pacing, bool) or not isinstance(pacing, (int, float)) or not 0 < pacing <= 100_000:
        return "options.pacing_mbps is a rate in Mb/s, above 0 and at most 100000"
    if flow.protocol != "tcp":
        return "options.pacing_mbps paces TCP streams; a UDP flow declares udp_rate_mbps"
    return None
