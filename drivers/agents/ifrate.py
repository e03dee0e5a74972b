"""Receiver-side rate meter: what actually arrived on an interface, one JSON line per second.

A line-rate generator (dpdk-testpmd, TRex) has no receiver process of its own, so the achieved
rate behind the bottleneck is read from the receiving host's counters:

  sysfs (default)   /sys/class/net/<iface>/statistics/rx_{bytes,packets}: every frame the
                    interface took in, L2 bytes without FCS. Exact and cheap; right when the
                    interface carries only the background (its own receiver host).
  --udp-port P      an iptables rule with no target in INPUT (-i <iface> -p udp --dport P) used
                    only as a counter, so other traffic on the same interface is not counted;
                    bytes are IP bytes (no Ethernet header). Needs iptables; the rule is removed
                    on exit (and by `cleanup_argv` as a backstop).

Intervals are anchored at the traffic: before the first poll that sees at least --start-bytes
(default 10 kB in one poll, far above ARP/ND chatter) the meter only polls; from then on it
prints one line per --interval seconds, so `t` is seconds since the traffic began, like the
intervals of a tool that has its own receiver. SIGTERM/SIGINT print the last partial interval
and a summary line, then exit 0.

Run as `python3 -m longhaul.drivers.agents.ifrate <iface> [--udp-port P] [--ready-file F]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMENT = "longhaul-ifrate"


def rule_spec(iface: str, udp_port: int) -> list[str]:
    return ["INPUT", "-i", iface, "-p", "udp", "--dport", str(udp_port), "-m", "comment", "--comment",
            f"{COMMENT}-{udp_port}"]


def setup_argv(iface: str, udp_port: int) -> list[str]:
    return ["iptables", "-w", "-t", "filter", "-I", *rule_spec(iface, udp_port)]


def cleanup_argv(iface: str, udp_port: int) -> list[str]:
    return ["iptables", "-w", "-t", "filter", "-D", *rule_spec(iface, udp_port)]


def sysfs_counters(iface: str, root: str = "/sys/class/net") -> tuple[int, int]:
    base = Path(root) / iface / "statistics"
    return int((base / "rx_bytes").read_text()), int((base / "rx_packets").read_text())


def parse_iptables_counters(text: str, udp_port: int) -> tuple[int, int] | None:
    """(bytes, packets) of our rule in `iptables -S INPUT -v` output ('... -c <pkts> <bytes>')."""
    for line in text.splitlines():
        if f"{COMMENT}-{udp_port}" in line:
            m = re.search(r"-c (\d+) (\d+)", line)
            if m:
                return int(m.group(2)), int(m.group(1))
    return None


def iptables_counters(udp_port: int) -> tuple[int, int]:
    out = subprocess.run(["iptables", "-w", "-t", "filter", "-S", "INPUT", "-v"], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    got = parse_iptables_counters(out, udp_port)
    if got is None:
        raise RuntimeError(f"iptables counter rule for udp port {udp_port} is gone")
    return got


def _stamped(read) -> tuple[int, int, float]:
    """(bytes, packets, when): a read stamped at the middle of the time it took. An iptables read
    is a fork and exec, which took up to a second in a busy TCG VM; stamped after it returned, the
    next interval looked short and its rate high (13.6 Mb/s through a 10 Mb/s shaper)."""
    before = time.monotonic()
    b, p = read()
    return b, p, (before + time.monotonic()) / 2


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


def run(iface: str, udp_port: int | None, ready_file: str | None, interval: float, start_bytes: int,
        out=sys.stdout) -> int:
    if udp_port is not None:
        subprocess.run(setup_argv(iface, udp_port), check=True, capture_output=True, timeout=10)
        read = lambda: iptables_counters(udp_port)
        source, poll = "iptables", 0.1   # a fork per poll: slower pre-traffic polling
    else:
        sysfs_counters(iface)            # fail now, not at the first sample, on a wrong name
        read = lambda: sysfs_counters(iface)
        source, poll = "sysfs", 0.02
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    total_b = total_p = 0
    anchor = last_t = None
    try:
        prev_b, prev_p, prev_t = _stamped(read)
        if ready_file:      # in the burst's workdir, which on a remote receiver exists only from here
            Path(ready_file).parent.mkdir(parents=True, exist_ok=True)
            Path(ready_file).write_text(f"{os.getpid()}\n")
        print(json.dumps({"event": "ready", "iface": iface, "source": source, "ts": time.time()}), file=out, flush=True)
        # wait for the traffic; its first poll's bytes belong to the first interval
        while anchor is None:
            time.sleep(poll)
            b, p, now = _stamped(read)
            if b - prev_b >= start_bytes:
                start_b, start_p = last_b, last_p = prev_b, prev_p
                anchor = last_t = prev_t
                print(json.dumps({"event": "start", "ts": time.time() - (now - prev_t)}), file=out, flush=True)
            else:
                prev_b, prev_p, prev_t = b, p, now
        while True:
            next_t = last_t + interval
            time.sleep(max(0.0, next_t - time.monotonic()))
            b, p, now = _stamped(read)
            _emit(out, now - anchor, now - last_t, b - last_b, p - last_p)
            last_t, last_b, last_p = now, b, p
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if anchor is not None and last_t is not None:
            b, p, now = _stamped(read)
            if now - last_t > 0.001:
                _emit(out, now - anchor, now - last_t, b - last_b, p - last_p)
            total_b, total_p = b - start_b, p - start_p
        print(json.dumps({"event": "end", "bytes": total_b, "packets": total_p,
                          "seconds": round(time.monotonic() - anchor, 6) if anchor is not None else 0.0}),
              file=out, flush=True)
    finally:
        if ready_file:
            Path(ready_file).unlink(missing_ok=True)
        if udp_port is not None:
            subprocess.run(cleanup_argv(iface, udp_port), capture_output=True, timeout=10, check=False)
    return 0


def _emit(out, t: float, seconds: float, nbytes: int, packets: int) -> None:
    print(json.dumps({"t": round(t, 6), "seconds": round(seconds, 6), "bytes": nbytes, "packets": packets,
                      "mbps": round(nbytes * 8 / seconds / 1e6, 3) if seconds > 0 else 0.0}), file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="longhaul.drivers.agents.ifrate", description=__doc__.splitlines()[0])
    ap.add_argument("iface")
    ap.add_argument("--udp-port", type=int, help="count only UDP to this port (iptables counter)")
    ap.add_argument("--ready-file", help="written once the meter runs, removed on exit")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--start-bytes", type=int, default=10_000,
                    help="bytes within one poll that mark the traffic's start")
    args = ap.parse_args(argv)
    if args.udp_port is not None and not 0 < args.udp_port < 65536:
        ap.error("--udp-port must be 1..65535")
    if args.interval <= 0:
        ap.error("--interval must be > 0")
    try:
        return run(args.iface, args.udp_port, args.ready_file, args.interval, args.start_bytes)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"ifrate: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
