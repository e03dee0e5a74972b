"""Runs on a sending host (inside its namespace): tcp_info of the TCP sockets to the given ports,
read by sock_diag netlink (drivers/agents/sock_diag.py) every period, printed as one JSON line per tick.

One long-lived process per host instead of an `ss` process per host per tick: at 10 Hz with
eight senders the `ss` way cost half a core and could not keep 10 Hz (bench/RESULTS.md).
Timestamps are CLOCK_MONOTONIC, which all namespaces share with the controller.

    python -m longhaul.drivers.agents.tcpinfo_probe --period 0.1 --ports 5201,5202
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from longhaul.drivers.agents.sock_diag import SockDiag

# New fields go at the end: a remote host running an older longhaul prints the shorter row, and
# the controller reads the fields it is given (socket_sampler.parse_probe_line).
FIELDS = ("src", "sport", "dst", "dport", "cca", "cwnd", "mss", "unacked", "srtt_us", "rttvar_us",
          "retrans_total", "delivery_rate_Bps", "bytes_acked", "bytes_received", "sacked", "lost", "retrans_out")


def sample(diag: SockDiag, ports: set[int]) -> list[list]:
    return [[sock[field] for field in FIELDS] for sock in diag.established() if sock["dport"] in ports]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--period", type=float, default=0.1)
    parser.add_argument("--ports", required=True, help="comma-separated destination ports")
    args = parser.parse_args(argv)
    ports = {int(p) for p in args.ports.split(",") if p}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print(json.dumps({"fields": FIELDS}), flush=True)
    diag = SockDiag()
    next_at = time.monotonic()
    while not stop:
        now = time.monotonic()
        print(json.dumps({"t": round(now, 4), "s": sample(diag, ports)}), flush=True)
        next_at += args.period
        while next_at < time.monotonic():  # a late tick is skipped, never doubled
            next_at += args.period
        time.sleep(max(0.0, next_at - time.monotonic()))
    diag.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
