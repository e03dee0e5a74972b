"""Runs on a lab host: ICMP echo round trips to a target, to the microsecond.

fping prints a reply's RTT in whole milliseconds above 100 ms and in tenths above 10 ms, so a lab
configured for 128 ms could not be checked to 0.2 ms. This sends `count` echo requests `period_ms`
apart and times each reply by the kernel's receive stamp (SO_TIMESTAMPNS: when the reply reached
this host, not when this program woke), against the wall clock read just before its request was
sent (a few microseconds before it leaves). One echo goes first and is not counted: it resolves the
path's neighbours (ARP at every hop), which on a freshly built lab of emulated VMs took long enough
that a burst queued behind it read 10 ms too high.

    python -m longhaul.drivers.agents.icmp_echo 10.0.1.2 --count 30 --period-ms 1 --timeout-ms 900

Output: one JSON line {"target": address, "socket": "raw" | "ping", "size": payload bytes,
"rtts_ms": [rtt or null per request, in order]}. A raw ICMP socket needs root (or CAP_NET_RAW);
without it the unprivileged ping socket is used where net.ipv4.ping_group_range allows it. Exit
2 when neither can be opened or the target does not resolve.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)       # Linux: SCM_TIMESTAMPNS == SO_TIMESTAMPNS
ECHO = {socket.AF_INET: (8, 0, socket.IPPROTO_ICMP), socket.AF_INET6: (128, 129, socket.IPPROTO_ICMPV6)}
PAYLOAD_BYTES = 56      # ping's and fping's default: 64 B of ICMP


def argv(target: str, count: int, period_ms: float = 1.0, timeout_ms: int = 900) -> list[str]:
    return [sys.executable, "-m", "longhaul.drivers.agents.icmp_echo", target, "--count", str(count),
            "--period-ms", f"{period_ms:g}", "--timeout-ms", str(timeout_ms)]


def parse(text: str) -> list[float | None]:
    """The agent's output -> RTTs in ms in request order, None for a request with no reply."""
    for line in reversed(text.splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("rtts_ms"), list):
            return [None if r is None else float(r) for r in obj["rtts_ms"]]
    raise ValueError(f"no icmp_echo result in: {text.strip()[:200]!r}")


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def request(family: int, ident: int, seq: int, payload: bytes) -> bytes:
    kind = ECHO[family][0]
    header = struct.pack("!BBHHH", kind, 0, 0, ident, seq)
    if family == socket.AF_INET6:          # the kernel sums ICMPv6 (it needs the pseudo-header)
        return header + payload
    return struct.pack("!BBHHH", kind, 0, checksum(header + payload), ident, seq) + payload


def reply(data: bytes, family: int, raw: bool) -> tuple[int, int] | None:
    """(ident, seq) of an echo reply, None for anything else a raw socket also sees."""
    if raw and family == socket.AF_INET:
        data = data[(data[0] & 0x0F) * 4:] if data else data       # raw IPv4 delivers the IP header
    if len(data) < 8 or data[0] != ECHO[family][1]:
        return None
    ident, seq = struct.unpack("!HH", data[4:8])
    return ident, seq


def open_socket(family: int) -> tuple[socket.socket, bool]:
    proto = ECHO[family][2]
    try:
        return socket.socket(family, socket.SOCK_RAW, proto), True
    except PermissionError:
        return socket.socket(family, socket.SOCK_DGRAM, proto), False     # the kernel's ping socket


def _stamp_ns(ancdata) -> int | None:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec * 1_000_000_000 + nsec
    return None


def _warm_up(sock, family: int, address, ident: int, raw: bool, seq: int, payload: bytes, timeout_ms: int) -> None:
    """One uncounted echo (sequence number `seq`, past the burst's), answered or timed out."""
    sock.sendto(request(family, ident, seq, payload), address)
    deadline = time.monotonic() + timeout_ms / 1000
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return
        while True:
            try:
                data = sock.recv(2048)
            except BlockingIOError:
                break
            ids = reply(data, family, raw)
            if ids is not None and ids[1] == seq and (not raw or ids[0] == ident):
                return


def measure(target: str, count: int, period_ms: float, timeout_ms: int) -> dict:
    family, _, _, _, address = socket.getaddrinfo(target, None, type=socket.SOCK_RAW)[0]
    sock, raw = open_socket(family)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        # a ping socket picks its own identifier (its "port"); a raw one sees every host's replies
        ident = os.getpid() & 0xFFFF
        if not raw:
            sock.bind(("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0))
            ident = sock.getsockname()[1]
        payload = bytes(PAYLOAD_BYTES)
        _warm_up(sock, family, address, ident, raw, count, payload, timeout_ms)
        # built before any request's clock starts: a checksum computed in Python inside an
        # emulated VM between the stamp and the send would count in the round trip
        requests = [request(family, ident, k, payload) for k in range(count)]
        sent: list[int | None] = [None] * count
        got: list[float | None] = [None] * count
        start = time.monotonic()
        k = 0
        waiting = count
        while waiting:
            now = time.monotonic()
            if k < count and now >= start + k * period_ms / 1000:
                sent[k] = time.time_ns()
                sock.sendto(requests[k], address)
                k += 1
                continue
            if k == count and now >= start + (count - 1) * period_ms / 1000 + timeout_ms / 1000:
                break
            until = start + k * period_ms / 1000 if k < count else \
                start + (count - 1) * period_ms / 1000 + timeout_ms / 1000
            ready, _, _ = select.select([sock], [], [], max(0.0, until - now))
            if not ready:
                continue
            while True:
                try:
                    data, ancdata, _, _ = sock.recvmsg(2048, socket.CMSG_SPACE(16))
                except BlockingIOError:
                    break
                arrived = _stamp_ns(ancdata) or time.time_ns()
                ids = reply(data, family, raw)
                if ids is None or (raw and ids[0] != ident):
                    continue
                seq = ids[1]
                if seq < count and sent[seq] is not None and got[seq] is None:
                    got[seq] = round((arrived - sent[seq]) / 1e6, 4)
                    waiting -= 1
    return {"target": address[0], "socket": "raw" if raw else "ping", "size": PAYLOAD_BYTES, "rtts_ms": got}


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--period-ms", type=float, default=1.0)
    ap.add_argument("--timeout-ms", type=int, default=900)
    a = ap.parse_args(args)
    if not 1 <= a.count <= 65535 or not 0 < a.period_ms <= 60_000 or not 1 <= a.timeout_ms <= 60_000:
        ap.error("count 1-65535 (one more sequence number is the warm-up's), period-ms > 0 and timeout-ms 1-60000")
    try:
        result = measure(a.target, a.count, a.period_ms, a.timeout_ms)
    except (OSError, socket.gaierror) as exc:
        print(f"icmp_echo: {a.target}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
