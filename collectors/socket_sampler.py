"""tcp_info of every TCP flow, sampled at 10 Hz on the senders and keyed to flows by port.

Each flow has its own server port, so a socket belongs to the flow whose port is its destination.
One `ss` per sending host per tick keeps the cost flat in the number of flows.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..drivers import ss
from ..hardware.executor import CommandError, Executor

log = logging.getLogger(__name__)

COLUMNS = ["t_s", "flow", "src", "sport", "dst", "dport", "cwnd", "bytes_in_flight", "srtt_ms", "rttvar_ms",
           "retrans_total", "delivery_rate_mbps", "bytes_acked"]


@dataclass
class Sample:
    t_s: float
    flow: str
    sock: ss.Socket

    def row(self) -> list:
        s = self.sock
        rate = None if s.delivery_rate_bps is None else round(s.delivery_rate_bps / 1e6, 3)
        return [self.t_s, self.flow, s.src, s.sport, s.dst, s.dport, s.cwnd, s.bytes_in_flight, s.srtt_ms,
                s.rttvar_ms, s.retrans_total, rate, s.bytes_acked]


class SocketSampler:
    def __init__(self, senders: dict[str, Executor], ports: dict[int, str], period_s: float = 0.1):
        """senders: host name -> executor; ports: server port -> flow name."""
        self.senders = senders
        self.ports = ports
        self.period_s = period_s
        self.samples: list[Sample] = []
        self.ticks = 0
        self._latest: dict[str, list[ss.Socket]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._thread = threading.Thread(target=self._loop, name="socket-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at += self.period_s
            while next_at < time.monotonic():
                next_at += self.period_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def sample_once(self) -> None:
        latest: dict[str, list[ss.Socket]] = {}
        for host, executor in self.senders.items():
            t_s = round(time.monotonic() - self._t0, 3)
            try:
                res = executor.run(ss.argv(), timeout=5, check=False)
            except CommandError as exc:
                log.warning("socket sample on %s failed: %s", host, exc)
                continue
            for sock in ss.parse(res.stdout):
                flow = self.ports.get(sock.dport)
                if flow is None:
                    continue
                self.samples.append(Sample(t_s, flow, sock))
                latest.setdefault(flow, []).append(sock)
        self._latest = latest
        self.ticks += 1

    def current(self) -> dict[str, dict]:
        """Per flow, right now: summed delivery rate and the largest smoothed RTT of its sockets."""
        out = {}
        for flow, socks in self._latest.items():
            rates = [s.delivery_rate_bps for s in socks if s.delivery_rate_bps]
            rtts = [s.srtt_ms for s in socks if s.srtt_ms]
            out[flow] = {"mbps": sum(rates) / 1e6 if rates else None, "srtt_ms": max(rtts) if rtts else None}
        return out

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        return self.samples


def control_sockets(samples: list[Sample]) -> set[tuple[str, int]]:
    """iperf3 keeps a control connection to the same port as its data; it carries a few hundred
    bytes, so any socket that never had 64 KB acknowledged is taken for control."""
    acked: dict[tuple[str, int], int] = {}
    for sample in samples:
        key = (sample.sock.src, sample.sock.sport)
        acked[key] = max(acked.get(key, 0), sample.sock.bytes_acked or 0)
    return {key for key, value in acked.items() if value < 65536}
