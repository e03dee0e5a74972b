"""Runs on a lab host (inside its namespace): tcp_info of its established TCP sockets, read by
sock_diag netlink (drivers/agents/sock_diag.py) every period and printed on stdout.

One long-lived process per host instead of an `ss` process per host per tick: at 10 Hz with
eight senders the `ss` way cost half a core and could not keep 10 Hz (bench/RESULTS.md).

Two output formats:

- `json` (the default; the socket sampler reads it): the sockets to the given `--ports`, one JSON
  line per tick, timestamped with the wall clock (seconds) at the middle of the dump, "d" its length: a sender that is another machine (a
  real host, a VM) shares only that with the controller, which readiness's clock rows check;
- `influx`: InfluxDB line protocol for Telegraf's `inputs.execd` (signal "none": the probe prints
  on its own period), one `lh_host_tcpinfo` point per socket and tick, tagged src, sport, dst,
  dport, cca, timestamped with the wall clock in ns; every established socket unless `--ports`.

    python -m longhaul.drivers.agents.tcpinfo_probe --period 0.1 --ports 5201,5202
    python -m longhaul.drivers.agents.tcpinfo_probe --period 1 --format influx
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time

from longhaul.core.paths import BUILD_BIN
from longhaul.drivers.agents.line_protocol import line
from longhaul.drivers.agents.sock_diag import SockDiag

# New fields go at the end: a remote host running an older longhaul prints the shorter row, and
# the controller reads the fields it is given (socket_sampler.parse_probe_line).
FIELDS = ("src", "sport", "dst", "dport", "cca", "cwnd", "mss", "unacked", "srtt_us", "rttvar_us",
          "retrans_total", "delivery_rate_Bps", "bytes_acked", "bytes_received", "sacked", "lost", "retrans_out")
# drivers/tcpinfo/tcpinfo.c prints the json format's very lines in C (built by the setup): at 100 Hz
# on 8 senders this Python probe took 30 % of a core (bench/RESULTS-sampler.md)
NATIVE = BUILD_BIN / "longhaul-tcpinfo"
# The influx format: a point per socket, the 4-tuple and the congestion control as its tags.
MEASUREMENT = "lh_host_tcpinfo"
TAGS = ("src", "sport", "dst", "dport", "cca")
INFLUX_FIELDS = tuple(f for f in FIELDS if f not in TAGS)
ALL_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def sample(diag: SockDiag, ports: set[int]) -> list[list]:
    return [[sock[field] for field in FIELDS] for sock in diag.established() if sock["dport"] in ports]


def influx_lines(socks: list[dict], time_ns: int) -> list[str]:
    """One line-protocol point per socket (drivers/agents/line_protocol.py escapes it)."""
    out = []
    for sock in socks:
        text = line(MEASUREMENT, {tag: sock.get(tag) for tag in TAGS},
                    {field: sock.get(field) for field in INFLUX_FIELDS}, time_ns)
        if text is not None:
            out.append(text)
    return out


def json_tick(diag: SockDiag, ports: set[int] | None) -> str:
    """Stamped at the middle of the dump, with its length ("d"): the sockets were read somewhere in
    it, and a reading whose dump a stalled host stretched is only known to within it."""
    before = time.time()
    rows = sample(diag, ports or set())
    after = time.time()
    return json.dumps({"t": round((before + after) / 2, 4), "d": round(after - before, 4), "s": rows}) + "\n"


def influx_tick(diag: SockDiag, ports: set[int] | None) -> str:
    """Every established socket, IPv6 ones too: a server on `::` holds IPv4 clients' connections
    on IPv6 sockets (the receivers' side of iperf3)."""
    socks = [s for s in diag.established(ALL_FAMILIES) if ports is None or s["dport"] in ports]
    return "".join(text + "\n" for text in influx_lines(socks, time.time_ns()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--period", type=float, default=0.1)
    parser.add_argument("--ports", help="comma-separated destination ports (json: required; influx: "
                                            "only these, else every established socket)")
    parser.add_argument("--format", choices=("json", "influx"), default="json")
    args = parser.parse_args(argv)
    if args.format == "json" and not args.ports:
        parser.error("--ports is required with --format json")
    ports = {int(p) for p in args.ports.split(",") if p} if args.ports else None
    tick = json_tick if args.format == "json" else influx_tick
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    if args.format == "json":
        print(json.dumps({"fields": FIELDS}), flush=True)
    diag = SockDiag()
    next_at = time.monotonic()
    while not stop:
        text = tick(diag, ports)
        if text:
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except BrokenPipeError:        # the reader (the sampler, Telegraf) is gone
                break
        next_at += args.period
        while next_at < time.monotonic():  # a late tick is skipped, never doubled
            next_at += args.period
        time.sleep(max(0.0, next_at - time.monotonic()))
    diag.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
