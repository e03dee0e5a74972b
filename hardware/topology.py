"""The lab as data: hosts, links and addresses of a dumbbell, realised later by a backend.

Address plan (documented in docs/lab.md), the same for every run because each run's hosts live in
their own namespaces:
  sender Si      eth0 10.1.i.2/24, default route via R1 10.1.i.1 (R1 port "s<i>")
  receiver Di    eth0 10.2.i.2/24, default route via R2 10.2.i.1 (R2 port "d<i>")
  bottleneck     R1 "wan" 10.0.0.1/30  <->  R2 "wan" 10.0.0.2/30
  R1 routes 10.2.0.0/16 via 10.0.0.2; R2 routes 10.1.0.0/16 via 10.0.0.1.
  generator G1   (only with a traffic generator) eth0 10.3.0.2/24, default route via R1 10.3.0.1
                 (R1 port "g1"); R2 routes 10.3.0.0/16 via 10.0.0.1.
Data flows S -> D, so R1's "wan" egress is the shaped forward direction of the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

NS_PREFIX = "lh-"
# The lab name of the traffic generator (TRex), beside S1.., D1.., R1, R2: only in labs whose
# backend has_generator.
GENERATOR = "G1"


@dataclass(frozen=True)
class Host:
    name: str            # S1, D1, R1, R2, G1
    role: str            # sender, receiver, router, generator
    netns: str           # the namespace that realises it in the netns backend


@dataclass(frozen=True)
class Port:
    host: str
    ifname: str
    address: str         # CIDR


@dataclass(frozen=True)
class Link:
    a: Port
    b: Port
    kind: str            # "access" or "bottleneck"
    rate_mbps: float


@dataclass(frozen=True)
class Route:
    host: str
    destination: str     # CIDR or "default"
    via: str


@dataclass(frozen=True)
class Dumbbell:
    tag: str
    pairs: int
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    routes: tuple[Route, ...]
    mtu: int

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def address(self, host: str) -> str:
        """The host's own (first) address, without prefix length."""
        for link in self.links:
            for port in (link.a, link.b):
                if port.host == host:
                    return port.address.split("/")[0]
        raise KeyError(host)

    def access_link(self, host: str) -> Link:
        """The link from an end host to its router (host on side a)."""
        for link in self.links:
            if link.kind == "access" and link.a.host == host:
                return link
        raise KeyError(f"no access link for {host}")

    def bottleneck(self) -> Link:
        return next(link for link in self.links if link.kind == "bottleneck")

    def hosts_file(self) -> str:
        lines = ["127.0.0.1\tlocalhost"]
        for host in self.hosts:
            lines.append(f"{self.address(host.name)}\t{host.name} {host.name.lower()}")
        return "\n".join(lines) + "\n"


def netns_name(tag: str, host: str) -> str:
    return f"{NS_PREFIX}{tag}-{host}"


def dumbbell(tag: str, pairs: int, access_rate_mbps: float, bottleneck_rate_mbps: float,
             mtu: int = 1500, generator: bool = False) -> Dumbbell:
    if not 1 <= pairs <= 250:
        raise ValueError("pairs must be 1..250")
    hosts = [Host("R1", "router", netns_name(tag, "R1")), Host("R2", "router", netns_name(tag, "R2"))]
    links = [Link(Port("R1", "wan", "10.0.0.1/30"), Port("R2", "wan", "10.0.0.2/30"),
                  "bottleneck", bottleneck_rate_mbps)]
    routes = [Route("R1", "10.2.0.0/16", "10.0.0.2"), Route("R2", "10.1.0.0/16", "10.0.0.1")]
    for i in range(1, pairs + 1):
        for side, router, role, net in (("S", "R1", "sender", 1), ("D", "R2", "receiver", 2)):
            name = f"{side}{i}"
            hosts.append(Host(name, role, netns_name(tag, name)))
            links.append(Link(Port(name, "eth0", f"10.{net}.{i}.2/24"),
                              Port(router, f"{side.lower()}{i}", f"10.{net}.{i}.1/24"),
                              "access", access_rate_mbps))
            routes.append(Route(name, "default", f"10.{net}.{i}.1"))
    if generator:       # beside the senders: its packets take the bottleneck as theirs do
        hosts.append(Host(GENERATOR, "generator", netns_name(tag, GENERATOR)))
        links.append(Link(Port(GENERATOR, "eth0", "10.3.0.2/24"), Port("R1", "g1", "10.3.0.1/24"),
                          "access", access_rate_mbps))
        routes += [Route(GENERATOR, "default", "10.3.0.1"), Route("R2", "10.3.0.0/16", "10.0.0.1")]
    return Dumbbell(tag, pairs, tuple(hosts), tuple(links), tuple(routes), mtu)
