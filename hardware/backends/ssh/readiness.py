"""Is a real lab ready? The checks `longhaul check --inventory` runs on each host, and what their
output means.

Pure: this module only builds argv lists (what to run on a host, by its role and OS) and reads
their Completed (returncode, stdout, stderr) into (status, detail), status one of ok | warn | fail.
Running them over SSH is hardware/backends/ssh/host_checks.py's job. Every argv that carries a name from
the inventory or a profile (a tool, an interface, a CCA) passes it as a positional argument of a
fixed `sh -c` script, never interpolated into the script text.

Kernel features (qdiscs, congestion controls) are judged from evidence the host already has,
without touching its network: loaded (/proc/modules), built in (modules.builtin), loadable
(`modinfo -n` finds the module file), and last the kernel's own config (/proc/config.gz or
/boot/config-$(uname -r)), which is the only evidence on a kernel built without module support.
Creating a scratch qdisc would be a stronger proof, but would change a router someone else may be
using; `longhaul run` still finds out for sure when it shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from longhaul.drivers.trex_stl import API_SUBDIR, RPC_PORT
from longhaul.hardware import bpf_ccas
from longhaul.hardware.backends.ssh.bpf_holds import bpf_names, hold_argv
from longhaul.hardware.routers.registry import ROUTERS
from longhaul.hardware.verdicts import (
    FAIL,
    KERNEL_SH,
    OK,
    WARN,
    OsCheck,
    first_line,
    kernel_feature,
    kernel_lines,
    worst,
)

END_HOST_TOOLS = ("iperf3", "fping", "python3", "ss")   # the probe, the default tool, readiness
CONTROLLER_TOOLS = ("ssh",)
GENERATOR_TOOLS = ("python3", "ss")        # TRex's STL client runs there; ss sees its RPC port
DEFAULT_CCAS = ("cubic", "bbr")            # looked for when no profile says: missing ones only warn
STAND_INS_CHECK = "BPF stand-ins"           # the row the preflight reads to allow a cca_fallback
WARN_OFFSET_S = 0.010
FAIL_OFFSET_S = 1.0

_TOOLS_SH = 'for t; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'
_CCA_SH = "cat /proc/sys/net/ipv4/tcp_available_congestion_control || exit 1\n" + KERNEL_SH
_CLOCK_SH = r"""if command -v timedatectl >/dev/null 2>&1; then
  printf 'timedatectl '; timedatectl show -p NTPSynchronized --value 2>&1 | head -n 1; fi
if command -v chronyc >/dev/null 2>&1; then
  printf 'chronyc '; chronyc -n tracking 2>&1 | grep -E 'Leap status|Cannot|506|refused' | head -n 1; echo; fi
if command -v ntpq >/dev/null 2>&1; then printf 'ntpq '; ntpq -c rv 2>&1 | head -n 1; fi
exit 0"""
# A generator's TRex tree ($1) and its server: the binary, the STL client library, the RPC port
_TREX_SH = rf"""root=$1
if [ -x "$root/t-rex-64" ]; then echo "server present"; else echo "server missing"; fi
if [ -d "$root/{API_SUBDIR}/trex/stl" ]; then echo "api present"; else echo "api missing"; fi
if ss -lntH 'sport = :{RPC_PORT}' | grep -q .; then echo "rpc listening"; else echo "rpc closed"; fi"""
# The clock is read in a loop over one session: one line in, one timestamp out (the controller
# times each exchange; see clock_offset).
CLOCK_LOOP_SH = 'while read -r x; do date +%s.%N; done'


@dataclass(frozen=True)
class Check:
    name: str                   # the table's "check" column
    kind: str                   # which interpreter reads it
    argv: tuple[str, ...] = ()
    params: tuple = ()          # what the interpreter compares against
    local: bool = False         # runs on the controller itself (no SSH)
    reader: Callable | None = field(default=None, compare=False)   # kind "os": the OS module's reader


@dataclass(frozen=True)
class Row:
    host: str
    role: str
    check: str
    status: str
    detail: str


@dataclass(frozen=True)
class Wants:
    """What the selected profiles need from the end hosts."""
    tools: tuple[str, ...] = ()   # executables of the traffic tools the profiles use
    ccas: tuple[str, ...] = ()    # congestion controls of their TCP flows (empty: DEFAULT_CCAS, optional)
    resolving: tuple[str, ...] = ()   # tools whose server looks up the receiver's test address
    # kernel congestion controls whose BPF version may run where a sender lacks them (cca_fallback)
    fallback: tuple[str, ...] = ()


# -- which checks -----------------------------------------------------------------------------

def reach_check() -> Check:
    """Run first: proves reachability, the host key and the login, and names the OS."""
    return Check("reachable", "reach", ("uname", "-sr"))


def _own(check: OsCheck) -> Check:
    """A check the host's OS module made (hardware/routers/): it reads its own output."""
    return Check(check.name, "os", check.argv, reader=check.read)


def host_checks(host, wants: Wants = Wants()) -> list[Check]:
    """The checks after reach_check() for one inventory host, by role and OS."""
    if host.role == "controller":
        return [Check("tools", "tools", ("sh", "-c", _TOOLS_SH, "sh", *CONTROLLER_TOOLS), CONTROLLER_TOOLS, True),
                Check("clock sync", "clock", ("sh", "-c", _CLOCK_SH), (), True)]
    system = ROUTERS[host.os]
    if host.role == "router":
        tools = system.tools
    elif host.role == "generator":
        tools = GENERATOR_TOOLS
    else:
        tools = tuple(dict.fromkeys(END_HOST_TOOLS + wants.tools))
    checks = [Check("tools", "tools", ("sh", "-c", _TOOLS_SH, "sh", *tools), tools)]
    if host.role == "router":
        checks.append(_own(system.kernel_check()))
    bpf = bpf_names(wants.ccas)
    if host.role == "sender":
        kernel = tuple(c for c in wants.ccas if c not in bpf)
        ccas = kernel or DEFAULT_CCAS
        checks.append(Check("congestion controls", "ccas",
                            ("sh", "-c", _CCA_SH, "sh", "tcp", "TCP_CONG", *ccas), (ccas, bool(kernel), wants.fallback)))
    if bpf and host.role in ("sender", "receiver"):       # both ends' sockets name it (iperf3 -C)
        checks.append(Check("BPF congestion controls", "bpf", tuple(hold_argv(bpf, check=True))))
    stand_ins = tuple(s for s in map(bpf_ccas.stand_in, wants.fallback) if s and s not in bpf)
    if stand_ins and host.role in ("sender", "receiver"):
        # needed only where a sender lacks the kernel's own: the preflight decides (a warning here)
        checks.append(Check(STAND_INS_CHECK, "stand-ins", tuple(hold_argv(stand_ins, check=True))))
    if host.role == "generator" and host.trex_path:
        checks.append(Check("trex", "trex", ("sh", "-c", _TREX_SH, "sh", host.trex_path), (host.trex_path,)))
    if host.role == "receiver" and wants.resolving:
        for iface in (i for i in host.interfaces if i.link == "access"):
            checks.append(Check(f"name of {iface.ip}", "name", ("getent", "hosts", iface.ip), (wants.resolving,)))
    checks.append(Check("clock sync", "clock", ("sh", "-c", _CLOCK_SH)))
    checks.append(Check("clock offset", "offset", ("sh", "-c", CLOCK_LOOP_SH)))
    for iface in host.interfaces:
        pci = system.pci_check(iface.pci) if iface.pci else None
        if iface.dpdk or (host.role == "generator" and iface.pci):    # DPDK's: maybe no kernel link
            checks += [_own(pci)] if pci else []
            continue
        checks.append(_own(system.link_check(iface.name, iface.rate_mbps)))
        checks += [_own(pci)] if pci else []
    return checks


# -- what the output means --------------------------------------------------------------------

def classify_ssh(stderr: str, returncode: int) -> tuple[str, str] | None:
    """(row, detail) for a failure of SSH itself, None when the remote command ran.

    ssh exits 255 for its own errors (and -1 is a local timeout); its message names the cause."""
    if returncode not in (255, -1):
        return None
    text = stderr.strip()
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return "host key", "the host's key CHANGED since known_hosts recorded it (a new install, or not that host)"
    if "Host key verification failed" in text:
        return "host key", "not in known_hosts (add it, or trust_on_first_use = true once)"
    if "Permission denied" in text:
        return "login", "key refused: " + first_line(text)
    for needle, what in (("Connection refused", "connection refused: nothing listens on the SSH port"),
                         ("timed out", "no answer (timed out)"),
                         ("No route to host", "no route to host"),
                         ("Network is unreachable", "network unreachable"),
                         ("Could not resolve hostname", "the name does not resolve"),
                         ("Connection closed", "sshd closed the connection"),
                         ("Connection reset", "the connection was reset"),
                         ("not found: ", "the ssh client is not installed on the controller")):
        if needle in text:
            return "reachable", what
    if returncode == -1:
        return "reachable", text or "timed out"
    if not text:
        # uname and the other probes never exit 255, so this is ssh's own failure with its message
        # lost (seen when a connect to an absent host raced ConnectTimeout on a starved CPU)
        return "reachable", "ssh exited 255 without a message (no answer from the host?)"
    return "reachable", "ssh failed: " + first_line(text)


def interpret_reach(host, done) -> list[tuple[str, str, str]]:
    """(check, status, detail) rows for reachable, host key, login and os."""
    failure = classify_ssh(done.stderr, done.returncode)
    if failure is not None:
        row, detail = failure
        rows = [("reachable", OK, "sshd answers")] if row in ("host key", "login") else []
        if row == "login":
            rows.append(("host key", OK, "matches known_hosts"))
        rows.append((row, FAIL, detail + "; other checks skipped"))
        return rows
    rows = [("reachable", OK, f"{host.management}:{host.ssh_port}"), ("host key", OK, "matches known_hosts"),
            ("login", OK, "key accepted")]
    if done.returncode != 0:
        return rows + [("os", WARN, f"uname failed ({done.returncode}): {first_line(done.stderr)}")]
    system = done.stdout.strip()
    expected = ROUTERS[host.os].uname
    if not system.startswith(expected):
        return rows + [("os", FAIL, f"{system or 'nothing'}, but the inventory says os = '{host.os}'")]
    return rows + [("os", OK, system)]


def interpret_tools(done, tools) -> tuple[str, str]:
    missing = [t for t in done.stdout.split() if t in tools]
    if done.returncode != 0 and not missing:
        return FAIL, f"could not look ({done.returncode}): {first_line(done.stderr)}"
    if missing:
        return FAIL, "missing: " + " ".join(missing)
    return OK, " ".join(tools)


def interpret_ccas(done, params) -> tuple[str, str]:
    wanted, required, fallback = params
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        return FAIL, "cannot read tcp_available_congestion_control: " + first_line(done.stderr)
    available = lines[0].split()
    found = kernel_lines("\n".join(lines[1:]))
    statuses, notes = [OK], []
    for cca in wanted:
        if cca in available:
            continue
        state, words = kernel_feature(found.get(cca, "unknown"))
        if state == "available":
            notes.append(f"{cca}: {words}")        # built in but not listed: odd, say so
        elif state == "loadable":
            statuses.append(WARN)
            notes.append(f"{cca}: not loaded, {words} (a run loads it: modprobe tcp_{cca})")
        elif cca in fallback:       # the preflight checks the stand-in on every end host
            statuses.append(WARN)
            notes.append(f"{cca}: {words} (tuning.cca_fallback runs longhaul's {bpf_ccas.stand_in(cca)})")
        else:
            statuses.append(FAIL if required else WARN)
            notes.append(f"{cca}: {words}" + ("" if required else " (no profile asks for it)"))
    return worst(statuses), "available: " + " ".join(available) + ("; " + "; ".join(notes) if notes else "")


def interpret_bpf(done) -> tuple[str, str]:
    """hardware/bpf_hold.py --check: whether the host could register longhaul's BPF congestion
    controls the profiles name (for those its kernel lacks)."""
    said = first_line(done.stdout) or first_line(done.stderr)
    if done.returncode == 0:
        return OK, said
    if done.returncode == 127 or "No module named" in done.stderr:
        return FAIL, "longhaul is not installed at the controller's path there (make setup): " + first_line(done.stderr)
    return FAIL, said


def interpret_stand_ins(done) -> tuple[str, str]:
    """The BPF versions of kernel algorithms a cell may fall back to: a host that cannot run them
    is a warning here, and a refusal from the preflight only where a sender lacks the kernel's."""
    status, said = interpret_bpf(done)
    return (OK, said) if status == OK else (WARN, said + " (only a sender lacking the kernel's own needs them)")


def interpret_name(done, params) -> tuple[str, str]:
    """`getent hosts ADDR` on a receiver: a server that looks up its own address at start (GridFTP's
    fails with "Temporary failure in name resolution" where nothing answers) needs it to resolve."""
    (tools,) = params
    if done.returncode == 0 and done.stdout.split():
        return OK, " ".join(done.stdout.split()[1:]) or done.stdout.strip()
    return FAIL, (f"does not resolve on this host, and {', '.join(tools)} looks its own test address up at "
                  "start: give it a name in /etc/hosts (or DNS, forward and reverse)")


def interpret_clock(done) -> tuple[str, str]:
    synced, unsynced, said = [], [], []
    for line in done.stdout.splitlines():
        source, _, value = line.strip().partition(" ")
        value = value.strip()
        if source not in ("timedatectl", "chronyc", "ntpq") or not value:
            continue
        said.append(f"{source}: {value}")
        if source == "timedatectl" and value in ("yes", "no"):
            (synced if value == "yes" else unsynced).append(source)
        elif source == "chronyc" and "Leap status" in value:
            (synced if value.split(":", 1)[1].strip() in ("Normal", "Insert second", "Delete second")
             else unsynced).append(source)
        elif source == "ntpq" and "leap_" in value:
            (synced if "leap_none" in value and "sync_unspec" not in value else unsynced).append(source)
    if synced:
        return OK, "synchronized (" + ", ".join(synced) + ")"
    if unsynced:
        return WARN, "NOT synchronized (" + ", ".join(unsynced) + "); the offset row says by how much"
    return WARN, "no NTP client answers" + (": " + "; ".join(said) if said else " (no timedatectl, chronyc or ntpq)")


def _exchanges(samples: list[tuple[float, str, float]]) -> tuple[list[tuple[float, float]], bool]:
    """(round trip, offset) of each readable exchange, and whether the host's date lacked %N."""
    good, coarse = [], False
    for before, text, after in samples:
        text = text.strip()
        if not re.match(r"^\d+(\.\d+)?$", text):
            if re.match(r"^\d+\.N$", text) or re.match(r"^\d+\.%N$", text):   # a date without %N
                text, coarse = text.split(".")[0], True
            else:
                continue
        good.append((after - before, float(text) - (before + after) / 2))
    return good, coarse


def offset_estimate(samples: list[tuple[float, str, float]]) -> float | None:
    """The host's clock minus the controller's, in seconds, from clock_offset's samples (None when
    the host gave no fine-grained time)."""
    good, coarse = _exchanges(samples)
    return min(good)[1] if good and not coarse else None


def clock_offset(samples: list[tuple[float, str, float]]) -> tuple[str, str]:
    """samples: (controller time before, the host's `date +%s.%N`, controller time after). The host
    read its clock somewhere in between: the exchange with the shortest round trip bounds it best,
    its midpoint is the estimate and half its round trip the uncertainty."""
    good, coarse = _exchanges(samples)
    if not good:
        shown = samples[0][1].strip()[:80] if samples else "nothing"
        return FAIL, f"could not read the host's clock (got {shown!r})"
    rtt, offset = min(good)
    detail = f"{offset * 1e3:+.1f} ms ± {rtt / 2 * 1e3:.1f} ms vs the controller"
    if coarse:
        detail += " (the host's date has no %N: 1 s resolution)"
        return (FAIL if abs(offset) > FAIL_OFFSET_S + 1 else WARN), detail
    if abs(offset) > FAIL_OFFSET_S:
        return FAIL, detail + f" (over {FAIL_OFFSET_S:g} s: per-second results would not line up)"
    if abs(offset) > WARN_OFFSET_S:
        return WARN, detail + f" (over {WARN_OFFSET_S * 1e3:g} ms)"
    return OK, detail


def interpret_trex(done, params) -> tuple[str, str]:
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    root = params[0]
    if seen.get("server") != "present":
        return FAIL, f"no executable {root}/t-rex-64 (trex_path is the TRex release tree)"
    if seen.get("api") != "present":
        return FAIL, f"no STL client library in {root}/{API_SUBDIR}/trex/stl"
    if seen.get("rpc") != "listening":
        return FAIL, f"TRex is not running: nothing listens on its RPC port {RPC_PORT} (start `t-rex-64 -i` there)"
    return OK, f"{root}: server running (RPC port {RPC_PORT})"


def interpret(check: Check, done) -> tuple[str, str]:
    """(status, detail) of one check's Completed (not reach: see interpret_reach)."""
    failure = classify_ssh(done.stderr, done.returncode)
    if failure is not None:
        return FAIL, f"{failure[0]}: {failure[1]}"
    if check.reader is not None:
        return check.reader(done)
    with_params = {"tools": interpret_tools, "ccas": interpret_ccas, "name": interpret_name, "trex": interpret_trex}
    plain = {"clock": interpret_clock, "bpf": interpret_bpf, "stand-ins": interpret_stand_ins}
    if check.kind in with_params:
        return with_params[check.kind](done, check.params)
    if check.kind in plain:
        return plain[check.kind](done)
    raise ValueError(f"no interpreter for check kind {check.kind!r}")


# -- the table ----------------------------------------------------------------------------------

def rows_for(host, results: list[tuple[str, str, str]]) -> list[Row]:
    return [Row(host.name, host.role, check, status, detail) for check, status, detail in results]


def verdict(rows: list[Row]) -> tuple[bool, str]:
    """Ready when no row failed (warnings are allowed: they name what may skew results)."""
    failed = [r for r in rows if r.status == FAIL]
    warned = [r for r in rows if r.status == WARN]
    if failed:
        hosts = ", ".join(dict.fromkeys(r.host for r in failed))
        return False, f"NOT ready: {len(failed)} failed check(s) on {hosts}" + \
            (f", {len(warned)} warning(s)" if warned else "")
    return True, "ready" + (f" ({len(warned)} warning(s))" if warned else "")
