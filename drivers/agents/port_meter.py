"""Runs on a receiver (inside its namespace): what arrived for given UDP ports, counted by the
kernel, cumulative, one JSON line per period.

A UDP tool's receiver is a user-level program; what it reports per second is what it read, and a
reader the busy host delayed reads two seconds' data in one (670 Mb/s through a 500 Mb/s shaper
was stored). So the trial counts arrivals here instead: one iptables rule per port in INPUT with
no target, a counter only, installed and removed in one `iptables-restore --noflush` each, all
read by one `iptables -S INPUT -v` per tick. Each tick is stamped on the wall clock (which a remote
host shares with the controller; readiness checks it) at the middle of its read, since the read is
a fork whose time is the error of the stamp.

    python -m longhaul.drivers.agents.port_meter --ports 5211,5212 --period 0.1
    python -m longhaul.drivers.agents.port_meter --ports 5211,5212 --remove   (a backstop)

Output: a header {"ports": [...], "source": "iptables", "rules": COMMENT} once the rules are in (the trial's
readiness), then {"t": wall seconds, "c": {"5211": [ip_bytes, packets], ...}} per tick. SIGTERM
removes the rules and exits 0.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time

COMMENT = "longhaul-arrivals"
IPTABLES = ["iptables", "-w"]
READ_SHARE = 5          # the period is at least this many times a read's duration
_COUNTER = re.compile(r"--dport (\d+) .*--comment \"?" + COMMENT + r"-\d+\"? -c (\d+) (\d+)")


def rules(ports: list[int], verb: str) -> str:
    """An iptables-restore script adding (-I) or deleting (-D) the counting rule of every port."""
    lines = [f'{verb} INPUT -p udp -m udp --dport {p} -m comment --comment "{COMMENT}-{p}"' for p in ports]
    return "*filter\n" + "\n".join(lines) + "\nCOMMIT\n"


def restore(script: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables-restore", "-w", "--noflush"], input=script, text=True, capture_output=True,
                          timeout=30, check=check)


def parse_counters(text: str) -> dict[int, tuple[int, int]]:
    """Our rules' (bytes, packets) by port in `iptables -S INPUT -v` output ('... -c <pkts> <bytes>')."""
    out = {}
    for line in text.splitlines():
        m = _COUNTER.search(line)
        if m:
            out[int(m.group(1))] = (int(m.group(3)), int(m.group(2)))
    return out


def read() -> dict[int, tuple[int, int]]:
    return parse_counters(subprocess.run([*IPTABLES, "-S", "INPUT", "-v"], capture_output=True, text=True,
                                         timeout=10, check=True).stdout)


def tick(ports: list[int]) -> dict:
    before = time.time()
    counters = read()
    stamp = (before + time.time()) / 2
    missing = [p for p in ports if p not in counters]
    if missing:
        raise RuntimeError(f"the counting rules of ports {missing} are gone")
    return {"t": round(stamp, 4), "c": {str(p): list(counters[p]) for p in ports}}


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


def run(ports: list[int], period: float, out=sys.stdout) -> int:
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        restore(rules(ports, "-I"))
        print(json.dumps({"ports": ports, "source": "iptables", "rules": COMMENT}), file=out, flush=True)
        next_at = time.monotonic()
        while True:
            began = time.monotonic()
            print(json.dumps(tick(ports)), file=out, flush=True)
            # where a read is slow (a fork takes up to a second in a VM under emulation) the meter
            # reads less often rather than take the CPU the receiver needs: at most a fifth of it
            step = max(period, READ_SHARE * (time.monotonic() - began))
            next_at += step
            while next_at < time.monotonic():   # a late tick is skipped, never doubled
                next_at += step
            time.sleep(max(0.0, next_at - time.monotonic()))
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(json.dumps(tick(ports)), file=out, flush=True)     # what arrived up to the stop
    except BrokenPipeError:
        pass
    finally:        # also after a stop during the restore: deleting rules that are not there is harmless
        restore(rules(ports, "-D"), check=False)
    return 0


def remove(ports: list[int]) -> int:
    """Delete the rules of these ports that a meter left (killed before it could): the trial's
    backstop."""
    listing = subprocess.run([*IPTABLES, "-S", "INPUT"], capture_output=True, text=True, timeout=10, check=True)
    left = sorted({int(p) for p in re.findall(COMMENT + r"-(\d+)", listing.stdout)} & set(ports))
    if left:
        restore(rules(left, "-D"))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="longhaul.drivers.agents.port_meter", description=__doc__.splitlines()[0])
    ap.add_argument("--ports", required=True, help="comma-separated UDP destination ports")
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--remove", action="store_true", help="delete the rules a meter left, then exit")
    args = ap.parse_args(argv)
    ports = sorted({int(p) for p in args.ports.split(",") if p.strip().isdigit()})
    if not ports or not all(0 < p < 65536 for p in ports):
        ap.error("--ports must be UDP ports 1..65535")
    if args.period <= 0:
        ap.error("--period must be > 0")
    try:
        return remove(ports) if args.remove else run(ports, args.period)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"port_meter: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
