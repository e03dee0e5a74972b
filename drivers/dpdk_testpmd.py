"""dpdk-testpmd in tx-only mode as a line-rate UDP background (seed 000 sec. 3.3), and its receiver.

Sender: testpmd's `txonly` forwarding engine sends fixed-size Ether/IPv4/UDP frames as fast as the
port takes them, on either
  * an af_packet virtual device bound to a kernel interface (`--vdev=net_af_packet0,iface=<if>`,
    `--no-huge --no-pci`): works on any Linux box and in a namespace, no hugepages, no binding; or
  * a PCI NIC bound to vfio-pci/igb_uio (`-a <pci>`, hugepages): real line rate on real hardware.
testpmd in txonly has no rate of its own (per-queue `set port X queue Y rate` exists only on a few
NICs and not on af_packet), so this is a line-rate source: the bottleneck sets what gets through.

Time: testpmd runs until a signal. With --stats-period it never reads stdin (without it, it waits
for Enter and would quit at once on /dev/null), and on SIGINT/SIGTERM it stops forwarding, prints
its forward statistics and exits 0 (checked with Debian 12's 22.11). The argv therefore wraps it in
`timeout --foreground -s INT <duration>`; --foreground keeps testpmd in the executor's process
group, so a stop by the trial (SIGTERM to the group) reaches it too. A small `sh -c` gives each run
a unique --file-prefix (the shell's pid) and removes the empty runtime directory EAL leaves in
/var/run/dpdk; its `trap :` makes it outlive the group signal long enough to do so.

Receiver: no process of testpmd's own; `longhaul.drivers.agents.ifrate` on the receiving host reports
per-second rx bytes of an interface (sysfs) or of the flow's UDP port (iptables counter).

What the lab must provide in the flow's options (BurstSpec.options):
  sender:   iface (af_packet) and/or pci (NIC; the inventory's DPDK port, with pci_src_ip, its
            address, as the frames' source); dst_mac = MAC of the NEXT HOP on the sender's link
            (the router's interface, or the receiver's own when directly attached): frames are
            built at L2, no ARP; src_ip, dst_ip (the receiver's address, so routers forward it).
  receiver: rx_iface = the receiver's interface; udp_port to count only this flow (needs
            iptables on the receiver), else the whole interface is counted.
  optional: device ("pci" or "af_packet"; default pci when there is one), hugepages_mb (what the
            PCI path reserves, default 2 x mem_mb), frame_bytes (L2 frame without FCS, default 1514 =
            full 1500-byte MTU packets), lcores ("0,1", or an EAL --lcores map such as "0@0,1@0"
            for a one-CPU host), cores (forwarding cores, = tx queues; default 1), mem_mb (af_packet,
            default 64), mbufs (default 8192), multi_flow (vary source per packet, for RSS).

The PCI path: before the burst, `prepare` hands the port to DPDK on the sender (drivers/agents/
dpdk_port.py: vfio-pci or uio_pci_generic, huge pages) and after it gives the port back.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
import sys

from longhaul.drivers.agents import dpdk_port
from longhaul.drivers.agents.ifrate import cleanup_argv
from longhaul.drivers.jsonlines import json_lines
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, ServerSpec

EXECUTABLE = "dpdk-testpmd"
DEFAULT_FRAME = 1514
MIN_FRAME = 64 - 4       # the Ethernet minimum without FCS
RUNTIME_DIR = "/var/run/dpdk"   # where EAL puts <file-prefix>/ when run as root
MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
PCI = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
IFNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
DEFAULT_UDP_PORT = 9     # testpmd's own default (discard)
DEVICES = ("pci", "af_packet")
LCORES = re.compile(r"^[0-9@(),-]{1,64}$")


def _opt(options: dict, key: str, default=None):
    value = options.get(key, default)
    if value is None:
        raise ValueError(f"dpdk: options.{key} is required")
    return value


def _udp_port(spec) -> int:
    port = int(spec.options.get("udp_port") or spec.port or DEFAULT_UDP_PORT)
    if not 0 < port < 65536:
        raise ValueError(f"dpdk: bad udp port {port}")
    return port


def testpmd_argv(*, duration_s: float, dst_mac: str, src_ip: str, dst_ip: str, iface: str | None = None,
                 pci: str | None = None, frame_bytes: int = DEFAULT_FRAME, udp_port: int = DEFAULT_UDP_PORT,
                 file_prefix: str = "lhdp", lcores: str = "0,1", cores: int = 1, mem_mb: int = 64,
                 mbufs: int = 8192, multi_flow: bool = False) -> list[str]:
    """The testpmd command itself (no time bound): EAL args, `--`, application args."""
    if (iface is None) == (pci is None):
        raise ValueError("dpdk: give exactly one of options.iface (af_packet) or options.pci (NIC)")
    if not MAC.match(dst_mac):
        raise ValueError(f"dpdk: bad dst_mac {dst_mac!r}")
    for ip in (src_ip, dst_ip):
        ipaddress.IPv4Address(ip)   # txonly builds IPv4 only
    if not MIN_FRAME <= frame_bytes <= 9000:
        raise ValueError(f"dpdk: frame_bytes {frame_bytes} outside {MIN_FRAME}..9000")
    if cores < 1:
        raise ValueError("dpdk: cores must be >= 1")
    # --no-shconf: no shared config files (no secondary processes here), so the runtime dir stays
    # empty and the wrapper can rmdir it
    if not LCORES.match(lcores):
        raise ValueError(f"dpdk: bad lcores {lcores!r}")
    # "0@0,1@0": two lcores on one CPU (a one-vCPU VM), which only --lcores can say
    eal = ["--lcores" if "@" in lcores or "(" in lcores else "-l", lcores, "--file-prefix", file_prefix, "--no-shconf"]
    if iface is not None:
        if not IFNAME.match(iface):
            raise ValueError(f"dpdk: bad interface name {iface!r}")
        # af_packet copies through the kernel: plain memory is enough, and no PCI scan is wanted
        eal += ["--no-huge", "-m", str(mem_mb), "--no-pci", f"--vdev=net_af_packet0,iface={iface}"]
    else:
        if not PCI.match(pci):
            raise ValueError(f"dpdk: bad PCI address {pci!r}")
        # --huge-unlink: no hugetlbfs files outlive testpmd, so the pages go back when it exits
        eal += ["-m", str(mem_mb), "--huge-unlink", "-a", pci]
    app = ["--forward-mode=txonly", "--auto-start", "--stats-period", "1",
           f"--total-num-mbufs={mbufs}", f"--nb-cores={cores}", f"--txq={cores}", f"--rxq={cores}",
           f"--eth-peer=0,{dst_mac}", f"--tx-ip={src_ip},{dst_ip}", f"--tx-udp={udp_port},{udp_port}",
           f"--txpkts={frame_bytes}"]
    if multi_flow:
        app.append("--txonly-multi-flow")
    return [EXECUTABLE, *eal, "--", *app]


# A flow's duration_s is its flood's: the clock starts at testpmd's forwarding line (printed by
# every release's start_packet_forwarding), not at its launch; EAL and the port's set-up took 12 to
# 35 s under TCG, which left a 20 s flow 2 s of flood. START_LIMIT_S bounds a start that never comes.
FORWARDING_LINE = "packet forwarding - ports="
STATS_LINE = "Port statistics"      # heads each --stats-period block: the clock is read there only
START_LIMIT_S = 120
_TIMED = """trap : INT TERM; exec 2>&1
{{ trap : INT TERM
  timeout --foreground --preserve-status -s INT -k 5 {limit} {command} &
  pid=$!; echo "lhdp-pid $pid"
  while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done
  echo "lhdp-rc $rc"; }} | {{ trap '' INT TERM
  pid=; rc=1; since=; sent=
  while IFS= read -r line; do
    case $line in
      "lhdp-pid "*) pid=${{line#lhdp-pid }}; continue ;;
      "lhdp-rc "*) rc=${{line#lhdp-rc }}; continue ;;
      *"{forwarding}"*) [ -n "$since" ] || since=$(date +%s) ;;
    esac
    printf '%s\\n' "$line"
    case $line in *"{stats}"*)
      if [ -n "$since" ] && [ -z "$sent" ] && [ $(( $(date +%s) - since )) -ge {duration} ]; then
        kill -s INT "$pid" 2>/dev/null; sent=1
      fi ;;
    esac
  done
  exit "$rc"; }}
rc=$?; rmdir {runtime}/{prefix} 2>/dev/null; exit $rc"""


def bounded(argv: list[str], duration_s: float, prefix_var: str = "lhdp-$$") -> list[str]:
    """`sh -c` around testpmd: SIGINT duration_s after it started forwarding (checked at each stats
    block it prints, one a second: the flood lasts duration_s to duration_s + 2, more on a VM
    whose stalls hold the stats back), then EAL's empty runtime dir removed. The file prefix
    argument is given as the shell's `lhdp-$$` so each run has its own. The reader ignores the
    trial's group signal: it passes on testpmd's final statistics, which testpmd prints as it stops."""
    if not duration_s or duration_s <= 0:
        raise ValueError("dpdk: testpmd is timed: a duration_s > 0 is needed (byte counts are not supported)")
    quoted = " ".join(prefix_var if a == "@PREFIX@" else shlex.quote(a) for a in argv)
    script = _TIMED.format(limit=f"{math.ceil(duration_s) + START_LIMIT_S:d}", command=quoted,
                           forwarding=FORWARDING_LINE, stats=STATS_LINE, duration=f"{math.ceil(duration_s):d}",
                           runtime=RUNTIME_DIR, prefix=prefix_var)
    return ["sh", "-c", script, EXECUTABLE]        # $0: the program it runs


def device(options: dict) -> str:
    """"pci" or "af_packet": the flow's choice, else PCI wherever a port is known."""
    chosen = options.get("device") or ("pci" if options.get("pci") else "af_packet")
    if chosen == "pci" and not options.get("pci"):
        raise ValueError("dpdk: device = 'pci' needs options.pci or a DPDK port (dpdk = true) in the inventory")
    return chosen


def _hugepages_mb(options: dict) -> int:
    return int(options.get("hugepages_mb") or 2 * int(options.get("mem_mb", 64)))


def client_argv(spec) -> list[str]:
    o = spec.options
    if spec.bytes is not None:
        raise ValueError("dpdk: testpmd cannot stop after a byte count; give duration_s")
    if spec.rate_mbps is not None or spec.shape is not None:
        raise ValueError("dpdk: testpmd txonly sends at line rate; a declared rate needs TRex (tool 'trex')")
    # the trial passes the lab's interface for af_packet and, where the inventory has one, the
    # sender's DPDK port; the flow's options may name another port or pick the device
    pci = device(o) == "pci"
    src_ip = (o.get("pci_src_ip") or _opt(o, "src_ip")) if pci else _opt(o, "src_ip")
    argv = testpmd_argv(duration_s=spec.duration_s, dst_mac=_opt(o, "dst_mac"), src_ip=src_ip,
                        dst_ip=_opt(o, "dst_ip"), iface=None if pci else o.get("iface"), pci=o["pci"] if pci else None,
                        frame_bytes=int(o.get("frame_bytes", DEFAULT_FRAME)), udp_port=_udp_port(spec),
                        file_prefix="@PREFIX@", lcores=str(o.get("lcores", "0,1")), cores=int(o.get("cores", 1)),
                        mem_mb=int(o.get("mem_mb", 64)), mbufs=int(o.get("mbufs", 8192)),
                        multi_flow=bool(o.get("multi_flow", False)))
    return bounded(argv, spec.duration_s)


def port_argv(spec, python: str = sys.executable) -> tuple[list[list[str]], list[list[str]]]:
    """(bind, restore) of the burst's PCI port on the sender; nothing for af_packet."""
    if device(spec.options) != "pci":
        return [], []
    state = str(spec.workdir / f"lh-dpdk-port-{spec.port}.json")
    agent = [python, "-m", dpdk_port.__name__]
    return ([[*agent, "bind", spec.options["pci"], "--hugepages-mb", str(_hugepages_mb(spec.options)), "--state", state]],
            [[*agent, "restore", "--state", state]])


def check_flow(flow) -> str | None:
    """What a dpdk flow's options may not say (the rest needs the lab, and is checked at the burst)."""
    o = flow.options
    if o.get("device") not in (None, *DEVICES):
        return f"options.device {o['device']!r}: one of {', '.join(DEVICES)}"
    if o.get("pci") is not None and not PCI.match(str(o["pci"])):
        return f"options.pci {o['pci']!r}: a PCI address such as 0000:3b:00.0"
    if o.get("lcores") is not None and not LCORES.match(str(o["lcores"])):
        return f"options.lcores {o['lcores']!r}: an EAL core list ('0,1') or map ('0@0,1@0')"
    for key in ("hugepages_mb", "mem_mb", "mbufs", "cores"):
        if o.get(key) is not None and (not isinstance(o[key], int) or o[key] < 1):
            return f"options.{key} {o[key]!r}: a whole number >= 1"
    return None


def meter_argv(rx_iface: str, ready_file: str, udp_port: int | None = None, python: str = sys.executable) -> list[str]:
    argv = [python, "-m", "longhaul.drivers.agents.ifrate", rx_iface, "--ready-file", ready_file]
    return argv + (["--udp-port", str(udp_port)] if udp_port is not None else [])


# --------------------------------------------------------------------------- parsing

_NIC_TX = re.compile(r"TX-packets:\s*(\d+)\s+TX-errors:\s*(\d+)\s+TX-bytes:\s*(\d+)")
_TX_BPS = re.compile(r"Tx-pps:\s*(\d+)\s+Tx-bps:\s*(\d+)")
_ACCUM = re.compile(r"Accumulated forward statistics.*?TX-packets:\s*(\d+)\s+TX-dropped:\s*(\d+)", re.DOTALL)
_PKT_LEN = re.compile(r"packet len=(\d+)")
_CAUSE = re.compile(r"Cause:\s*(.+)")


def parse_testpmd(text: str) -> dict:
    """testpmd's stdout+stderr -> {'tx_packets', 'tx_dropped', 'frame_bytes', 'tx_bytes', 'periods':
    [(cumulative TX-bytes, Tx-bps), ...], 'clean_exit', 'error'}. The per-period NIC counters lag
    the end by up to a period; the accumulated forward statistics are the final count."""
    text = text.replace("\x1b[2J", "").replace("\x1b[1;1H", "")
    periods = [(int(m.group(3)), int(b.group(2))) for m, b in zip(_NIC_TX.finditer(text), _TX_BPS.finditer(text))]
    acc = _ACCUM.search(text)
    plen = _PKT_LEN.search(text)
    frame = int(plen.group(1)) if plen else None
    tx_packets = int(acc.group(1)) if acc else None
    if tx_packets is not None and frame:
        tx_bytes = tx_packets * frame     # txonly frames are all one size
    else:
        tx_bytes = periods[-1][0] if periods else 0
    cause = _CAUSE.search(text)
    error = None
    if cause:
        error = cause.group(1).strip()
    elif acc is None:
        error = "testpmd printed no final statistics"
    return {"tx_packets": tx_packets or 0, "tx_dropped": int(acc.group(2)) if acc else 0, "frame_bytes": frame,
            "tx_bytes": tx_bytes, "periods": periods, "clean_exit": "Bye..." in text, "error": error}


def sender_intervals(periods: list[tuple[int, int]]) -> list[Interval]:
    """One interval per stats period (1 s) from the cumulative TX-bytes. The first block is printed
    just after forwarding starts (a few ms of frames), so its bytes go into the first interval;
    what was sent after the last block is only in the total."""
    out = []
    for i in range(1, len(periods)):
        before = periods[i - 1][0] if i > 1 else 0
        out.append(Interval(end_s=float(i), seconds=1.0, bytes=periods[i][0] - before))
    return out


def parse_meter(text: str) -> tuple[list[Interval], dict]:
    """ifrate's JSON lines -> per-second receiver intervals and its summary (the 'end' line)."""
    intervals, summary = [], {}
    for item in json_lines(text):
        if "t" in item:
            intervals.append(Interval(end_s=float(item["t"]), seconds=float(item["seconds"]), bytes=int(item["bytes"]),
                                      streams=[int(item["bytes"])]))
        elif item.get("event") in ("end", "ready", "start"):
            summary[item["event"]] = item
    return intervals, summary


def parse(client_text: str, server_text: str, spec=None) -> Result:
    tx = parse_testpmd(client_text)
    rx, summary = parse_meter(server_text or "")
    received = int(summary["end"]["bytes"]) if "end" in summary else sum(i.bytes for i in rx)
    senders = sender_intervals(tx["periods"])
    seconds = sum(i.seconds for i in rx) or float(len(senders))
    lost = None
    if tx["tx_packets"] and "end" in summary:
        # packets, not bytes: the meter counts L2 (sysfs) or IP (iptables) bytes, testpmd L2 frames;
        # an interface count may include a little other traffic, hence the floor at 0
        lost = max(0.0, 100.0 * (1 - int(summary["end"]["packets"]) / tx["tx_packets"]))
    return Result(protocol="udp", cca=None, streams=1, seconds=seconds, bytes_sent=tx["tx_bytes"],
                  bytes_received=received, retransmits=None, lost_percent=lost,
                  receiver_intervals=rx, sender_intervals=senders,
                  remote_port=_udp_port(spec) if spec is not None else None, error=tx["error"],
                  extra={"tx_packets": tx["tx_packets"], "tx_dropped": tx["tx_dropped"],
                         "frame_bytes": tx["frame_bytes"], "clean_exit": tx["clean_exit"],
                         "rx_packets": int(summary["end"]["packets"]) if "end" in summary else None,
                         "rx_source": summary.get("ready", {}).get("source")})


class DpdkTestpmd:
    """drivers.tool.Tool for dpdk-testpmd txonly: one testpmd per burst on the sender, one ifrate
    meter per burst on the receiver."""

    name = "dpdk"
    executables = (EXECUTABLE, "timeout")
    shared_servers = False
    sets_cca = True             # UDP only: no TCP socket for the trial's CCA shim to touch
    counts_arrivals = True      # its receiver is the ifrate meter: kernel counters
    needs_link_facts = True     # frames are built at layer 2: next hop MAC, no ARP
    sends_from = "sender"
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = START_LIMIT_S     # the flood is timed from its forwarding line
    option_keys = ("device", "pci", "hugepages_mb", "iface", "dst_mac", "src_ip", "dst_ip", "rx_iface", "frame_bytes",
                   "lcores", "cores", "mem_mb", "mbufs", "multi_flow")   # what a flow's [flows.options] may set
    rules = FlowRules(("udp",), check=check_flow)

    def prepare(self, spec):
        return port_argv(spec)

    def _ready_file(self, spec) -> str:
        return str(spec.workdir / f"lh-ifrate-{spec.port}.ready")

    def server(self, spec):
        rx_iface = _opt(spec.options, "rx_iface")
        # options.udp_port given: count only this flow's packets; else the whole interface
        count_port = _udp_port(spec) if spec.options.get("udp_port") else None
        ready = self._ready_file(spec)
        cleanup = [["rm", "-f", ready]]
        if count_port is not None:
            cleanup.append(cleanup_argv(rx_iface, count_port))   # backstop if the meter was killed
        return ServerSpec(meter_argv(rx_iface, ready, count_port), ["cat", ready], cleanup)

    def client(self, spec) -> list[str]:
        return client_argv(spec)

    def parse(self, client_text: str, server_text: str, spec) -> Result:
        return parse(client_text, server_text, spec)
