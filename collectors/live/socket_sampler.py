"""tcp_info of every TCP flow on the senders (10 Hz unless the cell's probe.tcpinfo_hz says
otherwise, up to 100), keyed to flows by port.

Each flow has its own server ports, so a socket belongs to the flow whose port is its destination.
One long-lived probe process per sending machine (drivers/tcpinfo/tcpinfo.c where the setup built
it, else drivers/agents/tcpinfo_probe.py; both read sock_diag netlink and print the same lines)
writes JSON lines, a file per sending host; a reader thread follows them for the live display, and
stop() parses them all. Senders that are namespaces of one machine (Executor.namespace) share one
C probe there, which reads each namespace through a socket of its own: at 100 Hz, eight probes'
wake-ups cost more than their dumps (bench/RESULTS-sampler.md).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from longhaul.collectors.live.acked_rate import CONTROL_BYTES
from longhaul.collectors.store.format import TCPINFO_COLUMNS
from longhaul.drivers.agents.tcpinfo_probe import FIELDS as PROBE_FIELDS
from longhaul.drivers.agents.tcpinfo_probe import NATIVE as NATIVE_PROBE
from longhaul.drivers.ss import Socket
from longhaul.hardware.executors.process import Executor, Process

log = logging.getLogger(__name__)

# tcpinfo.csv's columns, named by the store; Sample.row() gives its values in this order.
COLUMNS = TCPINFO_COLUMNS


@dataclass
class Sample:
    t_s: float
    flow: str
    sock: Socket
    dump_s: float | None = None     # how long the probe's read took (None: an older probe's line)

    def row(self) -> list:
        s = self.sock
        rate = None if s.delivery_rate_bps is None else round(s.delivery_rate_bps / 1e6, 3)
        return [self.t_s, self.flow, s.src, s.sport, s.dst, s.dport, s.cwnd, s.bytes_in_flight, s.srtt_ms,
                s.rttvar_ms, s.retrans_total, rate, s.bytes_acked]


def probe_argv(ports: list[int], period_s: float, native: bool | None = None,
               namespaces: dict[str, Path] | None = None) -> list[str]:
    """The probe in C where the setup built it (native None: if it is there), else in Python; both
    print the same lines. namespaces: namespace path -> the file its lines go to, read by one C
    probe (on stdout, without it, the namespace the probe runs in)."""
    args = ["--period", f"{period_s:g}", "--ports", ",".join(str(p) for p in sorted(ports))]
    for path, out in (namespaces or {}).items():
        args += ["--netns", f"{path}={Path(out).resolve()}"]
    if _native(native):
        return [str(NATIVE_PROBE), *args]
    if namespaces:
        raise ValueError("only the C probe reads several namespaces")
    return [sys.executable, "-m", "longhaul.drivers.agents.tcpinfo_probe", *args]


def _native(native: bool | None) -> bool:
    return NATIVE_PROBE.exists() if native is None else native


# A probe's tick time below this is CLOCK_MONOTONIC (an older longhaul on the host printed that,
# which only namespaces share with the controller); above, the wall clock (epoch seconds).
WALL_CLOCK_FROM = 1e9


class Tick(NamedTuple):
    t: float                        # the middle of the dump, on the probe's clock
    socks: list[Socket]
    dump_s: float | None = None     # the dump's length (an older probe printed none)


def parse_probe_line(line: str) -> Tick | None:
    """One tick of the probe's output; None for the header or junk."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if "t" not in data:
        return None
    socks = []
    for row in data["s"]:
        f = dict(zip(PROBE_FIELDS, row))
        srtt_us, rttvar_us, rate_Bps = f["srtt_us"], f["rttvar_us"], f["delivery_rate_Bps"]
        socks.append(Socket(src=f["src"], sport=f["sport"], dst=f["dst"], dport=f["dport"], cca=f["cca"],
                            cwnd=f["cwnd"], mss=f["mss"], unacked=f["unacked"],
                            srtt_ms=None if srtt_us is None else srtt_us / 1000,
                            rttvar_ms=None if rttvar_us is None else rttvar_us / 1000, retrans_total=f["retrans_total"],
                            delivery_rate_bps=None if rate_Bps is None else rate_Bps * 8,
                            bytes_acked=f["bytes_acked"], bytes_received=f["bytes_received"],
                            sacked=f.get("sacked"), lost=f.get("lost"), retrans_out=f.get("retrans_out")))
    return Tick(float(data["t"]), socks, data.get("d"))


class SocketSampler:
    def __init__(self, senders: dict[str, Executor], ports: dict[int, str], workdir: Path, period_s: float = 0.1,
                 native: bool | None = None):
        """senders: host name -> executor; ports: server port -> flow name; native: the C probe
        (None: where it is built)."""
        self.native = native
        self.senders = senders
        self.ports = ports
        self.workdir = Path(workdir)
        self.period_s = period_s
        self.samples: list[Sample] = []
        self.ticks = 0          # summed over hosts
        self._procs: dict[str, Process] = {}
        self._latest: dict[str, dict[str, list[Socket]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._wall0 = 0.0

    def _out(self, host: str) -> Path:
        return self.workdir / f"tcpinfo-{host}.jsonl"

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._wall0 = time.time() - (time.monotonic() - t0)      # t0 on the wall clock the probes print
        ports = list(self.ports)
        machines: dict[str, tuple[Executor, dict[str, Path]]] = {}
        for host, executor in self.senders.items():
            where = executor.namespace() if _native(self.native) else None
            if where is None:
                self._procs[host] = executor.start(probe_argv(ports, self.period_s, self.native), label=f"tcpinfo-{host}",
                                                   stdout=self._out(host), stderr=self.workdir / f"tcpinfo-{host}.err")
            else:
                machine, path = where
                machines.setdefault(machine.name, (machine, {}))[1][path] = self._out(host)
        for name, (machine, outputs) in machines.items():
            self._procs[name] = machine.start(probe_argv(ports, self.period_s, True, outputs), label=f"tcpinfo-{name}",
                                              stderr=self.workdir / f"tcpinfo-{name}.err")
        self._thread = threading.Thread(target=self._follow, name="socket-sampler", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        """Keep the newest tick of every host for current(); the files are parsed whole at stop()."""
        offsets = {host: 0 for host in self.senders}
        while not self._stop.wait(0.5):
            for host in self.senders:
                try:
                    with open(self._out(host)) as handle:
                        handle.seek(offsets[host])
                        lines = handle.readlines()
                        if lines and not lines[-1].endswith("\n"):
                            lines.pop()   # a line still being written: read it next time
                        offsets[host] += sum(len(line) for line in lines)
                except OSError:
                    continue
                for line in reversed(lines):
                    tick = parse_probe_line(line)
                    if tick:
                        self._latest[host] = self._by_flow(tick.socks)
                        break

    def _by_flow(self, socks: list[Socket]) -> dict[str, list[Socket]]:
        out: dict[str, list[Socket]] = {}
        for sock in socks:
            flow = self.ports.get(sock.dport)
            if flow is not None:
                out.setdefault(flow, []).append(sock)
        return out

    def current(self) -> dict[str, dict]:
        """Per flow, right now: summed delivery rate and the largest smoothed RTT of its sockets."""
        out = {}
        for per_host in list(self._latest.values()):
            for flow, socks in per_host.items():
                rates = [s.delivery_rate_bps for s in socks if s.delivery_rate_bps and (s.bytes_acked or 0) > 65536]
                rtts = [s.srtt_ms for s in socks if s.srtt_ms]
                out[flow] = {"mbps": sum(rates) / 1e6 if rates else None, "srtt_ms": max(rtts) if rtts else None}
        return out

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        for proc in self._procs.values():
            proc.stop()
        for host in self.senders:
            for line in _read(self._out(host)).splitlines():
                tick = parse_probe_line(line)
                if tick is None:
                    continue
                self.ticks += 1
                t_s = round(tick.t - (self._wall0 if tick.t > WALL_CLOCK_FROM else self._t0), 3)
                for flow, socks in self._by_flow(tick.socks).items():
                    self.samples.extend(Sample(t_s, flow, sock, tick.dump_s) for sock in socks)
        for name, proc in self._procs.items():
            if proc.poll() not in (0, None, -15):
                log.warning("tcp_info probe on %s exited %s: %s", name, proc.poll(), proc.read_stderr()[-300:])
        self.samples.sort(key=lambda s: s.t_s)
        return self.samples


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:         # a probe that never started: no ticks, which the trial reports
        return ""


def control_sockets(samples: list[Sample]) -> set[tuple[str, int]]:
    """iperf3 keeps a control connection to the same port as its data; it carries a few hundred
    bytes, so any socket that never had CONTROL_BYTES acknowledged is taken for control."""
    acked: dict[tuple[str, int], int] = {}
    for sample in samples:
        key = (sample.sock.src, sample.sock.sport)
        acked[key] = max(acked.get(key, 0), sample.sock.bytes_acked or 0)
    return {key for key, value in acked.items() if value < CONTROL_BYTES}
