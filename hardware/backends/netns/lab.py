"""The embedded lab: a Dumbbell realised as network namespaces on this machine.

`lab_plan` is pure (it returns the steps); `NetnsLab` applies them and registers an undo for every
step on the run's CleanupStack, so a failure half-way still leaves nothing behind. Every object is
named after the run's tag (namespaces `lh-<tag>-<host>`), which is what `longhaul clean` looks for.
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from longhaul.hardware.backends.base import LinkSettings, Step, bottleneck_shapes, same_path
from longhaul.hardware.backends.netns.features import Features
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.executors.process import LocalExecutor, NetnsExecutor, ProcessTable, wait_until
from longhaul.hardware.generator import TrexPort, TrexSection, start_server
from longhaul.hardware.namespaces import NETNS_ETC, remove_namespace
from longhaul.hardware.offloads import apply_offloads
from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.linux_tc import access_plan
from longhaul.hardware.routers.registry import ROUTERS
from longhaul.hardware.topology import GENERATOR, Dumbbell
from longhaul.hardware.tuning import host_sysctls, sysctl_argv

log = logging.getLogger(__name__)
LINUX = ROUTERS["linux"]
CORE_MEM = ("net.core.rmem_max", "net.core.wmem_max")
LAB_EHASH_ENTRIES = 256     # buckets for a lab host's established TCP sockets: a few hundred at most


def lab_plan(topo: Dumbbell, settings: LinkSettings, features: Features) -> list[Step]:
    """Everything after the namespaces exist: links, addresses, routes, sysctls, shaping."""
    steps: list[Step] = []
    for host in topo.hosts:
        steps.append(Step(host.name, ["ip", "link", "set", "lo", "up"]))
    for link in topo.links:
        # made inside the first end's namespace: a kernel such as Debian 12's 6.1 looks the new
        # name up in the namespace it is asked from, and this machine's own eth0 would refuse
        # "eth0 netns X" with "File exists"
        steps.append(Step(link.a.host, ["ip", "link", "add", link.a.ifname, "type", "veth", "peer",
                                        "name", link.b.ifname, "netns", topo.host(link.b.host).netns]))
        for port in (link.a, link.b):
            steps.append(Step(port.host, ["ip", "addr", "add", port.address, "dev", port.ifname]))
            steps.append(Step(port.host, ["ip", "link", "set", port.ifname, "mtu", str(topo.mtu), "up"]))
    for route in topo.routes:
        steps.append(Step(route.host, ["ip", "route", "add", route.destination, "via", route.via]))
    shapes = {host: shape for shape, host in bottleneck_shapes(topo, settings)}
    for host in topo.hosts:          # the routers are namespaces of this machine: Linux routers
        settings_for = LINUX.sysctls(shapes[host.name]) if host.role == "router" else end_sysctls(settings, features)
        steps += [Step(host.name, argv) for argv in sysctl_argv(settings_for)]
    for link in topo.links:
        if link.kind == "access":
            for port in (link.a, link.b):
                steps += [Step(port.host, argv) for argv in access_plan(port.ifname, link.rate_mbps, topo.mtu)]
    for host, shape in shapes.items():
        steps += [Step(host, argv) for argv in LINUX.shaping(shape, features.netem)]
    return steps


def end_sysctls(settings: LinkSettings, features: Features) -> dict[str, str]:
    """An end host namespace's tuning for the cell."""
    values = host_sysctls(settings.cca, settings.buffer, list(features.allowed_congestion_controls))
    if not features.core_mem_in_netns:
        # the machine's own limits there: TCP autotuning still reaches the buffer through
        # tcp_rmem/tcp_wmem, which every namespace has; only an explicit -w size is capped
        values = {k: v for k, v in values.items() if k not in CORE_MEM}
    return values


class NetnsLab:
    def __init__(self, topo: Dumbbell, settings: LinkSettings, features: Features,
                 procs: ProcessTable, cleanup: CleanupStack, workdir: Path, trex: TrexSection | None = None,
                 record: dict | None = None):
        """record: what the session changed on this machine for its labs (tcp_mem), or None:
        the namespaces are the lab's own."""
        self.record = record
        self.topo = topo
        self.settings = settings
        self.features = features
        self.procs = procs
        self.cleanup = cleanup
        self.workdir = Path(workdir)
        self.local = LocalExecutor("controller", procs)
        self._executors = {h.name: NetnsExecutor(h.name, h.netns, procs) for h in topo.hosts}
        self.delaylines = []
        self.trex = trex
        self._facts: dict[int, dict] = {}

    def executor(self, host: str) -> NetnsExecutor:
        return self._executors[host]

    def router_os(self, host: str) -> RouterOS:
        return ROUTERS["linux"]          # the namespaces' routers are this machine's Linux

    def address(self, host: str) -> str:
        return self.topo.address(host)

    def pair_facts(self, pair: int) -> dict:
        """What layer-2 tools (DPDK, TRex) need to address pair `pair` without ARP: the sender's
        interface, its next hop's MAC, both addresses and the receiver's interface."""
        if pair not in self._facts:
            sender, receiver = self.topo.access_link(f"S{pair}"), self.topo.access_link(f"D{pair}")
            router = self.executor(sender.b.host)
            mac = router.run(["cat", f"/sys/class/net/{sender.b.ifname}/address"]).stdout.strip()
            self._facts[pair] = {"iface": sender.a.ifname, "dst_mac": mac, "src_ip": self.address(f"S{pair}"),
                                 "dst_ip": self.address(f"D{pair}"), "rx_iface": receiver.a.ifname}
        return self._facts[pair]

    def generator_facts(self, pair: int) -> dict:
        """Where TRex (on G1, port 0: its veth into R1) sends pair `pair`'s packets from, and
        where the receiver's meter counts them."""
        port = self.topo.access_link(GENERATOR)
        return {"trex_path": self.trex.path, "trex_ports": [0], "src_ip": self.address(GENERATOR),
                "line_rate_mbps": port.rate_mbps, "dst_ip": self.address(f"D{pair}"),
                "rx_iface": self.topo.access_link(f"D{pair}").a.ifname}

    def build(self) -> None:
        with own_ehash():
            for host in self.topo.hosts:
                self.local.run(["ip", "netns", "add", host.netns])
                self.cleanup.push(f"delete namespace {host.netns}", lambda ns=host.netns: remove_namespace(ns))
                self._write_hosts_file(host.netns)
        for step in lab_plan(self.topo, self.settings, self.features):
            runner = self.local if step.host is None else self._executors[step.host]
            runner.run(step.argv)
        if self.settings.offloads:       # veths take gro/gso/tso/sg/rx/tx; namespaces go, so no undo
            for port in (p for link in self.topo.links for p in (link.a, link.b)):
                apply_offloads(self._executors[port.host], port.ifname, dict(self.settings.offloads))
        if not self.features.netem and self.settings.rtt_ms > 0:
            self._start_delaylines()
        if self.trex is not None:
            self._start_trex()

    def retune(self, settings: LinkSettings) -> bool:
        """The next cell's congestion control and buffers in the end hosts' namespaces, where it
        writes every key the last cell wrote (a key left out would keep the last cell's value)."""
        wanted = end_sysctls(settings, self.features)
        if not same_path(settings, self.settings) or wanted.keys() != end_sysctls(self.settings, self.features).keys():
            return False
        for host in (h.name for h in self.topo.hosts if h.role != "router"):
            for argv in sysctl_argv(wanted):
                self._executors[host].run(argv)
        self.settings = settings
        return True

    def _start_trex(self) -> None:
        link = self.topo.access_link(GENERATOR)
        port = TrexPort(link.a.ifname, link.a.address.split("/")[0], link.b.address.split("/")[0])
        proc = start_server(self._executors[GENERATOR], self.trex, [port], self.workdir)
        self.cleanup.push(f"stop TRex on {GENERATOR}", proc.stop)

    def _write_hosts_file(self, netns: str) -> None:
        directory = NETNS_ETC / netns
        directory.mkdir(parents=True, exist_ok=True)
        self.cleanup.push(f"remove {directory}", lambda: shutil.rmtree(directory, ignore_errors=True))
        (directory / "hosts").write_text(self.topo.hosts_file())

    def _start_delaylines(self) -> None:
        helper = delayline.helper_path()
        if not os.access(helper, os.X_OK):
            raise FileNotFoundError(f"delay-line helper not built: {helper} (run make setup)")
        for queue, (shape, host) in enumerate(bottleneck_shapes(self.topo, self.settings), start=1):
            executor = self._executors[host]
            ready = self.workdir / f"delayline-{host}.ready"
            ready.unlink(missing_ok=True)
            proc = executor.start(delayline.command(queue, shape.delay_ms, ready_file=str(ready)),
                                  label=f"delayline-{host}", stdout=self.workdir / f"delayline-{host}.json",
                                  stderr=self.workdir / f"delayline-{host}.log")
            self.delaylines.append(proc)
            self.cleanup.push(f"stop delay line on {host}", proc.stop)
            wait_until(lambda ready=ready, proc=proc: ready.exists() or proc.poll() is not None, 10, what=f"delay line on {host}")
            if proc.poll() is not None:
                raise RuntimeError(f"delay line on {host} exited: {proc.read_stderr().strip()}")
            setup, teardown = delayline.iptables_rules(shape.ifname, queue)
            for argv in setup:
                executor.run(argv)


@contextmanager
def own_ehash(entries: int = LAB_EHASH_ENTRIES):
    """Namespaces made inside get an established-socket hash table of their own, `entries` buckets,
    instead of sharing the machine's (262,144 here): every sock_diag dump walks the whole table, and
    a tcp_info probe at 100 Hz spent 2.5 % of a core on the walk alone, 0.4 % with its own. The
    machine's setting (read by the kernel when a namespace is made, Linux 6.1+) is put back at once."""
    knob = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
    before = knob.read_text().strip() if knob.exists() else None
    if before is not None:
        knob.write_text(str(entries))
    try:
        yield
    finally:
        if before is not None:
            knob.write_text(before)
