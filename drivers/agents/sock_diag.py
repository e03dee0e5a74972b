"""tcp_info of established TCP sockets from the kernel's sock_diag netlink interface.

IPv4 sockets by default. A server listening on `::` (iperf3 does) accepts IPv4 clients on IPv6
sockets with v4-mapped addresses; `established((AF_INET, AF_INET6))` reads those too, and shows a
v4-mapped address as the IPv4 address it is.

pyroute2 reads the same messages, but decoding every attribute of every socket in Python cost
~3 ms per query per host; this reads only the fields longhaul records, straight from the kernel's
fixed layouts (linux/inet_diag.h, linux/tcp.h), and is several times cheaper (bench/RESULTS.md).
"""

from __future__ import annotations

import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
TCP_ESTABLISHED = 1
INET_DIAG_INFO, INET_DIAG_CONG = 2, 4

_NLMSG = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then a zeroed inet_diag_sockid (48 bytes)
_REQ = struct.Struct("=BBBxI48x")
# inet_diag_msg: family, state, timer, retrans, sockid (sport, dport big-endian, src[16], dst[16], if, cookie[2])
_MSG = struct.Struct("=BBBB2H16s16sI8xIIIII")
_RTA = struct.Struct("=HH")
# tcp_info fields by byte offset: (name, offset, format)
_TCPI = (("mss", 16, "I"), ("unacked", 24, "I"), ("sacked", 28, "I"), ("lost", 32, "I"), ("retrans_out", 36, "I"),
         ("srtt_us", 68, "I"), ("rttvar_us", 72, "I"),
         ("cwnd", 80, "I"), ("retrans_total", 100, "I"), ("bytes_acked", 120, "Q"),
         ("bytes_received", 128, "Q"), ("delivery_rate_Bps", 160, "Q"))


def request(seq: int = 1, family: int = socket.AF_INET) -> bytes:
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1))
    body = _REQ.pack(family, socket.IPPROTO_TCP, ext, 1 << TCP_ESTABLISHED)
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


_V4_MAPPED = bytes(10) + b"\xff\xff"


def address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET6:
        return socket.inet_ntoa(raw[12:16]) if raw.startswith(_V4_MAPPED) else socket.inet_ntop(family, raw)
    return socket.inet_ntoa(raw[:4])


def parse_message(payload: bytes) -> dict:
    """One inet_diag_msg with its attributes -> the fields longhaul records."""
    (family, _state, _timer, _retrans, sport, dport, src, dst, *_rest) = _MSG.unpack_from(payload)
    out = {"src": address(family, src), "sport": socket.ntohs(sport), "dst": address(family, dst),
           "dport": socket.ntohs(dport), "cca": None}
    out.update({name: None for name, _, _ in _TCPI})
    offset = _MSG.size
    while offset + _RTA.size <= len(payload):
        length, kind = _RTA.unpack_from(payload, offset)
        if length < _RTA.size:
            break
        data = payload[offset + _RTA.size: offset + length]
        if kind == INET_DIAG_INFO:
            for name, at, fmt in _TCPI:
                if at + struct.calcsize(fmt) <= len(data):
                    out[name] = struct.unpack_from("=" + fmt, data, at)[0]
        elif kind == INET_DIAG_CONG:
            out["cca"] = data.split(b"\0", 1)[0].decode()
        offset += (length + 3) & ~3
    return out


def parse_dump(buffer: bytes) -> tuple[list[dict], bool]:
    """(sockets, done) from one recv() of a dump reply."""
    sockets, offset = [], 0
    while offset + _NLMSG.size <= len(buffer):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(buffer, offset)
        if length < _NLMSG.size:
            break
        if kind == NLMSG_DONE:
            return sockets, True
        if kind == NLMSG_ERROR:
            errno = -struct.unpack_from("=i", buffer, offset + _NLMSG.size)[0]
            raise OSError(errno, "sock_diag request failed")
        if kind == SOCK_DIAG_BY_FAMILY:
            sockets.append(parse_message(buffer[offset + _NLMSG.size: offset + length]))
        offset += (length + 3) & ~3
    return sockets, False


class SockDiag:
    """A sock_diag socket in the calling process's network namespace."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.seq = 0
        self._buffer = bytearray(1 << 16)

    def established(self, families: tuple[int, ...] = (socket.AF_INET,)) -> list[dict]:
        out = []
        for family in families:
            self.seq += 1
            self.sock.send(request(self.seq, family))
            while True:
                size = self.sock.recv_into(self._buffer)
                sockets, done = parse_dump(bytes(self._buffer[:size]))
                out += sockets
                if done:
                    break
        return out

    def close(self) -> None:
        self.sock.close()
