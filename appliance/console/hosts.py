"""Which names the console answers to, and which pages may change its state (docs/console.md).

A browser sends the name it used in the Host header. A page of another site that rebinds its own
name to the console's address (DNS rebinding) sends that other name, so the console answers only
the names it was started for: its listen address, `localhost` and each `--allowed-host`. The port
is not compared: an `ssh -L` tunnel or a proxy reaches the console on a port of its own.

A state change must also come from a page of the console: its Origin (or, without one, its
Referer) names an allowed host, and the same host and port as the request, which the host check
has already held to the allowed names. Neither value is ever compared with itself alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse

LOOPBACK_NAME = "localhost"
WILDCARDS = ("0.0.0.0", "::")       # a listen address that is no name a browser uses
MISDIRECTED = 421                    # RFC 9110: the request was sent to a name this server does not serve


def normal_name(name: str) -> str:
    """A host name as compared: lower case, IPv6 without its brackets."""
    return name.strip().strip("[]").lower()


def is_loopback(name: str) -> bool:
    name = normal_name(name)
    if name == LOOPBACK_NAME:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPort:
    name: str            # normalised (normal_name)
    port: int | None     # None: the header gave none


def split_host(value: str) -> HostPort | None:
    """A Host header's (or an origin's authority's) name and port; None when it is not one."""
    value = value.strip()
    if not value or any(c in value for c in "/@?# \t\\"):
        return None
    if value.startswith("["):                       # [v6] or [v6]:port
        name, bracket, rest = value[1:].partition("]")
        if not bracket or rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    else:
        name, sep, port_text = value.rpartition(":")
        if not sep:
            name, port_text = value, ""
        elif ":" in name:                           # a bare IPv6 address has no port here
            return None
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        return None
    if not name:
        return None
    return HostPort(normal_name(name), int(port_text) if port_text else None)


@dataclass(frozen=True)
class AllowedHosts:
    """The names the console was started for."""
    names: frozenset[str]

    @classmethod
    def of(cls, listen_host: str, extra: tuple[str, ...] | list[str] = ()) -> AllowedHosts:
        names = {LOOPBACK_NAME, *(normal_name(n) for n in extra)}
        if normal_name(listen_host) not in WILDCARDS:
            names.add(normal_name(listen_host))
        return cls(frozenset(names))

    def allows(self, host_header: str) -> bool:
        host = split_host(host_header)
        return host is not None and host.name in self.names

    def same_origin(self, origin: str, host_header: str) -> bool:
        """A state change's Origin (or Referer): an allowed host, and the host:port it was sent to."""
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        source, target = split_host(parts.netloc), split_host(host_header)
        if source is None or target is None or source.name not in self.names:
            return False
        default = 443 if parts.scheme == "https" else 80
        return (source.name, source.port or default) == (target.name, target.port or default)


class HostGuard:
    """ASGI middleware, outermost: a request (HTTP, the live stream, a WebSocket) whose Host is not
    an allowed name is answered 421 before anything else of the console sees it."""

    def __init__(self, app, allowed: AllowedHosts):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"]
        if len(hosts) == 1 and self.allowed.allows(hosts[0]):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":              # refused before the handshake is accepted
            await send({"type": "websocket.close", "code": 1008})
            return
        response = PlainTextResponse("this console does not answer to that host name (see docs/console.md)",
                                     MISDIRECTED)
        await response(scope, receive, send)
