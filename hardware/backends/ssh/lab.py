"""A lab of real, already-wired hosts (an inventory), driven over SSH with NetnsLab's interface.

The facility owns the wiring: addresses, routes and access links are never touched. longhaul owns
only what an experiment changes: end-host sysctls (congestion control default, buffer limits, no
route-metrics cache), router forwarding, and the bottleneck shaping on both routers' `link =
"bottleneck"` interfaces (tbf, and netem where the router has it, else the userspace delay line
started on the router over SSH from the same path as on this controller). Before changing
anything, every sysctl it will write and the routers' root qdiscs are read and recorded; the undo
steps go on the run's CleanupStack first, so a failure, a crash of a trial or Ctrl-C leaves the hosts
as found. `record` holds before/applied/after per host for the run's manifest (seed 000 Fig. 6a).

Pure parts: `inventory_dumbbell` (lab names S<i>/D<i>/R1/R2 -> the inventory's machines and test
interfaces), `sysctl_steps` and `shaping_steps` (the Step lists). Each router's shaping comes from its OS's plans
(hardware/routers/registry.py, by the inventory's `os`: tc on Linux, Dummynet on FreeBSD); an OS
with no entry there is refused at preflight.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from longhaul.hardware.backends.base import LinkSettings, Step, bottleneck_shapes, same_path
from longhaul.hardware.backends.ssh.preflight import AVAILABLE_CCAS, HostsFeatures
from longhaul.hardware.backends.ssh.undo import UndoJournal
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.delayline import helper as delayline
from longhaul.hardware.executors.process import ProcessTable, wait_until
from longhaul.hardware.offloads import apply_offloads, offload_argv, read_offloads
from longhaul.hardware.path_rtt import below_floor, path_floor
from longhaul.hardware.routers.base import RouterOS
from longhaul.hardware.routers.registry import ROUTERS
from longhaul.hardware.topology import GENERATOR, Dumbbell, Host, Link, Port
from longhaul.hardware.tuning import host_sysctls, sysctl_argv

log = logging.getLogger(__name__)


def _net(address: str):
    return ipaddress.ip_interface(address).network


def inventory_dumbbell(inventory, tag: str, pairs: int, bottleneck_rate_mbps: float,
                       mtu: int) -> tuple[Dumbbell, dict[str, str]]:
    """(Dumbbell, lab name -> inventory name). Ports are the machines' test interfaces; a router's
    access port is its interface on the end host's subnet (else its first access interface)."""
    if pairs > len(inventory.pairs):
        raise ValueError(f"the profile needs {pairs} pair(s); the inventory has {len(inventory.pairs)}")
    r1, r2 = inventory.routers()
    names = {"R1": r1.name, "R2": r2.name}
    hosts = [Host("R1", "router", ""), Host("R2", "router", "")]

    def wan(router):
        return next(i for i in router.interfaces if i.link == "bottleneck")

    def access_iface(machine):
        found = [i for i in machine.interfaces if i.link == "access"]
        if not found:
            raise ValueError(f"{machine.name} has no test interface in the inventory")
        return found[0]

    for router in (r1, r2):
        if not any(i.link == "bottleneck" for i in router.interfaces):
            raise ValueError(f"router {router.name} has no interface with link = 'bottleneck'")
    a, b = wan(r1), wan(r2)
    links = [Link(Port("R1", a.name, a.address), Port("R2", b.name, b.address), "bottleneck", bottleneck_rate_mbps)]
    for i, (sender, receiver) in enumerate(inventory.pair_hosts()[:pairs], start=1):
        for side, machine, router, role in (("S", sender, r1, "sender"), ("D", receiver, r2, "receiver")):
            name = f"{side}{i}"
            names[name] = machine.name
            hosts.append(Host(name, role, ""))
            own = access_iface(machine)
            near = [x for x in router.interfaces if x.link == "access" and _net(x.address) == _net(own.address)]
            port = near[0] if near else access_iface(router)
            links.append(Link(Port(name, own.name, own.address), Port(f"R{1 if side == 'S' else 2}", port.name,
                                                                       port.address), "access", own.rate_mbps))
    return Dumbbell(tag, pairs, tuple(hosts), tuple(links), (), mtu), names


def tuned_sysctls(topo: Dumbbell, settings: LinkSettings, allowed: dict[str, tuple[str, ...]],
                  routers: dict[str, RouterOS] | None = None, may_allow: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Lab host -> the sysctls longhaul sets there (allowed: lab host -> its allowed CCAs;
    routers: router -> its OS, Linux where not given; may_allow: the end hosts whose allowed list
    may be extended by the cell's CCA)."""
    shapes = {host: shape for shape, host in bottleneck_shapes(topo, settings)}
    return {h.name: (_router(routers, h.name).sysctls(shapes[h.name]) if h.role == "router" else
                     host_sysctls(settings.cca, settings.buffer, list(allowed.get(h.name, ())), h.name in may_allow))
            for h in topo.hosts}


def _router(routers: dict[str, RouterOS] | None, host: str) -> RouterOS:
    return (routers or {}).get(host) or ROUTERS["linux"]


def write_sysctls(routers: dict[str, RouterOS] | None, host: str, values: dict[str, str]) -> list[list[str]]:
    """Routers write theirs in their OS's syntax; end hosts are Linux."""
    if routers and host in routers:
        return routers[host].write_sysctls(values)
    return sysctl_argv(values)


PATH_RTT_MIN_MS = 0.5     # a path faster than this is left alone (netem's own granularity)


def delay_settings(settings: LinkSettings, path_rtt_ms: float | None) -> LinkSettings:
    """The RTT the shaping adds: the configured end-to-end RTT less the path's own floor (a WAN
    testbed's fibre, emulated VMs' hops), so flows see the RTT the profile asks for. The floor is
    the least RTT the path showed (hardware/path_rtt.py), never a typical one: load only adds."""
    if not path_rtt_ms or path_rtt_ms < PATH_RTT_MIN_MS or settings.rtt_ms <= 0:
        return settings
    return dataclasses.replace(settings, rtt_ms=round(max(0.0, settings.rtt_ms - path_rtt_ms), 2))


def sysctl_steps(topo: Dumbbell, settings: LinkSettings, allowed: dict[str, tuple[str, ...]],
                 routers: dict[str, RouterOS] | None = None, may_allow: frozenset[str] = frozenset()) -> list[Step]:
    return [Step(host, argv) for host, values in tuned_sysctls(topo, settings, allowed, routers, may_allow).items()
            for argv in write_sysctls(routers, host, values)]


def shaping_steps(topo: Dumbbell, settings: LinkSettings, netem: dict[str, bool], path_rtt_ms: float | None = None,
                  routers: dict[str, RouterOS] | None = None) -> list[Step]:
    """The bottleneck's shaping on both routers by their OS, with the delay less the path's own
    floor (netem: router -> has netem; a router whose shaper does not delay and has no netem gets
    the delay line, see HostsLab.build)."""
    return [Step(host, argv) for shape, host in bottleneck_shapes(topo, delay_settings(settings, path_rtt_ms))
            for argv in _router(routers, host).shaping(shape, netem.get(host, False))]


def _one_line(value: str) -> str:
    return " ".join(value.split())        # sysctl prints tcp_rmem with tabs, writes take spaces


class HostsLab:
    def __init__(self, inventory, topo: Dumbbell, names: dict[str, str], settings: LinkSettings,
                 features: HostsFeatures, procs: ProcessTable, cleanup: CleanupStack, workdir: Path, via=None,
                 backend: str = "ssh", compensate_path: bool = True, undo: UndoJournal | None = None):
        """undo: where each change's undo is written before the change (undo.py), for `longhaul
        clean` after a run that ran no teardown. compensate_path: take the path's own floor off the
        delay the routers add; an emulated path has none to take (VMs under TCG: its least RTT read
        2.0-3.1 ms when a lab was built and 1.25 ms later, so a 20 ms path carried echoes at 18.1
        ms); its RTT is then the configured one plus what the emulated hops take, never less."""
        self.compensate_path = compensate_path
        self.undo = undo
        self.inventory, self.topo, self.names = inventory, topo, names
        self.settings, self.features = settings, features
        self.procs, self.cleanup, self.workdir = procs, cleanup, Path(workdir)
        self._executors = {lab: inventory.executor(machine, procs, via=via) for lab, machine in names.items()}
        self.delaylines = []
        self._facts: dict[int, dict] = {}
        allowed = {lab: features.hosts[m].allowed_ccas for lab, m in names.items() if m in features.hosts}
        self.netem = {lab: features.hosts[m].netem for lab, m in names.items()
                      if m in features.hosts and features.hosts[m].role == "router"}
        self.routers = {h.name: ROUTERS[inventory.host(names[h.name]).os] for h in topo.hosts if h.role == "router"}
        self._may_allow = frozenset(lab for lab, m in names.items()
                                    if m in features.hosts and features.hosts[m].allowed_writable)
        self.sysctls = tuned_sysctls(topo, settings, allowed, self.routers, self._may_allow)
        self._allowed = allowed
        self.path_rtt_ms: float | None = None
        self._shaping_undo = CleanupStack()
        self.record = {"backend": backend, "inventory": features.inventory, "tag": topo.tag,
                       "hosts": {lab: {"machine": m, "management": inventory.host(m).management}
                                 for lab, m in names.items()}}

    def executor(self, host: str):
        return self._executors[host]

    def address(self, host: str) -> str:
        return self.topo.address(host)

    def router_os(self, host: str) -> RouterOS:
        return self.routers[host]

    def pair_facts(self, pair: int) -> dict:
        """As NetnsLab.pair_facts: the next hop's MAC is read from the router over SSH; plus the
        sender's DPDK port (pci, and pci_src_ip: its address) where the inventory declares one."""
        if pair not in self._facts:
            sender, receiver = self.topo.access_link(f"S{pair}"), self.topo.access_link(f"D{pair}")
            mac = self.executor(sender.b.host).run(["cat", f"/sys/class/net/{sender.b.ifname}/address"]).stdout.strip()
            self._facts[pair] = {"iface": sender.a.ifname, "dst_mac": mac, "src_ip": self.address(f"S{pair}"),
                                 "dst_ip": self.address(f"D{pair}"), "rx_iface": receiver.a.ifname}
            machine = self.inventory.host(self.names[f"S{pair}"])
            port = next((i for i in machine.interfaces if i.dpdk), None)
            if port is not None:        # the inventory's DPDK port, on the same segment: same next hop
                self._facts[pair].update(pci=port.pci, pci_src_ip=port.ip)
        return self._facts[pair]

    def generator_facts(self, pair: int) -> dict:
        """Where the traffic generator sends pair `pair`'s packets from (TRex's port 0, whose
        address is their source; a flow's options.trex_ports may name others) and where the
        receiver's meter counts them."""
        machine = self.inventory.host(self.names[GENERATOR])
        port = next(i for i in machine.interfaces if i.pci)
        return {"trex_path": machine.trex_path, "trex_ports": [0], "src_ip": port.ip, "line_rate_mbps": port.rate_mbps,
                "dst_ip": self.address(f"D{pair}"), "rx_iface": self.topo.access_link(f"D{pair}").a.ifname}

    # -- state: read, record, restore ------------------------------------------------------------

    def read_sysctls(self, host: str) -> dict[str, str]:
        keys = list(self.sysctls[host])
        out = self.executor(host).run(["sysctl", "-n", *keys]).stdout.splitlines()
        if len(out) != len(keys):
            raise RuntimeError(f"{host}: sysctl -n {' '.join(keys)} gave {len(out)} lines")
        return {k: _one_line(v) for k, v in zip(keys, out)}

    def read_shaping(self, host: str, ifname: str) -> dict:
        router = self.routers[host]
        return router.parse_shaping(self.executor(host).run(router.read_shaping(ifname)).stdout)

    def _offload_ports(self) -> list:
        """The lab interfaces whose offloads the profile sets: every port of a Linux host (a
        router OS without ethtool keeps its own, said in the record)."""
        if not self.settings.offloads:
            return []
        return [p for link in self.topo.links for p in (link.a, link.b)
                if p.host not in self.routers or self.routers[p.host].sets_offloads]

    def _lost(self) -> dict[str, str]:
        """The lab hosts a trial found lost (hardware/host_watch.py): nothing is read from them."""
        return {h: self.executor(h).lost for h in self.names if self.executor(h).lost}

    def _state(self) -> dict:
        """Every host's sysctls, both routers' root qdiscs and the offloads the profile sets,
        read in parallel (not from a lost host)."""
        link = self.topo.bottleneck()
        lost = self._lost()
        names = [name for name, _ in self.settings.offloads]
        jobs = {h: (self.read_sysctls, (h,)) for h in self.sysctls if h not in lost}
        jobs.update({f"{p.host}:qdisc": (self.read_shaping, (p.host, p.ifname)) for p in (link.a, link.b)
                     if p.host not in lost})
        jobs.update({f"{p.host}:offloads:{p.ifname}": (read_offloads, (self.executor(p.host), p.ifname, names))
                     for p in self._offload_ports() if p.host not in lost})
        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            futures = {k: pool.submit(fn, *args) for k, (fn, args) in jobs.items()}
            return {k: f.result() for k, f in futures.items()}

    def _journal(self, host: str, what: str, argvs: list[list[str]]) -> None:
        if self.undo is not None:
            self.undo.add(self.topo.tag, host, self.names[host], what, argvs)

    def _restore(self, host: str, before: dict[str, str]) -> None:
        for argv in write_sysctls(self.routers, host, before):
            self.executor(host).run(argv)

    def _read_back(self) -> None:
        """Runs last at teardown: what the hosts look like after longhaul left."""
        state = self._state()
        for key, value in state.items():
            host, _, what = key.partition(":")
            kind, _, ifname = what.partition(":")
            entry = self.record["hosts"][host]
            if kind == "offloads":         # a build that failed half-way recorded only some ports
                entry = entry.setdefault("offloads", {}).setdefault(ifname, {})
                entry["after"] = value
            else:
                entry[kind or "sysctl"]["after"] = value
        lost = self._lost()
        for host, why in lost.items():
            self.record["hosts"][host]["lost"] = why
        problems = [f"{h} ({self.names[h]}): lost ({why}); nothing of it could be restored" for h, why in lost.items()]
        problems += [f"{h}: {k} = {state[h][k]!r}, was {v!r}" for h in self.sysctls if h in state
                     for k, v in self.record["hosts"][h]["sysctl"]["before"].items() if state[h][k] != v]
        problems += [f"{h}: {ifname} offloads {seen['after']}, was {seen['before']}"
                     for h in self.record["hosts"] for ifname, seen in self.record["hosts"][h].get("offloads", {}).items()
                     if "before" in seen and "after" in seen and seen["before"] != seen["after"]]
        problems += [f"{p.host}: root qdisc {state[p.host + ':qdisc']}, was {self.record['hosts'][p.host]['qdisc']['before']}"
                     for p in (self.topo.bottleneck().a, self.topo.bottleneck().b)
                     if p.host + ":qdisc" in state and state[p.host + ":qdisc"] != self.record["hosts"][p.host]["qdisc"]["before"]]
        self.record["restored"] = not problems
        if problems:
            self.record["not_restored"] = problems
            raise RuntimeError("hosts not as found: " + "; ".join(problems))
        if self.undo is not None:
            self.undo.done(self.topo.tag)

    # -- build -------------------------------------------------------------------------------

    def build(self) -> None:
        before = self._state()
        link = self.topo.bottleneck()
        for port in (link.a, link.b):
            found = self.routers[port.host].in_the_way(before[f"{port.host}:qdisc"], port.ifname)
            if found:
                raise RuntimeError(f"{port.host} ({self.names[port.host]}) {found}")
        self.cleanup.push("read back host state", self._read_back)      # runs last
        for host, values in self.sysctls.items():
            self.record["hosts"][host]["sysctl"] = {"before": before[host], "applied": values}
            self._journal(host, "restore sysctls", write_sysctls(self.routers, host, before[host]))
            self.cleanup.push(f"restore sysctls on {host}", lambda h=host, v=before[host]: self._restore(h, v))
        self._set_offloads(before)
        for port in (link.a, link.b):
            self.record["hosts"][port.host]["qdisc"] = {"before": before[f"{port.host}:qdisc"]}
        self.cleanup.push("undo the bottleneck's shaping", self._unshape)
        # the path's own floor, before any shaping, comes off the delay the shaping adds
        floor = self._least_rtt()
        self.record["path_rtt_checks_ms"] = [floor]
        if not self.compensate_path:
            floor = None
        self._load_cca_modules(self.settings.cca)
        for step in sysctl_steps(self.topo, self.settings, self._allowed, self.routers, self._may_allow):
            self.executor(step.host).run(step.argv)
        self._shape(floor)
        self._settle(floor)

    def retune(self, settings: LinkSettings) -> bool:
        """The next cell's end-host tuning on the standing lab: its congestion control's module
        loaded, and every sysctl the last cell wrote rewritten (else False: the lab is rebuilt).
        Each host's record keeps what was applied in turn; teardown restores what the build found."""
        if not same_path(settings, self.settings):
            return False
        new = tuned_sysctls(self.topo, settings, self._allowed, self.routers, self._may_allow)
        ends = [h.name for h in self.topo.hosts if h.role != "router"]
        if any(new[h].keys() != self.sysctls[h].keys() for h in ends):
            return False
        self._load_cca_modules(settings.cca)
        for host in ends:
            for argv in sysctl_argv(new[host]):
                self.executor(host).run(argv)
            entry = self.record["hosts"][host]["sysctl"]
            entry.setdefault("applied_in_turn", [entry["applied"]]).append(new[host])
            entry["applied"] = new[host]
        # only once the hosts have it: a retune that failed half-way is tried again by the next cell
        self.settings, self.sysctls = settings, new
        return True

    def _least_rtt(self) -> float | None:
        """The least RTT of every pair's path (each pair's floor, read in parallel): the one delay
        at the bottleneck must take no pair below the configured RTT."""
        pairs = range(1, self.topo.pairs + 1)
        with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
            floors = list(pool.map(lambda k: path_floor(self.executor(f"S{k}"), self.address(f"D{k}")), pairs))
        found = [f for f in floors if f is not None]
        return min(found) if found else None

    def _settle(self, floor: float | None, tries: int = 2) -> None:
        """Re-check the floor with the delay set: a floor read while the hosts were busy was too
        high and took delay away that the path does not have (a TCG lab's 13.5 ms for a 3 ms path
        left a 20 ms path at 4-8). A pair's least RTT below the configured one says by how much;
        the shaping is set again with the lower floor. Verification refuses what is still below."""
        if self.settings.rtt_ms <= 0:
            return
        for _ in range(tries):
            lowest = self._least_rtt()
            self.record["path_rtt_checks_ms"].append(lowest)
            if lowest is None or not below_floor(lowest, self.settings.rtt_ms):
                return
            added = delay_settings(self.settings, floor).rtt_ms
            floor = round(max(0.0, lowest - added), 4)
            log.warning("%s: the least RTT with the delay set is %.3f ms, below the configured %g ms: the path's "
                        "floor is %.3f ms, not %s; shaping again", self.topo.tag, lowest, self.settings.rtt_ms,
                        floor, self.path_rtt_ms)
            self._unshape()
            self._shape(floor)

    def _shape(self, floor: float | None) -> None:
        """The bottleneck's shaping and delay for a path whose own floor is `floor`; its undo is
        kept apart (self._unshape) so that a corrected floor can set it again."""
        self.path_rtt_ms = floor
        self.delaylines = []
        shaped = delay_settings(self.settings, floor)
        self.record["path_rtt_ms"] = floor
        self.record["added_rtt_ms"] = shaped.rtt_ms
        for shape, host in bottleneck_shapes(self.topo, shaped):
            router = self.routers[host]
            self.record["hosts"][host]["qdisc"]["applied"] = router.shaping(shape, self.netem.get(host, False))
            self._journal(host, f"undo the shaping of {shape.ifname}", router.unshaping(shape))
            self._shaping_undo.push(f"undo the shaping on {host} {shape.ifname}",
                                    lambda h=host, r=router, s=shape: [self.executor(h).run(argv, check=False)
                                                                       for argv in r.unshaping(s)])
        for step in shaping_steps(self.topo, self.settings, self.netem, floor, self.routers):
            self.executor(step.host).run(step.argv)
        if shaped.rtt_ms > 0 and not all(self._delays_itself(h) for h in self.routers):
            self._start_delaylines(shaped)
        self.record["delay"] = {h: ("shaper" if self.routers[h].delays_itself else "netem" if self.netem.get(h)
                                    else "delayline") for h in self.routers}

    def _unshape(self) -> None:
        failures = self._shaping_undo.close()
        if failures:
            raise RuntimeError("; ".join(failures))

    def _load_cca_modules(self, cca: str) -> None:
        """The cell's CCA as a module an end host has not loaded: modprobe it, since the default and
        the allowed list take only loaded ones (a root socket asking for it would load it, a
        sysctl does not). Recorded; left loaded at teardown, where sockets may still hold it."""
        module = f"tcp_{cca}"
        for host in (h.name for h in self.topo.hosts if h.role != "router"):
            executor = self.executor(host)
            if cca not in executor.run(["cat", AVAILABLE_CCAS]).stdout.split():
                executor.run(["modprobe", module])
                self.record["hosts"][host].setdefault("modules_loaded", []).append(module)

    def _set_offloads(self, before: dict) -> None:
        wanted = dict(self.settings.offloads)
        for port in self._offload_ports():
            was = before[f"{port.host}:offloads:{port.ifname}"]
            self.record["hosts"][port.host].setdefault("offloads", {})[port.ifname] = {"before": was, "applied": wanted}
            self._journal(port.host, f"restore the offloads of {port.ifname}", [offload_argv(port.ifname, was)])
            self.cleanup.push(f"restore offloads on {port.host} {port.ifname}",
                              lambda p=port, w=was: self.executor(p.host).run(offload_argv(p.ifname, w), check=False))
            apply_offloads(self.executor(port.host), port.ifname, wanted)
        kept = sorted(h for h, r in self.routers.items() if wanted and not r.sets_offloads)
        if kept:
            self.record["offloads_left_as_found"] = {h: f"{self.routers[h].name} router" for h in kept}

    def _delays_itself(self, host: str) -> bool:
        return self.routers[host].delays_itself or self.netem.get(host, False)

    def _start_delaylines(self, shaped: LinkSettings) -> None:
        helper = delayline.helper_path()
        for queue, (shape, host) in enumerate(bottleneck_shapes(self.topo, shaped), start=1):
            if self._delays_itself(host):
                continue
            executor = self.executor(host)
            ready = f"/tmp/longhaul-delayline-{self.topo.tag}-{host}.ready"    # on the router
            self._journal(host, f"remove {ready}", [["rm", "-f", ready]])
            executor.run(["rm", "-f", ready])
            proc = executor.start(delayline.command(queue, shape.delay_ms, ready_file=ready), label=f"delayline-{host}",
                                  stdout=self.workdir / f"delayline-{host}.json",
                                  stderr=self.workdir / f"delayline-{host}.log")
            self.delaylines.append(proc)
            self._shaping_undo.push(f"remove {ready} on {host}", lambda e=executor, r=ready: e.run(["rm", "-f", r], check=False))
            self._shaping_undo.push(f"stop delay line on {host}", proc.stop)
            def up(proc=proc, executor=executor, ready=ready) -> bool:
                return proc.poll() is not None or executor.run(["test", "-e", ready], check=False).returncode == 0

            wait_until(up, 15, interval=0.2, what=f"delay line {helper} on {host}")
            if proc.poll() is not None:
                raise RuntimeError(f"delay line on {host} exited: {proc.read_stderr().strip()}")
            setup, teardown = delayline.iptables_rules(shape.ifname, queue)
            for argv, undo in zip(setup, teardown):
                self._journal(host, "delete a delay-line rule", [undo])
                executor.run(argv)
                self._shaping_undo.push(f"delete delay-line rule on {host}", lambda e=executor, u=undo: e.run(u, check=False))
