"""What preflight learns of an inventory's machines over SSH before a run builds anything: the
readiness checks (`longhaul check --inventory`'s) of the machines the run uses, and the facts the
lab's plan needs of each (the end hosts' congestion controls, whether a router has netem or needs
the delay line). A failed check stops the run before anything is set up."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from longhaul.hardware import bpf_ccas
from longhaul.hardware.backends.ssh import readiness
from longhaul.hardware.backends.ssh.host_checks import check_host
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.executors.process import ProcessTable
from longhaul.hardware.routers.registry import ROUTERS
from longhaul.hardware.verdicts import KERNEL_SH, kernel_feature, kernel_lines

ALLOWED_CCAS = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
AVAILABLE_CCAS = "/proc/sys/net/ipv4/tcp_available_congestion_control"


@dataclass(frozen=True)
class HostFacts:
    """What preflight learnt about one machine over SSH."""

    name: str                                  # the inventory's name
    role: str
    allowed_ccas: tuple[str, ...] = ()         # tcp_allowed_congestion_control (end hosts)
    ccas: tuple[str, ...] = ()                 # tcp_available_congestion_control
    netem: bool = False                        # routers: netem available (else the delay line)
    allowed_writable: bool = False             # end hosts: its own kernel's allowed list (not a netns's)
    lacks: tuple[str, ...] = ()                # senders: cca_fallback algorithms neither listed nor loadable


@dataclass
class HostsFeatures:
    """The ssh backend's preflight result; what Features is for the netns lab (manifest, progress)."""

    inventory: str
    hosts: dict[str, HostFacts] = field(default_factory=dict)   # by inventory name
    rows: list = field(default_factory=list)                     # readiness rows (warnings kept)
    backend: str = "ssh"                                         # the backend that drives these hosts
    extra: dict = field(default_factory=dict)                    # what that backend adds (qemu: its VMs)
    stand_ins: dict[str, str] = field(default_factory=dict)      # a cca a sender lacks -> its BPF version

    @property
    def delay(self) -> str:
        routers = [f for f in self.hosts.values() if f.role == "router"]
        return "netem" if routers and all(f.netem for f in routers) else "delayline"

    def as_dict(self) -> dict:
        return {"backend": self.backend, "inventory": self.inventory, "delay": self.delay,
                "hosts": {n: asdict(f) for n, f in self.hosts.items()},
                "kernels": {r.host: r.detail for r in self.rows if r.check == "os" and r.status == readiness.OK},
                **({"stand_ins": self.stand_ins} if self.stand_ins else {}),
                **self.extra,
                "readiness": [asdict(r) for r in self.rows if r.status != readiness.OK]}


def lab_machines(inventory, pairs: int, generator: bool = False) -> list:
    r1, r2 = inventory.routers()
    found = inventory.generator() if generator else None
    return [r1, r2, *[h for pair in inventory.pair_hosts()[:pairs] for h in pair], *([found] if found else [])]


def _facts(inventory, host, via, fallback: tuple[str, ...] = ()) -> tuple[HostFacts, list[str]]:
    """Allowed/available CCAs of end hosts (and which of `fallback` a sender can neither find nor
    load), netem and the delay line's needs on routers."""
    if host.role == "generator":          # TRex's own ports: readiness's trex and pci rows checked them
        return HostFacts(host.name, host.role), []
    executor = inventory.executor(host.name, ProcessTable(), via=via)
    problems: list[str] = []
    if host.role == "router":
        if ROUTERS[host.os].delays_itself:     # Dummynet: readiness's dummynet row has checked it
            return HostFacts(host.name, host.role), []
        done = executor.run(["sh", "-c", KERNEL_SH, "sh", "sch", "NET_SCH", "netem"], check=False)
        netem = kernel_feature(kernel_lines(done.stdout).get("netem", "unknown"))[0] in ("available", "loadable")
        if not netem:
            helper = str(delayline.helper_path())
            need = executor.run(["sh", "-c", readiness._TOOLS_SH, "sh", "iptables", helper], check=False).stdout.split()
            if need:
                problems.append(f"{host.name}: no netem, and the delay line needs {', '.join(need)} "
                                "(the helper at the controller's path: make setup on the router)")
        return HostFacts(host.name, host.role, netem=netem), problems
    allowed = executor.run(["cat", ALLOWED_CCAS], check=False).stdout.split()
    available = executor.run(["cat", AVAILABLE_CCAS], check=False).stdout.split()
    # read-only in a network namespace (the hosts of tests/system/test_hosts_lab.py): the machine's own
    writable = executor.run(["test", "-w", ALLOWED_CCAS], check=False).returncode == 0
    if host.role == "sender":
        probe = executor.run([sys.executable, "-c", "import longhaul.drivers.agents.tcpinfo_probe"], check=False)
        if probe.returncode != 0:
            problems.append(f"{host.name}: the socket sampler runs {sys.executable} -m longhaul.drivers.agents.tcpinfo_probe "
                            "there: install longhaul at the same path (make setup)")
    lacks: tuple[str, ...] = ()
    missing = [c for c in fallback if c not in available] if host.role == "sender" else []
    if missing:
        found = kernel_lines(executor.run(["sh", "-c", KERNEL_SH, "sh", "tcp", "TCP_CONG", *missing], check=False).stdout)
        lacks = tuple(c for c in missing if kernel_feature(found.get(c, "unknown"))[0] not in ("available", "loadable"))
    return HostFacts(host.name, host.role, tuple(allowed), tuple(available), allowed_writable=writable,
                     lacks=lacks), problems


def stand_ins_for(hosts: dict[str, HostFacts], rows: list, fallback: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """cca -> its BPF version, for each algorithm a cell may fall back on (tuning.cca_fallback) that
    a sender lacks; and the problems: an end host whose stand-ins row says it cannot run them."""
    chosen = {cca: bpf_ccas.stand_in(cca) for cca in fallback
              if bpf_ccas.stand_in(cca) and any(cca in f.lacks for f in hosts.values())}
    problems = []
    if chosen:
        lacking = ", ".join(f"{f.name} lacks {' '.join(f.lacks)}" for f in hosts.values() if f.lacks)
        problems = [f"{r.host} ({r.role}) cannot run {', '.join(chosen.values())}, and {lacking}: {r.detail}"
                    for r in rows if r.check == readiness.STAND_INS_CHECK and r.status != readiness.OK]
    return chosen, problems


def preflight(inventory, inventory_path, pairs: int, wants, via=None, generator: bool = False) -> HostsFeatures:
    """Readiness (longhaul check --inventory's checks) of the machines this run uses, plus the
    facts the plan needs. Raises RuntimeError naming every failed check; warnings are kept."""
    problems: list[str] = []
    if pairs > len(inventory.pairs):
        problems.append(f"the profiles need {pairs} pair(s); inventory {inventory_path} has {len(inventory.pairs)}")
    if inventory.bottleneck is None:
        raise RuntimeError(f"inventory {inventory_path} has no [bottleneck] routers")
    if generator and inventory.generator() is None:
        problems.append(f"a flow sends from a traffic generator; inventory {inventory_path} has no host "
                        "with role = 'generator'")
    machines = lab_machines(inventory, min(pairs, len(inventory.pairs)), generator)
    with ThreadPoolExecutor(max_workers=min(16, 2 * len(machines))) as pool:
        checks = [pool.submit(check_host, inventory, h, wants, via) for h in machines]
        rows = [row for f in checks for row in f.result()]
        failed_hosts = {r.host for r in rows if r.status == readiness.FAIL}
        facts = {h.name: pool.submit(_facts, inventory, h, via, wants.fallback)
                 for h in machines if h.name not in failed_hosts}
        found = {name: f.result() for name, f in facts.items()}
    problems += [f"{r.host} ({r.role}) {r.check}: {r.detail}" for r in rows if r.status == readiness.FAIL]
    problems += [p for _, more in found.values() for p in more]
    hosts = {n: f for n, (f, _) in found.items()}
    stand_ins, refused = stand_ins_for(hosts, rows, wants.fallback)
    problems += refused
    if problems:
        raise RuntimeError("the real lab is not ready:\n  - " + "\n  - ".join(problems))
    return HostsFeatures(str(inventory_path), hosts, rows, stand_ins=stand_ins)
