"""Dummynet plans for a FreeBSD router: pure functions from the bottleneck's settings to ipfw argv.

No FreeBSD host is available here, so these plans are unit-tested against the documented syntax
(tests/hardware/test_dummynet.py) and driven through the ssh backend against a recording host
(tests/system/test_hosts_lab.py), but have not yet run on a real router: docs/hardware.md says what to
check on first use. The syntax is that of ipfw(8)
as shipped with dummynet ("ipfw-2012", the version seed 000 section 3.1 used; the FreeBSD
sbin/ipfw/ipfw.8 of 2010), sections cited by name:

  SYNOPSIS, DUMMYNET CONFIGURATION  ipfw {pipe|queue|sched} number config config-options
                                    ipfw [-s [field]] {pipe|queue|sched} {delete|list|show} [number ...]
  SYNOPSIS, FIREWALL CONFIGURATION  ipfw [-cq] add rule ;  ipfw [-q] [set N] {delete|zero|resetlog} [number ...]
  PIPE, QUEUE AND SCHEDULER CONFIGURATION
      bw bandwidth      "measured in [K|M]{bit/s|Byte/s}" and "the unit must immediately follow
                        the number", e.g. `ipfw pipe 1 config bw 300Kbit/s`
      delay ms-delay    milliseconds (parsed as an integer), rounded to the clock tick: the
                        dummynet(4) page recommends `options HZ=1000` for 1 ms granularity
      queue {slots | size Kbytes}   default 50 slots; limited by the sysctls
                        net.inet.ip.dummynet.pipe_byte_limit (1048576) and pipe_slot_limit (100)
  RULE OPTIONS      recv | xmit | via {ifX | if* | ipno | any}: "`out` is required (and `in` is
                    invalid) whenever `xmit` is used"
  SYSCTL VARIABLES  net.inet.ip.dummynet.{pipe_byte_limit,pipe_slot_limit,io_fast,hash_size},
                    net.inet.ip.fw.one_pass (1: a packet leaving a pipe is not matched again)
  EXAMPLES, TRAFFIC SHAPING   one pipe per direction ("you should not use only one pipe for both
                    directions, unless you want to simulate a half-duplex medium"), queues written
                    as `queue 10Kbytes`

Figure 6b of seed 000 (its router commands) is an image that the seed's text does not contain,
so the sysctls below are the ones ipfw(8) says a pipe of this size needs, not a copy of it.

Each router shapes its own WAN egress (egress_plan: one pipe, one rule), the two routers of the
dumbbell together making the two directions. Numbering: the plan owns a block of rule and pipe
numbers (from first_rule, first_pipe) and the teardown deletes exactly those numbers, never `ipfw -f flush`, which would also remove
the router's own firewall rules (and, with a default-deny kernel, cut the SSH session).
The router must accept what no rule matches (net.inet.ip.fw.default_to_accept=1 in
/boot/loader.conf, or its own allow rules): these plans add pipes, not a firewall policy.
"""

from __future__ import annotations

import math
import re
from functools import partial

from longhaul.core.units import parse_queue
from longhaul.hardware.routers.linux_tc import DirectionShape
from longhaul.hardware.verdicts import FAIL, OK, WARN, OsCheck, first_line, kernel_lines, rate_verdict, worst

FIRST_RULE = 50        # before rc.firewall's rules (100 and up), so shaping sees every packet
FIRST_PIPE = 50
MAX_RULE = 65534       # 65535 is the default rule
MAX_PIPE = 65535
BYTE_LIMIT_DEFAULT = 1048576   # ipfw(8) SYSCTL VARIABLES: pipe_byte_limit default
SLOT_LIMIT_DEFAULT = 100       # pipe_slot_limit default
_SLOTS = re.compile(r"^\s*(\d+)\s*(p|pkt|pkts|packets|slots)\s*$", re.IGNORECASE)


def bw_arg(bw_mbps: float) -> str:
    """The bandwidth in the largest documented unit that states it exactly: 500 -> '500Mbit/s',
    0.3 -> '300Kbit/s'. 'G' is not in the documented [K|M], so 10 Gb/s is '10000Mbit/s'."""
    if bw_mbps <= 0:
        raise ValueError("dummynet bandwidth must be positive (0 means unlimited, which is not a bottleneck)")
    bits = round(bw_mbps * 1e6)
    if abs(bits - bw_mbps * 1e6) > 1e-3:
        raise ValueError(f"{bw_mbps} Mb/s is not a whole number of bit/s")
    for unit, scale in (("Mbit/s", 10**6), ("Kbit/s", 10**3), ("bit/s", 1)):
        if bits % scale == 0:
            return f"{bits // scale}{unit}"
    raise AssertionError("unreachable")


def _whole_ms(delay_ms: float) -> int:
    if delay_ms < 0 or abs(delay_ms - round(delay_ms)) > 1e-9:
        raise ValueError(f"dummynet delays are whole milliseconds >= 0, not {delay_ms}")
    return int(round(delay_ms))


def queue_size(queue, bdp_bytes: float | None = None, mtu: int = 1500) -> tuple[str, int]:
    """('slots' | 'bytes', n) for a queue given as slots (int, '100p', '100slots') or as a size
    ('6MB', '4MiB', bytes as a digit string, '1bdp' when the BDP is known)."""
    if isinstance(queue, bool):
        raise ValueError("a queue size, not a boolean")
    if isinstance(queue, int):
        if queue < 1:
            raise ValueError("a queue of at least one slot")
        return "slots", queue
    match = _SLOTS.match(str(queue))
    if match:
        return queue_size(int(match.group(1)))
    if "bdp" in str(queue).lower() and bdp_bytes is None:
        raise ValueError("a BDP multiple needs the BDP (bdp_bytes), or give bytes or slots")
    return "bytes", parse_queue(str(queue), bdp_bytes or 0.0, mtu)


def queue_arg(queue, bdp_bytes: float | None = None, mtu: int = 1500) -> str:
    """The `queue` option's argument: slots as a bare number, sizes in the documented Kbytes
    (K is 1024 in ipfw's parser), rounded up so the queue is never smaller than asked:
    '6MB' = 6000000 B -> '5860Kbytes' (6000640 B)."""
    kind, n = queue_size(queue, bdp_bytes, mtu)
    return str(n) if kind == "slots" else f"{math.ceil(n / 1024)}Kbytes"


def pipe_plan(pipe_id: int, bw_mbps: float, delay_ms: float, queue) -> list[list[str]]:
    """One pipe: `ipfw pipe N config bw B delay D queue Q` (a FIFO link of rate B, one-way delay D)."""
    if not 1 <= pipe_id <= MAX_PIPE:
        raise ValueError(f"pipe numbers are 1..{MAX_PIPE}")
    return [["ipfw", "pipe", str(pipe_id), "config", "bw", bw_arg(bw_mbps),
             "delay", str(_whole_ms(delay_ms)), "queue", queue_arg(queue)]]


def rule_argv(rule: int, pipe_id: int, out_if: str) -> list[str]:
    """Send what leaves through out_if into the pipe: `out xmit IF` matches once, on output only."""
    if not 1 <= rule <= MAX_RULE:
        raise ValueError(f"rule numbers are 1..{MAX_RULE} (65535 is the default rule)")
    if not re.match(r"^[A-Za-z0-9_.]{1,15}$", out_if):
        raise ValueError(f"{out_if!r} is not an interface name")
    return ["ipfw", "-q", "add", str(rule), "pipe", str(pipe_id), "ip", "from", "any", "to", "any",
            "out", "xmit", out_if]


def egress_plan(out_if: str, bw_mbps: float, delay_ms: float, queue, rule: int = FIRST_RULE,
                pipe_id: int = FIRST_PIPE, bdp_bytes: float | None = None, mtu: int = 1500) -> list[list[str]]:
    """One direction: what leaves through out_if gets rate, queue and delay_ms (half the RTT)."""
    q = _resolved(queue, bdp_bytes, mtu)
    return [*pipe_plan(pipe_id, bw_mbps, delay_ms, q), rule_argv(rule, pipe_id, out_if)]


def _resolved(queue, bdp_bytes, mtu):
    """Sizes become whole bytes here (pipe_plan cannot know the BDP); slots stay slots."""
    kind, n = queue_size(queue, bdp_bytes, mtu)
    return n if kind == "slots" else f"{n}B"


def teardown_plan(first_rule: int = FIRST_RULE, first_pipe: int = FIRST_PIPE, count: int = 2) -> list[list[str]]:
    """Delete exactly the rules, then the pipes, that `count` egress plans numbered from
    first_rule and first_pipe made: rules first, so no packet is sent to a pipe that is gone."""
    rules = [str(first_rule + i) for i in range(count)]
    pipes = [str(first_pipe + i) for i in range(count)]
    return [["ipfw", "-q", "delete", *rules], ["ipfw", "pipe", "delete", *pipes]]


def sysctl_plan(queue, bdp_bytes: float | None = None, mtu: int = 1500) -> list[list[str]]:
    """What the router's kernel must allow for this plan (ipfw(8) SYSCTL VARIABLES):
    raise pipe_byte_limit / pipe_slot_limit when the queue exceeds their defaults (a 6 MB queue is
    refused with the default 1 MB limit); forward IPv4; one_pass=1 so a packet leaving a pipe
    leaves the firewall too; io_fast=0 keeps dummynet's "normal" mode, where every packet goes
    through the scheduler and so sees the configured rate and delay."""
    kind, n = queue_size(queue, bdp_bytes, mtu)
    plan = [["sysctl", "net.inet.ip.forwarding=1"],
            ["sysctl", "net.inet.ip.fw.one_pass=1"],
            ["sysctl", "net.inet.ip.dummynet.io_fast=0"]]
    if kind == "bytes" and math.ceil(n / 1024) * 1024 > BYTE_LIMIT_DEFAULT:
        plan.append(["sysctl", f"net.inet.ip.dummynet.pipe_byte_limit={math.ceil(n / 1024) * 1024}"])
    if kind == "slots" and n > SLOT_LIMIT_DEFAULT:
        plan.append(["sysctl", f"net.inet.ip.dummynet.pipe_slot_limit={n}"])
    return plan


def hz_problem(kern_hz: str) -> str | None:
    """Why this router's clock cannot give the delays asked for, or None."""
    hz = int(kern_hz.strip())
    if hz < 1000:
        return (f"kern.hz = {hz}: dummynet delays are rounded to {1000 / hz:g} ms ticks; "
                "set kern.hz=1000 in /boot/loader.conf")
    return None


# -- readiness: what `longhaul check --inventory` runs on a FreeBSD router, and how it reads ------

_KLD_SH = r"""for m in ipfw dummynet; do
  if kldstat -q -m "$m"; then echo "$m loaded"
  elif [ -e "/boot/kernel/$m.ko" ]; then echo "$m loadable"; else echo "$m missing"; fi
done
echo "hz $(sysctl -n kern.hz)" """


def read_dummynet(done) -> tuple[str, str]:
    found = kernel_lines(done.stdout)
    statuses, parts = [], []
    for module in ("ipfw", "dummynet"):
        state = found.get(module, "missing")
        statuses.append({"loaded": OK, "loadable": WARN}.get(state, FAIL))
        parts.append(f"{module} {state}" + (f" (kldload {module})" if state == "loadable" else ""))
    hz = found.get("hz", "")
    if hz.isdigit():
        problem = hz_problem(hz)
        statuses.append(WARN if problem else OK)
        parts.append(problem or f"kern.hz={hz}")
    return worst(statuses), ", ".join(parts)


def read_link(done, rate: float) -> tuple[str, str]:
    """ifconfig's media and status lines of a lab interface against the inventory's rate_mbps."""
    if done.returncode != 0:
        return FAIL, "no such interface on this host: " + first_line(done.stderr)
    media = re.search(r"media:.*?\((\d+)(G?)base", done.stdout)
    status = re.search(r"status:\s*(.+)", done.stdout)
    state = status.group(1).strip() if status else None
    state = {"active": "up", "no carrier": "down"}.get(state, state)
    if media:
        speed = float(media.group(1)) * (1000 if media.group(2) else 1)
        return rate_verdict(speed, rate, state)
    return WARN, f"speed unknown (no media line); inventory {rate:g} Mb/s"


PIPES_MARK = "--- pipes"
_STATE_SH = f"ipfw list; echo '{PIPES_MARK}'; ipfw pipe list"
_RULE_LINE = re.compile(r"^(\d{5}) ", re.MULTILINE)
_PIPE_LINE = re.compile(r"^(\d{5}):", re.MULTILINE)


def whole_ms(delay_ms: float) -> int:
    """Dummynet takes whole milliseconds: half of an odd RTT is rounded up (25 ms -> 13 + 13)."""
    return int(math.floor(delay_ms + 0.5))


class FreeBSDIpfw:
    """A FreeBSD router (base.RouterOS): one Dummynet pipe on its bottleneck egress port with the
    rate, the queue and half the RTT. Dummynet delays by itself: no netem, no delay line. The rule
    and the pipe are numbers FIRST_RULE and FIRST_PIPE, removed by number at teardown."""

    name = "freebsd"
    uname = "FreeBSD"
    end_hosts = False        # routers only: senders and receivers are Linux
    tools = ("ipfw", "sysctl")
    delays_itself = True
    sets_offloads = False    # FreeBSD's are ifconfig flags: left as found, said in the record
    meter_sh = f"ipfw pipe show {FIRST_PIPE}"

    def kernel_check(self) -> OsCheck:
        return OsCheck("dummynet", ("sh", "-c", _KLD_SH), read_dummynet)

    def link_check(self, ifname: str, rate_mbps: float) -> OsCheck:
        return OsCheck(f"link {ifname}", ("ifconfig", ifname), partial(read_link, rate=rate_mbps))

    def pci_check(self, pci: str) -> OsCheck | None:
        return None              # no sysfs: a FreeBSD router's PCI addresses are not checked

    def sysctls(self, shape: DirectionShape) -> dict[str, str]:
        return dict(argv[1].split("=", 1) for argv in sysctl_plan(str(shape.queue_bytes), mtu=shape.mtu))

    def write_sysctls(self, values: dict[str, str]) -> list[list[str]]:
        return [["sysctl", f"{key}={value}"] for key, value in values.items()]

    def shaping(self, shape: DirectionShape, netem: bool) -> list[list[str]]:
        return egress_plan(shape.ifname, shape.rate_mbps, whole_ms(shape.delay_ms), str(shape.queue_bytes),
                           mtu=shape.mtu)

    def unshaping(self, shape: DirectionShape) -> list[list[str]]:
        return teardown_plan(count=1)

    def read_shaping(self, ifname: str) -> list[str]:
        return ["sh", "-c", _STATE_SH]

    def parse_shaping(self, text: str) -> dict:
        """Every rule and pipe number on the router (`ipfw list`: "00050 pipe 50 ip from ...";
        `ipfw pipe list`: "00050:  10.000 Mbit/s   20 ms burst 0")."""
        rules, _, pipes = text.partition(PIPES_MARK)
        return {"kind": "dummynet", "rules": sorted({int(n) for n in _RULE_LINE.findall(rules)}),
                "pipes": sorted({int(n) for n in _PIPE_LINE.findall(pipes)})}

    def in_the_way(self, state: dict, ifname: str) -> str | None:
        taken = ([f"rule {FIRST_RULE}"] if FIRST_RULE in state["rules"] else []) + \
                ([f"pipe {FIRST_PIPE}"] if FIRST_PIPE in state["pipes"] else [])
        if not taken:
            return None
        return (f"already has ipfw {' and '.join(taken)}, the numbers longhaul shapes with: someone's configuration "
                f"or an interrupted run's; remove them first (ipfw delete {FIRST_RULE}; ipfw pipe delete {FIRST_PIPE})")

    def meter_counters(self, text: str) -> tuple[int, int, int] | None:
        return pipe_counters(text)


# a flow line of `ipfw pipe show` (ipfw's dummynet.c list_flow: "%3u%c" or "%3d ", the protocol,
# the two address/port pairs, then tot_pkts tot_bytes len len_bytes drops)
_FLOW_LINE = re.compile(r"^\s*\d+\*?\s+\S+\s+\S+/\d+\s+\S+/\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def pipe_counters(text: str) -> tuple[int, int, int] | None:
    """(bytes the pipe sent, bytes queued, packets dropped) from `ipfw pipe show N`, summed over its
    flow queues; None when no pipe was listed. Dummynet counts a packet in tot_bytes when it
    arrives, dropped or not, and keeps no dropped bytes, only packets: sent = arrived - queued -
    drops x the mean packet size, exact while nothing is dropped and within a packet's size per
    drop otherwise."""
    if not _PIPE_LINE.search(text):
        return None
    sent = queued = drops = 0
    for match in filter(None, map(_FLOW_LINE.match, text.splitlines())):
        pkts, nbytes, _, qbytes, dropped = (int(g) for g in match.groups())
        mean = nbytes / pkts if pkts else 0
        sent += max(0, round(nbytes - qbytes - dropped * mean))
        queued += qbytes
        drops += dropped
    return sent, queued, drops
