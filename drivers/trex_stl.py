"""TRex stateless (STL): profile generation from longhaul's pattern declarations, a launch plan
that runs them with TRex's own Python client, and a parser for what that runner prints.

TRex needs its DPDK-bound NICs and its own release tree (`<trex>/t-rex-64`, the client library in
`<trex>/automation/trex_control_plane/interactive`); it cannot be installed on the dev box, so
only generation, the plan and parsing are tested here (tests/drivers/test_trex_stl.py), and the live run
is a test that needs a TRex host.

Patterns (drivers/patterns.py) -> STL stream modes, one stream per flow:
  constant + duration_s        STLTXCont, stopped by start(duration=...)
  constant + bytes             STLTXSingleBurst, total_pkts = ceil(bytes / frame)
  square (on_s, off_s)         STLTXMultiBurst: pkts_per_burst = rate x on_s, ibg = off_s,
  bursty (burst_s, every_s)      count = the full bursts of the pattern; a shorter last burst
                                 (the pattern cuts it at the flow's end) is a second, chained
                                 single-burst stream (`next`, self_start=False)
  sinusoid (seed 002's f(t))   chained single bursts, SINE_STEPS_PER_PERIOD per period, each
                                 carrying exactly the megabits f(t) declares for its step
                                 (paced_udp.declared_megabits) at their mean rate
  start_s                      isg (the stream's start delay, usec)
Rates: rate_mbps is L2 (frame bytes incl. FCS, TRex's bps_L2); no rate means line rate
(percentage=100), whose burst sizes need the port speed (line_rate_mbps). Frame sizes follow
TRex's convention: frame_bytes includes the 4-byte FCS, the built packet is 4 bytes shorter.
MAC addresses come from TRex's port config (trex_cfg.yaml port_info dest_mac/src_mac, or L3
mode), so the packet has a bare Ether(): the lab must point dest_mac at the next hop.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import SimpleNamespace

from longhaul.drivers.dpdk_testpmd import DpdkTestpmd, parse_meter
from longhaul.drivers.jsonlines import json_lines
from longhaul.drivers.paced_udp import declared_megabits
from longhaul.drivers.patterns import PATTERNS, SINUSOID, bursts
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, Shape

API_SUBDIR = "automation/trex_control_plane/interactive"
RPC_PORT = 4501          # TRex's synchronous JSON-RPC port: the server is up once it listens
FCS = 4
L1_OVERHEAD = 20         # preamble + SFD + inter-frame gap, per frame on the wire
SINE_STEPS_PER_PERIOD = 20   # a sinusoid's rate steps per period (TRex streams have one rate each)


@dataclass(frozen=True)
class StreamDecl:
    """One STL stream, as plain data; `profile_source` turns a list of them into a profile."""
    name: str
    mode: str                      # 'continuous' | 'single_burst' | 'multi_burst'
    frame_bytes: int
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    rate_kind: str                 # 'pps' | 'bps_L1' | 'bps_L2' | 'percentage'
    rate_value: float
    isg_us: float = 0.0
    total_pkts: int | None = None          # single burst
    pkts_per_burst: int | None = None      # multi burst
    ibg_us: float | None = None
    count: int | None = None
    self_start: bool = True
    next: str | None = None


def pps_of(frame_bytes: int, rate_mbps: float | None, line_rate_mbps: float | None) -> float:
    """Packets per second of a declared L2 rate, or of line rate (L1: frame + 20 bytes)."""
    if rate_mbps is not None:
        return rate_mbps * 1e6 / (frame_bytes * 8)
    if line_rate_mbps is None:
        raise ValueError("trex: a line-rate burst pattern needs line_rate_mbps (the port speed) to size bursts")
    return line_rate_mbps * 1e6 / ((frame_bytes + L1_OVERHEAD) * 8)


def streams_for(flow, *, src_ip: str, dst_ip: str, dport: int, sport: int | None = None,
                frame_bytes: int = 1518, rate_mbps: float | None = None,
                line_rate_mbps: float | None = None) -> list[StreamDecl]:
    """Streams for a flow declaration (duck-typed like schema.Flow: name, pattern, start_s,
    duration_s, bytes, on_s, off_s, burst_s, every_s)."""
    if not 64 <= frame_bytes <= 9216:
        raise ValueError(f"trex: frame_bytes {frame_bytes} outside 64..9216")
    if rate_mbps is not None and rate_mbps <= 0:
        raise ValueError("trex: rate_mbps must be > 0")
    kind, value = ("bps_L2", rate_mbps * 1e6) if rate_mbps is not None else ("percentage", 100.0)
    base = {"frame_bytes": frame_bytes, "src_ip": src_ip, "dst_ip": dst_ip, "sport": sport or dport, "dport": dport,
                "rate_kind": kind, "rate_value": value, "isg_us": flow.start_s * 1e6}
    shape = PATTERNS[flow.pattern].shape_of(flow)
    if shape is not None:
        return _sinusoid_steps(flow, shape, base)
    if flow.pattern == "constant":
        if flow.bytes is not None:
            return [StreamDecl(flow.name, "single_burst", total_pkts=math.ceil(flow.bytes / frame_bytes), **base)]
        return [StreamDecl(flow.name, "continuous", **base)]
    pps = pps_of(frame_bytes, rate_mbps, line_rate_mbps)
    planned = bursts(flow)
    on, gap = planned[0].duration_s, (planned[1].start_s - planned[0].stop_s) if len(planned) > 1 else 0.0
    full = [b for b in planned if math.isclose(b.duration_s, on)]
    tail = planned[len(full):]
    out = [StreamDecl(flow.name, "multi_burst", pkts_per_burst=max(1, round(pps * on)), ibg_us=gap * 1e6,
                      count=len(full), next=f"{flow.name}_tail" if tail else None, **base)]
    if tail:
        out.append(StreamDecl(f"{flow.name}_tail", "single_burst", self_start=False,
                              total_pkts=max(1, round(pps * tail[0].duration_s)),
                              **{**base, "isg_us": gap * 1e6}))
    return out


def _sinusoid_steps(flow, shape: Shape, base: dict) -> list[StreamDecl]:
    """Seed 002's f(t) as a chain of single bursts, step k sending the declared megabits of
    [t_k, t_k+1) at their mean rate: the steps' sum is f's integral over the flow."""
    if flow.duration_s is None:
        raise ValueError("trex: a sinusoid needs duration_s")
    step = flow.period_s / SINE_STEPS_PER_PERIOD
    n = max(1, math.ceil(flow.duration_s / step - 1e-9))
    names = [flow.name] + [f"{flow.name}_s{k}" for k in range(1, n)]
    out = []
    for k in range(n):
        t0, t1 = k * step, min(flow.duration_s, (k + 1) * step)
        megabits = declared_megabits(t1, shape=shape) - declared_megabits(t0, shape=shape)
        out.append(StreamDecl(names[k], "single_burst", self_start=k == 0, next=names[k + 1] if k + 1 < n else None,
                              total_pkts=max(1, round(megabits * 1e6 / (base["frame_bytes"] * 8))),
                              **{**base, "rate_kind": "bps_L2", "rate_value": megabits / (t1 - t0) * 1e6,
                                 "isg_us": base["isg_us"] if k == 0 else 0.0}))
    return out


def expected_seconds(streams: list[StreamDecl]) -> float | None:
    """How long the profile sends when it ends by itself (bursts); None for continuous streams."""
    total = 0.0
    for s in streams:
        if s.mode == "continuous":
            return None
        if s.rate_kind not in ("pps", "bps_L2", "bps_L1"):
            return None
        pps = {"pps": s.rate_value, "bps_L2": s.rate_value / (s.frame_bytes * 8),
               "bps_L1": s.rate_value / ((s.frame_bytes + L1_OVERHEAD) * 8)}[s.rate_kind]
        if s.mode == "single_burst":
            total += s.isg_us / 1e6 + s.total_pkts / pps
        else:
            total += s.isg_us / 1e6 + s.count * s.pkts_per_burst / pps + (s.count - 1) * s.ibg_us / 1e6
    return total


def _mode_call(s: StreamDecl) -> str:
    rate = f"{s.rate_kind}={s.rate_value!r}"
    if s.mode == "continuous":
        return f"STLTXCont({rate})"
    if s.mode == "single_burst":
        return f"STLTXSingleBurst(total_pkts={s.total_pkts}, {rate})"
    if s.mode == "multi_burst":
        return f"STLTXMultiBurst(pkts_per_burst={s.pkts_per_burst}, ibg={s.ibg_us!r}, count={s.count}, {rate})"
    raise ValueError(f"trex: unknown stream mode {s.mode!r}")


def profile_source(streams: list[StreamDecl], title: str = "longhaul background") -> str:
    """Python source of an STL profile (register() -> object with get_streams), loadable by
    trex-console (`start -f`) and STLProfile.load_py alike."""
    lines = [f"# {title}: generated by longhaul drivers/trex_stl.py; edit the flow, not this file",
             "try:     # TRex v2.50 on; before, and PyPI's trex-stl-lib, the package was trex_stl_lib",
             "    from trex.stl.api import (STLStream, STLPktBuilder, STLTXCont, STLTXSingleBurst,",
             "                              STLTXMultiBurst, Ether, IP, UDP)",
             "except ImportError:",
             "    from trex_stl_lib.api import (STLStream, STLPktBuilder, STLTXCont, STLTXSingleBurst,",
             "                                  STLTXMultiBurst, Ether, IP, UDP)",
             "",
             "",
             "def _packet(frame_bytes, src, dst, sport, dport):",
             "    # frame_bytes counts the FCS the NIC appends; the template is 4 bytes shorter",
             "    head = Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport)",
             f"    return STLPktBuilder(pkt=head / (b'\\x00' * max(0, frame_bytes - {FCS} - len(head))))",
             "",
             "",
             "class LonghaulProfile(object):",
             "    def get_streams(self, direction=0, **kwargs):",
             "        return ["]
    for s in streams:
        args = [f"name={s.name!r}",
                f"packet=_packet({s.frame_bytes}, {s.src_ip!r}, {s.dst_ip!r}, {s.sport}, {s.dport})",
                f"mode={_mode_call(s)}", f"isg={s.isg_us!r}"]
        if not s.self_start:
            args.append("self_start=False")
        if s.next:
            args.append(f"next={s.next!r}")
        lines.append("            STLStream(" + (",\n                      ".join(args)) + "),")
    lines += ["        ]", "", "", "def register():", "    return LonghaulProfile()", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- runner and plan

RUNNER = r'''# longhaul TRex STL runner: loads a profile, runs it on TRex through trex.stl.api, prints JSON lines
import json, os, signal, sys, tempfile, time
sys.dont_write_bytecode = True     # the profile is imported from a temporary file: no __pycache__ beside it
args = json.loads(sys.argv[1])
sys.path.insert(0, os.path.join(args["trex_path"], "automation/trex_control_plane/interactive"))
from trex.stl.api import STLClient, STLProfile


def _stop(signum, frame):
    raise KeyboardInterrupt


def _totals(stats, ports):
    keys = ("opackets", "obytes", "ipackets", "ibytes")
    return {k: sum(int(stats.get(p, {}).get(k, 0)) for p in ports) for k in keys}


def main():
    ports = args["ports"]
    path = args.get("profile_path")
    if path is None:
        fd, path = tempfile.mkstemp(prefix="lh-trex-", suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(args["profile_source"])
    signal.signal(signal.SIGTERM, _stop)
    client = STLClient(server=args["server"])
    rc = 0
    try:
        client.connect()
        client.reset(ports=ports)
        client.add_streams(STLProfile.load_py(path).get_streams(), ports=ports)
        client.clear_stats()
        t0 = time.monotonic()
        try:    # from start() on, a stop (SIGTERM) must stop the traffic on TRex too
            client.start(ports=ports, duration=args["duration_s"] if args["duration_s"] else -1)
            print(json.dumps({"event": "start", "ts": time.time()}), flush=True)
            prev = _totals(client.get_stats(), ports)
            tick = t0
            while client.is_traffic_active(ports=ports):
                if time.monotonic() - t0 > args["limit_s"]:
                    raise KeyboardInterrupt
                tick += 1.0
                time.sleep(max(0.0, tick - time.monotonic()))
                now = _totals(client.get_stats(), ports)
                row = {k: now[k] - prev[k] for k in now}
                row.update(t=round(time.monotonic() - t0, 6))
                print(json.dumps(row), flush=True)
                prev = now
        except KeyboardInterrupt:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            client.stop(ports=ports)
        client.wait_on_traffic(ports=ports, timeout=30)
        stats = client.get_stats()
        print(json.dumps({"event": "end", "seconds": round(time.monotonic() - t0, 6), "total": _totals(stats, ports),
                          "ports": {str(p): stats.get(p, {}) for p in ports},
                          "warnings": [str(w) for w in client.get_warnings()]}, default=str), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"event": "error", "error": "stopped before the traffic started"}), flush=True)
        rc = 1
    except Exception as exc:
        print(json.dumps({"event": "error", "error": "%s: %s" % (type(exc).__name__, exc)}), flush=True)
        rc = 1
    finally:
        try:
            client.disconnect()
        finally:
            if args.get("profile_path") is None:
                os.unlink(path)
    return rc


sys.exit(main())
'''


@dataclass(frozen=True)
class LaunchPlan:
    files: dict[str, str]          # path on the TRex host -> contents to write before running
    server_argv: list[str]         # the TRex server in interactive (stateless) mode, if not running
    server_ready: list[str]        # non-empty stdout once its RPC port listens
    argv: list[str]                # the runner
    expected_s: float | None


def runner_args(trex_path: str, streams: list[StreamDecl], *, duration_s: float | None, ports=(0,),
                server: str = "127.0.0.1", profile_path: str | None = None) -> dict:
    expected = expected_seconds(streams)
    if duration_s is None and expected is None:
        raise ValueError("trex: a continuous stream needs duration_s")
    limit = (duration_s or expected) + 30    # a runaway guard, not the timing: TRex times streams
    args = {"trex_path": trex_path, "server": server, "ports": list(ports), "duration_s": duration_s,
            "limit_s": limit}
    if profile_path is None:
        args["profile_source"] = profile_source(streams)
    else:
        args["profile_path"] = profile_path
    return args


def server_argv(trex_path: str, trex_cfg: str | None = None, cores: int = 1) -> list[str]:
    """The TRex server in interactive (stateless) mode, answering on RPC_PORT."""
    # t-rex-64 finds its libraries relative to the release tree, so it is started from there
    command = f"cd {shlex.quote(str(PurePosixPath(trex_path)))} && exec ./t-rex-64 -i -c {int(cores)} --no-scapy-server"
    if trex_cfg:
        command += f" --cfg {shlex.quote(trex_cfg)}"
    return ["sh", "-c", command]


def launch_plan(trex_path: str, streams: list[StreamDecl], *, workdir: str = "/tmp", tag: str = "lh",
                duration_s: float | None = None, ports=(0,), server: str = "127.0.0.1",
                python: str = "python3", trex_cfg: str | None = None, cores: int = 1) -> LaunchPlan:
    """Files and commands to run `streams` on a TRex host; trex_path is the release tree from config."""
    profile, runner = PurePosixPath(workdir) / f"{tag}-profile.py", PurePosixPath(workdir) / f"{tag}-runner.py"
    args = runner_args(trex_path, streams, duration_s=duration_s, ports=ports, server=server,
                       profile_path=str(profile))
    return LaunchPlan(files={str(profile): profile_source(streams), str(runner): RUNNER},
                      server_argv=server_argv(trex_path, trex_cfg, cores),
                      server_ready=["ss", "-lntH", "sport", "=", f":{RPC_PORT}"],
                      argv=[python, str(runner), json.dumps(args, sort_keys=True)],
                      expected_s=expected_seconds(streams))


def inline_argv(trex_path: str, streams: list[StreamDecl], *, duration_s: float | None, ports=(0,),
                server: str = "127.0.0.1", python: str = "python3") -> list[str]:
    """The runner as one argv with the profile inside it: nothing to stage on the TRex host."""
    args = runner_args(trex_path, streams, duration_s=duration_s, ports=ports, server=server)
    return [python, "-c", RUNNER, json.dumps(args, sort_keys=True)]


# --------------------------------------------------------------------------- parsing

def parse_runner(text: str) -> dict:
    """The runner's JSON lines -> {'intervals': [...], 'start', 'end', 'error'}."""
    out = {"intervals": [], "start": None, "end": None, "error": None}
    for item in json_lines(text):
        event = item.get("event")
        if event in ("start", "end"):
            out[event] = item
        elif event == "error":
            out["error"] = item.get("error")
        elif "t" in item:
            out["intervals"].append(item)
    if out["error"] is None and out["end"] is None:
        out["error"] = "the TRex runner printed no final statistics"
    return out


def parse(client_text: str, server_text: str = "", spec=None) -> Result:
    """Sender figures from the runner (TRex's port counters opackets/obytes, summed over the
    flow's ports); the receiver's per-second view from the ifrate meter when one ran."""
    run = parse_runner(client_text)
    senders, prev_t = [], 0.0
    for row in run["intervals"]:
        senders.append(Interval(end_s=float(row["t"]), seconds=float(row["t"]) - prev_t, bytes=int(row.get("obytes", 0))))
        prev_t = float(row["t"])
    total = (run["end"] or {}).get("total", {})
    rx, summary = parse_meter(server_text or "")
    sent_pkts = int(total.get("opackets", 0))
    received = int(summary["end"]["bytes"]) if "end" in summary else sum(i.bytes for i in rx)
    lost = None
    if sent_pkts and "end" in summary:
        lost = max(0.0, 100.0 * (1 - int(summary["end"]["packets"]) / sent_pkts))
    return Result(protocol="udp", cca=None, streams=1,
                  seconds=float((run["end"] or {}).get("seconds", 0.0)), bytes_sent=int(total.get("obytes", 0)),
                  bytes_received=received, retransmits=None, lost_percent=lost, receiver_intervals=rx,
                  sender_intervals=senders, error=run["error"],
                  extra={"opackets": sent_pkts, "warnings": (run["end"] or {}).get("warnings", []),
                         "ports": (run["end"] or {}).get("ports", {})})


class TrexStl:
    """drivers.tool.Tool for TRex STL: the runner on the lab's traffic generator (sends_from), the
    ifrate meter on the receiver. The lab gives trex_path, trex_ports, src_ip, line_rate_mbps
    (the generator's) and dst_ip, rx_iface (the pair's receiver); a flow's options may set
    trex_ports, trex_server, python and frame_bytes.
    One burst of the trial = one constant stream; a whole square/bursty flow as one profile
    (TRex timing the bursts) is `streams_for` + `launch_plan`."""

    name = "trex"
    executables = ("python3",)
    shared_servers = False
    sets_cca = True             # UDP only: no TCP socket for the trial's CCA shim to touch
    counts_arrivals = True      # its receiver is the ifrate meter: kernel counters
    needs_link_facts = True
    sends_from = "generator"    # the inventory's generator host: its TRex tree and DPDK ports
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = ("trex_server", "trex_ports", "python", "frame_bytes")   # what a flow's [flows.options] may set
    rules = FlowRules(("udp",), declared_rate=True, in_burst_shapes=(SINUSOID,))   # TRex steps f(t)

    def prepare(self, spec):
        return [], []

    def server(self, spec):
        return DpdkTestpmd().server(spec)

    def client(self, spec) -> list[str]:
        o = spec.options
        if "trex_path" not in o:
            raise ValueError("trex: no trex_path: the lab's generator host gives it (Lab.generator_facts)")
        shape = spec.shape         # a sinusoid's f(t): TRex steps it (_sinusoid_steps)
        flow = SimpleNamespace(name="burst", pattern=shape.kind if shape else "constant", start_s=0.0,
                               duration_s=spec.duration_s, bytes=spec.bytes, min_mbps=shape and shape.min_mbps,
                               max_mbps=shape and shape.max_mbps, period_s=shape and shape.period_s)
        port = int(o.get("udp_port") or spec.port)
        streams = streams_for(flow, src_ip=o["src_ip"], dst_ip=o["dst_ip"], dport=port,
                              frame_bytes=int(o.get("frame_bytes", 1518)), rate_mbps=spec.rate_mbps,
                              line_rate_mbps=o.get("line_rate_mbps"))
        return inline_argv(o["trex_path"], streams, duration_s=spec.duration_s,
                           ports=tuple(o.get("trex_ports", (0,))), server=o.get("trex_server", "127.0.0.1"),
                           python=o.get("python", "python3"))

    def parse(self, client_text: str, server_text: str, spec) -> Result:
        return parse(client_text, server_text, spec)
