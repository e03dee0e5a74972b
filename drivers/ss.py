"""ss -tin: tcp_info of every established TCP socket, as the kernel reports it."""

from __future__ import annotations

import re
from dataclasses import dataclass


def argv() -> list[str]:
    return ["ss", "-tinH", "state", "established"]


@dataclass(frozen=True)
class Socket:
    src: str
    sport: int
    dst: str
    dport: int
    cca: str | None
    cwnd: int | None
    mss: int | None
    unacked: int | None
    srtt_ms: float | None
    rttvar_ms: float | None
    retrans_total: int | None
    delivery_rate_bps: float | None
    bytes_acked: int | None
    bytes_received: int | None
    sacked: int | None = None        # packets SACKed, lost (marked) and retransmitted-unacked
    lost: int | None = None
    retrans_out: int | None = None

    @property
    def bytes_in_flight(self) -> int | None:
        """The kernel's tcp_packets_in_flight() in bytes: packets out, less those SACKed or marked
        lost, plus retransmissions in flight. `unacked` alone counts the SACKed and lost packets
        too, and during loss recovery reads far above cwnd (tests/data/ss.txt: 8262 vs cwnd 5492)."""
        if self.unacked is None or self.mss is None:
            return 0 if self.mss is not None else None
        packets = self.unacked - (self.sacked or 0) - (self.lost or 0) + (self.retrans_out or 0)
        return max(0, packets) * self.mss


_ADDR = re.compile(r"^(?:\S+\s+)?\d+\s+\d+\s+(\S+):(\d+)\s+(\S+):(\d+)")
_KV = re.compile(r"([a-z_]+):(\S+)")
_RATE = re.compile(r"delivery_rate ([0-9.]+)([KMG]?)bps")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
_KNOWN_CCAS = {"cubic", "bbr", "reno", "htcp", "scalable", "bic", "vegas", "westwood", "dctcp", "illinois", "hybla", "bbr2", "bbr3"}


def _host(addr: str) -> str:
    return addr.strip("[]").split("%")[0]


def parse(text: str) -> list[Socket]:
    """Parse `ss -tinH`: a socket line, then an indented line of tcp_info fields."""
    sockets = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _ADDR.match(lines[i].strip())
        if not match:
            i += 1
            continue
        info = lines[i + 1] if i + 1 < len(lines) and lines[i + 1][:1].isspace() else ""
        sockets.append(_socket(match, info))
        i += 2 if info else 1
    return sockets


def _socket(match: re.Match, info: str) -> Socket:
    fields = dict(_KV.findall(info))
    words = info.split()
    cca = next((w for w in words if w in _KNOWN_CCAS), None)
    rtt = fields.get("rtt", "")
    srtt, _, var = rtt.partition("/")
    retrans = fields.get("retrans", "")
    rate = _RATE.search(info)

    def num(key, kind=int):
        value = fields.get(key)
        try:
            return kind(value) if value is not None else None
        except ValueError:
            return None

    return Socket(
        src=_host(match.group(1)), sport=int(match.group(2)), dst=_host(match.group(3)), dport=int(match.group(4)),
        cca=cca, cwnd=num("cwnd"), mss=num("mss"), unacked=num("unacked"),
        srtt_ms=float(srtt) if srtt else None, rttvar_ms=float(var) if var else None,
        retrans_total=int(retrans.partition("/")[2]) if "/" in retrans else None,
        retrans_out=int(retrans.partition("/")[0]) if "/" in retrans else None,
        sacked=num("sacked"), lost=num("lost"),
        delivery_rate_bps=float(rate.group(1)) * _UNITS[rate.group(2)] if rate else None,
        bytes_acked=num("bytes_acked"), bytes_received=num("bytes_received"),
    )
