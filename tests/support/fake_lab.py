"""The fake lab behind tests/support/fakes.py's backend. Its executors answer the commands the
trial, the verification and the live collectors run by the program each one runs (`program(argv)`:
an agent's module, a named shell loop's name, the executable; tables `FakeExecutor.RUN` and
`FakeLab.STARTED`), with canned output of the real tools (tests/data): iperf3 client JSON, fping
bursts at the fake path's RTT, `ss` readiness lines, the shaper meter's `tc -s -j` samples at the
fake path's rate, the tcp_info probe's JSON lines, and a plan replay's leg agent's events for the
schedule it was given. Nothing is executed; processes "run" until stopped (servers, probes) or
exit at once (clients), so a trial takes as long as its flows' start times, not their lengths.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from fake_process import INLINE_PYTHON, PIDS, FakeProcess, program

from longhaul.appliance.run.trial import BASE_PORT, PORTS_PER_FLOW
from longhaul.appliance.run.verify import probe_ports, probe_streams
from longhaul.collectors.live.rtt_probe import LOOP as RTT_LOOP
from longhaul.collectors.live.shaper_meter import LOOP as SHAPER_LOOP
from longhaul.collectors.live.tcp_memory import NETSTAT
from longhaul.drivers import ss
from longhaul.drivers.agents import dpdk_port, icmp_echo, ifrate, port_meter, tcpinfo_probe
from longhaul.drivers.agents.port_meter import COMMENT as ARRIVALS_COMMENT
from longhaul.drivers.agents.replay_leg import MODULE as LEG_AGENT
from longhaul.drivers.agents.replay_leg import PORT as LEG_PORT
from longhaul.drivers.agents.tcpinfo_probe import FIELDS as PROBE_FIELDS
from longhaul.drivers.agents.tcpinfo_probe import NATIVE as NATIVE_PROBE
from longhaul.drivers.dpdk_testpmd import EXECUTABLE as DPDK_TESTPMD
from longhaul.drivers.gridftp import SERVER as GRIDFTP_SERVER
from longhaul.drivers.trex_stl import RUNNER as TREX_RUNNER
from longhaul.hardware.backends.base import LabSpec, LinkSettings
from longhaul.hardware.executors.process import WRITER, Completed
from longhaul.hardware.routers.linux_tc import LinuxTc
from longhaul.hardware.topology import GENERATOR, dumbbell

DATA = Path(__file__).parents[1] / "data"
ICMP_ECHO = icmp_echo.__name__
TCPINFO_PROBE = tcpinfo_probe.__name__
PORT_METER = port_meter.__name__
IFRATE = ifrate.__name__
IPERF3_TCP = DATA / "iperf3_tcp_p2.json"   # 2 streams, 6 s: 302536432 bytes received in 6.00012 s
TESTPMD = DATA / "dpdk" / "testpmd_timeout.txt"
DPDK_PORT_AGENT = dpdk_port.__name__
NETSTAT_TEXT = (DATA / "netstat-tcp-pressure.txt").read_text()    # TCPMemoryPressures 20, ...Chrono 656


@dataclass
class FakePath:
    """What the fake lab's path does, relative to the cell's configuration."""

    rtt_offset_ms: float = 0.0        # measured RTT = configured + this (verification refuses beyond tolerance)
    rate_factor: float = 1.0          # shaper rate = configured x this
    client_output: str | None = None  # the iperf3 client's stdout (default: tests/data/iperf3_tcp_p2.json)
    rtt_rounds: int = 5               # fping rounds the probe reports per trial
    socket_ticks: int = 20            # tcp_info ticks (10 Hz) the sampler reports per trial
    generator: bool = False           # the lab has a traffic generator (G1) for trex flows
    generator_mbps: float = 40.0      # what TRex sends and the receiver's meter counts, per second
    dpdk_port: bool = False           # the senders have a DPDK port in the inventory (pair facts' pci)
    port_kept: bool = False           # giving that port back fails (dpdk_port restore exits 1)
    arrival_mbps: float = 8.0         # UDP payload the receivers' arrival meter counts per flow, per second
    process_start_s: float = 0.0      # how long starting a process takes (an SSH host under TCG: seconds)
    testpmd_runs_s: float = 0.0       # how long testpmd runs: its start-up, then its flood
    retunes: bool = True              # a cell with other end-host tuning is taken in place (Lab.retune)
    tcp_pressures: int = 0            # an end host's entries into TCP memory pressure between two reads


class FakeExecutor:
    """Executor's interface for one lab host; every command is recorded in lab.commands."""

    remote, lost = False, None          # a host that exists only as data cannot be lost

    def __init__(self, name: str, lab: FakeLab):
        self.name = name
        self.lab = lab

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = True, input: str | None = None) -> Completed:
        self.lab.commands.append((self.name, list(argv)))
        answer = self.RUN.get(program(argv))
        return answer(self, argv, input) if answer else Completed(argv, 0, "", "")

    # --- what a command that runs to its end answers, by the program it runs ---

    def _echoes(self, argv, _input) -> Completed:
        """The idle RTT's echoes."""
        count = int(argv[argv.index("--count") + 1])
        return Completed(argv, 0, json.dumps({"target": argv[3], "socket": "raw", "size": 56,
                                              "rtts_ms": [self.lab.rtt_ms] * count}) + "\n", "")

    def _ss(self, argv, _input) -> Completed:
        if argv == ["ss", "-lntH"]:                      # every listener: the servers started here
            ports = [a[a.index("-p") + 1] for h, a in self.lab.commands if h == self.name and "-p" in a
                     and ("-s" in a or program(a) == GRIDFTP_SERVER)]
            return Completed(argv, 0, "".join(f"LISTEN 0 5 *:{p} *:*\n" for p in ports), "")
        if argv == ss.argv():                            # the verification probe's sockets at the receiver
            return Completed(argv, 0, self.lab.probe_sockets(), "")
        return Completed(argv, 0, f"LISTEN 0 5 *:{argv[-1].lstrip(':')} *:*\n", "")   # readiness: it listens

    def _iperf3(self, argv, _input) -> Completed:
        """The verification's rate probe (a client)."""
        return Completed(argv, 0, self.lab.client_output() if "-c" in argv else "", "")

    def _cat(self, argv, _input) -> Completed:
        """The ifrate meter's ready file; the kernel's TcpExt counters (tests/data, captured), each
        read `tcp_pressures` entries and 100 ms of pressure on from the last."""
        if argv[-1] == NETSTAT:
            reads = sum(1 for h, a in self.lab.commands if h == self.name and a == argv) - 1
            entered, ms = reads * self.lab.path.tcp_pressures, reads * self.lab.path.tcp_pressures * 100
            return Completed(argv, 0, NETSTAT_TEXT.replace(" 20 656 ", f" {entered} {ms} "), "")
        return Completed(argv, 0, "ready\n" if argv[-1].endswith(".ready") else "", "")

    def _mktemp(self, argv, _input) -> Completed:
        return Completed(argv, 0, f"/tmp/fake.{next(PIDS)}\n", "")

    def _dpdk_port(self, argv, _input) -> Completed:
        if "restore" in argv and self.lab.path.port_kept:
            return Completed(argv, 1, "", "dpdk_port restore: 0000:00:10.0 is on uio_pci_generic, was virtio-pci\n")
        return Completed(argv, 0, "", "")

    def _write(self, argv, input) -> Completed:
        """A file written on the host."""
        self.lab.files[argv[-1]] = input or ""
        return Completed(argv, 0, "", "")

    RUN = {ICMP_ECHO: _echoes, "ss": _ss, "iperf3": _iperf3, "cat": _cat, "mktemp": _mktemp,
           DPDK_PORT_AGENT: _dpdk_port, WRITER: _write}

    def stop_processes(self, procs: list, term_timeout: float = 3.0, sig: int = 15) -> None:
        for proc in procs:
            proc.stop(term_timeout=term_timeout, sig=sig)

    def namespace(self) -> None:
        return None             # a host of its own: a probe each

    def start(self, argv: list[str], label: str = "", stdout: Path | None = None,
              stderr: Path | None = None) -> FakeProcess:
        self.lab.commands.append((self.name, list(argv)))
        time.sleep(self.lab.path.process_start_s)
        runs_s, output = self.lab.respond(self.name, argv)
        return FakeProcess(argv, self.name, label or argv[0], stdout, stderr, runs_s, output)


class FakeLab:
    """The Lab contract on a dumbbell that exists only as data."""

    def __init__(self, spec: LabSpec, tag: str, path: FakePath, workdir: Path):
        self.topo = dumbbell(tag, spec.pairs, spec.access_rate_mbps, spec.bottleneck_rate_mbps, spec.mtu)
        self.settings = spec.link
        self.spec = spec
        self.path = path
        self.workdir = workdir
        self.record = None
        self.built = False
        self.retuned: list[LinkSettings] = []
        self.torn_down = False
        self.commands: list[tuple[str, list[str]]] = []
        self._probe_t0: float | None = None       # when the verification's probe sockets were first read
        self.files: dict[str, str] = {}

    @property
    def rtt_ms(self) -> float:
        return self.settings.rtt_ms + self.path.rtt_offset_ms

    def executor(self, host: str) -> FakeExecutor:
        if not (host == GENERATOR and self.path.generator):
            self.topo.host(host)             # a KeyError for a host the lab does not have
        return FakeExecutor(host, self)

    def address(self, host: str) -> str:
        return self.topo.address(host)

    def router_os(self, host: str) -> LinuxTc:
        return LinuxTc()

    def pair_facts(self, pair: int) -> dict:
        facts = {"iface": f"s{pair}-eth0", "dst_mac": "02:00:00:00:01:01", "src_ip": self.address(f"S{pair}"),
                 "dst_ip": self.address(f"D{pair}"), "rx_iface": f"d{pair}-eth0"}
        return {**facts, "pci": "0000:00:10.0", "pci_src_ip": "10.1.1.3"} if self.path.dpdk_port else facts

    def generator_facts(self, pair: int) -> dict:
        if not self.path.generator:
            raise KeyError(GENERATOR)
        return {"trex_path": "/opt/trex/v3.04", "trex_ports": [0], "src_ip": "10.1.3.2", "line_rate_mbps": 10000,
                "dst_ip": self.address(f"D{pair}"), "rx_iface": f"d{pair}-eth0"}

    def build(self) -> None:
        self.built = True

    def retune(self, settings: LinkSettings) -> bool:
        """As the real labs: only the end hosts' tuning, unless the path says it cannot."""
        if not self.path.retunes or (settings.rtt_ms, settings.queue_bytes) != (self.settings.rtt_ms,
                                                                               self.settings.queue_bytes):
            return False
        self.retuned.append(settings)
        self.settings = settings
        return True

    # --- the tools' output ---

    def fping_line(self, target: str) -> str:
        return f"{target} : " + " ".join(f"{self.rtt_ms:.2f}" for _ in range(10))

    def client_output(self) -> str:
        return self.path.client_output if self.path.client_output is not None else IPERF3_TCP.read_text()

    def respond(self, host: str, argv: list[str]) -> tuple[float, str]:
        """(how long the process runs, its stdout) for a started command, by the program it runs."""
        answer = self.STARTED.get(program(argv))
        return answer(self, host, argv) if answer else (0.0, "")

    # --- what a started command answers: servers, probes and meters run until they are stopped ---

    def _rtt_loop(self, _host, argv) -> tuple[float, str]:
        return math.inf, self._burst_rounds(argv[-1])

    def _shaper_loop(self, _host, argv) -> tuple[float, str]:
        return math.inf, self._shaper_samples(float(argv[5]))

    def _tcpinfo_probe(self, host, argv) -> tuple[float, str]:
        return math.inf, self._tcpinfo(host, [int(p) for p in argv[argv.index("--ports") + 1].split(",")])

    def _leg(self, _host, argv) -> tuple[float, str]:
        return 0.0, self._leg_events(json.loads(self.files[argv[-1]]))

    def _server(self, _host, _argv) -> tuple[float, str]:
        return math.inf, ""

    def _port_meter(self, _host, argv) -> tuple[float, str]:
        if "--remove" in argv:
            return 0.0, ""
        return math.inf, self._arrivals([int(p) for p in argv[argv.index("--ports") + 1].split(",")])

    def _ifrate(self, _host, _argv) -> tuple[float, str]:
        return math.inf, self._meter_lines()

    def _inline_python(self, _host, argv) -> tuple[float, str]:
        return (0.0, self._trex_lines(json.loads(argv[-1]))) if argv[2] == TREX_RUNNER else (0.0, "")

    def _testpmd(self, _host, _argv) -> tuple[float, str]:
        return self.path.testpmd_runs_s, TESTPMD.read_text()

    def _iperf3(self, _host, argv) -> tuple[float, str]:
        if "-s" in argv:
            return math.inf, ""
        if int(argv[argv.index("-p") + 1]) in self._verify_ports():
            return math.inf, self.client_output()      # the verification's probe: until it is stopped
        return 0.0, self.client_output()

    STARTED = {RTT_LOOP: _rtt_loop, SHAPER_LOOP: _shaper_loop, TCPINFO_PROBE: _tcpinfo_probe,
               NATIVE_PROBE.name: _tcpinfo_probe, LEG_AGENT: _leg, GRIDFTP_SERVER: _server,
               PORT_METER: _port_meter, IFRATE: _ifrate, INLINE_PYTHON: _inline_python,
               DPDK_TESTPMD: _testpmd, "iperf3": _iperf3}

    def probe_sockets(self) -> str:
        """`ss -tinH` on the receiver while the verification's probe runs: its sockets' bytes
        received grow at the shaper's payload rate from the first time it is asked."""
        now = time.monotonic()
        if self._probe_t0 is None:
            self._probe_t0 = now
        rate = self.spec.bottleneck_rate_mbps * self.path.rate_factor * 1e6 / 8 * (self.spec.mtu - 52) / (self.spec.mtu + 14)
        ports = sorted(self._verify_ports())
        each = int(rate * (now - self._probe_t0) / len(ports))
        return "".join(f"0 0 10.2.1.2:{port} 10.1.1.2:{40000 + k}\n\t cubic mss:1448 cwnd:10 bytes_received:{each}\n"
                       for k, port in enumerate(ports))

    def _verify_ports(self) -> set[int]:
        return probe_ports(self._verify_streams())

    def _verify_streams(self) -> int:
        return probe_streams(self.spec.bottleneck_rate_mbps * 1e6 / 8 * self.settings.rtt_ms / 1e3)

    def _meter_lines(self, seconds: int = 3) -> str:
        per_s = int(self.path.generator_mbps * 1e6 / 8)
        lines = [{"event": "ready"}] + [{"t": float(k), "seconds": 1.0, "bytes": per_s, "packets": per_s // 1514}
                                        for k in range(1, seconds + 1)]
        lines.append({"event": "end", "bytes": per_s * seconds, "packets": per_s // 1514 * seconds})
        return "".join(json.dumps(x) + "\n" for x in lines)

    def _arrivals(self, ports: list[int], seconds: int = 8) -> str:
        """port_meter's JSON lines: its header, then 10 Hz ticks on the wall clock in which the first
        port of each flow counts path.arrival_mbps of 1000-byte datagrams from the meter's start."""
        packets = int(self.path.arrival_mbps * 1e6 / 8 / 10 / 1000)      # per tick
        t0, lines = time.time(), [{"ports": ports, "source": "iptables", "rules": ARRIVALS_COMMENT}]
        for k in range(seconds * 10 + 1):
            n = packets * k
            lines.append({"t": round(t0 + k * 0.1, 4),
                          "c": {str(p): [n * 1028, n] if (p - BASE_PORT) % PORTS_PER_FLOW == 0 else [0, 0]
                                for p in ports}})
        return "".join(json.dumps(x) + "\n" for x in lines)

    def _trex_lines(self, args: dict, seconds: int = 3) -> str:
        """The TRex runner's JSON lines, as drivers/trex_stl.py's RUNNER prints them."""
        per_s = int(self.path.generator_mbps * 1e6 / 8)
        pkts = per_s // 1514
        lines = [{"event": "start", "ts": time.time()}]
        lines += [{"opackets": pkts, "obytes": per_s, "ipackets": 0, "ibytes": 0, "t": float(k)}
                  for k in range(1, seconds + 1)]
        lines.append({"event": "end", "seconds": float(seconds), "warnings": [],
                      "total": {"opackets": pkts * seconds, "obytes": per_s * seconds, "ipackets": 0, "ibytes": 0},
                      "ports": {str(p): {} for p in args["ports"]}})
        return "".join(json.dumps(x) + "\n" for x in lines)

    def _burst_rounds(self, target: str) -> str:
        """rtt_probe's loop: `T <epoch>` then fping's burst line, one round a second from now."""
        now = time.time()
        return "".join(f"T {now + k:.6f}\n{self.fping_line(target)}\n" for k in range(self.path.rtt_rounds))

    def _shaper_samples(self, period_s: float) -> str:
        """shaper_meter's loop: the router's clock, `tc -s -j qdisc show` of a tbf that keeps a
        backlog and sends at the path's rate, then the clock again."""
        rate_bps = self.spec.bottleneck_rate_mbps * self.path.rate_factor * 1e6
        t0, out = time.time(), []
        for k in range(int(5 / period_s)):
            sent = int(rate_bps / 8 * k * period_s)
            out.append(f"{t0 + k * period_s:.6f}\n"
                       + json.dumps([{"kind": "tbf", "bytes": sent, "backlog": 30000, "overlimits": k}]) + "\n"
                       + f"={t0 + k * period_s:.6f}\n")
        return "".join(out)

    def _leg_events(self, schedule: dict) -> str:
        """The leg agent's events: each transfer launched at its arrival on its class's next port
        and done 1 s later with the canned client output; BE capped at each OD arrival."""
        events = [{"ev": "start", "epoch": time.time()}]
        ports = {True: itertools.cycle(schedule["ports"]["od"]), False: itertools.cycle(schedule["ports"]["be"])}
        sent = {True: 0, False: 0}
        for i, transfer in enumerate(schedule["transfers"]):
            t, od = transfer["arrival_s"], transfer["od"]
            assert any(LEG_PORT in arg for arg in transfer["argv"])
            events.append({"ev": "launch", "i": i, "t": t, "port": next(ports[od]), "attempt": 1})
            if od and schedule["caps"]:
                events.append({"ev": "cap", "t": t, "bps": schedule["caps"]["capacity_bps"] * 0.6})
            events.append({"ev": "exit", "i": i, "t": t + 1.0, "attempt": 1, "code": 0, "retry": False,
                           "stdout": self.client_output(), "stderr": ""})
            sent[od] += 1_000_000
            events.append({"ev": "sample", "t": t + 1.0, "od": sent[True], "be": sent[False], "other": 0,
                           "cap": None, "od_rate": None})
        events.append({"ev": "end", "t": events[-1]["t"], "reason": "done", "error": None})
        return "".join(json.dumps(e) + "\n" for e in events)

    def _tcpinfo(self, host: str, ports: list[int]) -> str:
        """tcpinfo_probe's JSON lines: one data socket to the first port of each flow whose
        receiver listens on this sender's pair (iperf3's servers start before the sampler), plus
        iperf3's control connection (under 64 KB acknowledged) to the same port."""
        pair = int(host[1:])
        src, dst = self.address(host), self.address(f"D{pair}")
        listening = {int(argv[argv.index("-p") + 1]) for h, argv in self.commands
                     if h == f"D{pair}" and argv[0] == "iperf3" and "-s" in argv}
        firsts = [p for p in ports if (p - BASE_PORT) % PORTS_PER_FLOW == 0 and p in listening]
        lines = [json.dumps({"fields": PROBE_FIELDS})]
        t0 = time.time()                     # the probe's ticks are wall-clock times
        for k in range(self.path.socket_ticks):
            socks = []
            for port in firsts:
                data = {"src": src, "sport": 40000 + port % 100, "dst": dst, "dport": port, "cca": self.settings.cca,
                        "cwnd": 100 + k, "mss": 1448, "unacked": 50, "srtt_us": int(self.rtt_ms * 1000),
                        "rttvar_us": 1000, "retrans_total": k, "delivery_rate_Bps": 50_000_000 // 8,
                        "bytes_acked": 1_000_000 * (k + 1), "bytes_received": 0, "sacked": 0, "lost": 0,
                        "retrans_out": 0}
                control = {**data, "sport": data["sport"] + 1, "bytes_acked": 200, "cwnd": 10}
                socks += [[s[f] for f in PROBE_FIELDS] for s in (data, control)]
            lines.append(json.dumps({"t": round(t0 + k * 0.1, 4), "s": socks}))
        return "\n".join(lines) + "\n"
