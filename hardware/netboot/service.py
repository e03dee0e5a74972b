"""`longhaul netboot` as a service: open a server for an inventory on an interface, serve until
told to stop, and say what it serves and served.

A serving process writes /run/longhaul/netboot/<interface>.json (its pid, what it serves, its work
directory); `stop` ends that pid (a longhaul process: the state file is only ever written by
`serve`) and waits for it, `status` reads the state and the logs. One server per interface.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from longhaul.core.documents import DocumentFormat
from longhaul.core.errors import RunError
from longhaul.hardware import run_marker
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import Executor
from longhaul.hardware.image_files import SQUASHFS
from longhaul.hardware.netboot import plan
from longhaul.hardware.netboot.plan import Served
from longhaul.hardware.netboot.server import (
    DHCP_LOG,
    HTTP_LOG,
    STATE_DIR,
    HostServed,
    NetbootServer,
    host_keys,
    interface_network,
    known_hosts_lines,
    leases,
    read_requests,
    summary,
)

# the state file of a serving interface (state_path); a bare "format": 1 before the convention
STATE = DocumentFormat("longhaul-netboot-state", 1, "a netboot server's state", legacy={1: 1})


def state_path(interface: str, state_dir: Path = STATE_DIR) -> Path:
    return state_dir / f"{interface}.json"


def open_server(inventory_path: Path, interface: str, image_dir: Path, workdir: Path, keys_dir: Path,
                executor: Executor, *, port: int = 8067, proxy: bool = False) -> NetbootServer:
    """A server for the inventory's hosts with a mac, answering on `interface` (its address and
    network read from it); the hosts' keys are kept in keys_dir and their lines added to the
    inventory's known_hosts."""
    inventory = load_inventory(inventory_path)
    if not Path(image_dir, SQUASHFS).is_file():
        raise plan.NetbootError(f"{image_dir} has no {SQUASHFS}: rebuild the image (make image)")
    address, network = interface_network(executor, interface)
    served = Served(interface, address, str(ipaddress.ip_interface(network).network), port, proxy)
    key = inventory.inventory.ssh_key
    if key is None or not Path(key + ".pub").is_file():
        raise plan.NetbootError(f"the inventory's ssh_key {key}.pub is not there: the hosts are given the controller's "
                                "public key")
    hosts = plan.netboot_hosts(inventory, served, Path(key + ".pub").read_text().strip())
    public = host_keys(Path(keys_dir), hosts, executor)
    server = NetbootServer(served, hosts, Path(image_dir), Path(workdir), Path(keys_dir), executor, public)
    add_known_hosts(Path(inventory.inventory.known_hosts), known_hosts_lines(hosts, public))
    return server


def add_known_hosts(path: Path, lines: list[str]) -> list[str]:
    """The hosts' keys in known_hosts: a line for an address with another key is replaced (the
    controller made both), others are kept. The lines added."""
    current = path.read_text().splitlines() if path.exists() else []
    ours = {line.split()[0]: line for line in lines}
    kept = [line for line in current if not line.split() or line.split()[0] not in ours or line in lines]
    added = [line for line in lines if line not in kept]
    if added or len(kept) != len(current):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in kept + added))
    return added


def serve(server: NetbootServer, state: Path, stop: threading.Event, on_start=None) -> list[str]:
    """Start, record the state, serve until `stop` is set or a server exits; the teardown's
    problems. SIGTERM and SIGINT set `stop` (the caller installs handlers). dnsmasq and the HTTP
    server are journaled like a run's processes: after a SIGKILL of this one, `longhaul clean`
    ends them (hardware/run_marker.py)."""
    if state.exists():
        other = _read_state(state)
        if _alive(other.get("pid")):
            raise plan.NetbootError(f"{server.served.interface} is already served by pid {other['pid']} "
                                    f"(longhaul netboot stop --interface {server.served.interface})")
    with run_marker.marked(f"netboot-{server.served.interface}", server.workdir, server.executor.procs):
        return _serve(server, state, stop, on_start)


def _serve(server: NetbootServer, state: Path, stop: threading.Event, on_start) -> list[str]:
    try:
        server.start()
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({**STATE.stamp(), "pid": os.getpid(), "started": server.started_at,
                                     "interface": server.served.interface, "address": server.served.address,
                                     "network": server.served.network, "port": server.served.port,
                                     "proxy": server.served.proxy, "workdir": str(server.workdir),
                                     "hosts": [{"name": h.name, "mac": h.mac, "address": h.address, "role": h.role}
                                               for h in server.hosts]}, indent=1) + "\n")
        if on_start is not None:
            on_start()
        while not stop.wait(0.5):
            dead = server.alive()
            if dead:
                raise RunError(f"netboot: {', '.join(dead)} exited: "
                               + " ".join((server.workdir / f).read_text()[-400:] for f in (DHCP_LOG, "http.err")
                                          if (server.workdir / f).exists()))
    finally:
        failures = server.close()
        state.unlink(missing_ok=True)
    return failures


def served(server: NetbootServer) -> list[HostServed]:
    """Per host: leased or not, the files it fetched (status's rows, for a server in hand)."""
    return summary(server.hosts, server.requests(), server.leases())


def _alive(pid) -> bool:
    """Running (a zombie whose parent has not reaped it yet has stopped serving)."""
    if not isinstance(pid, int):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def stop(interface: str, state_dir: Path = STATE_DIR, timeout_s: float = 20.0) -> int | None:
    """SIGTERM to the serving process of `interface` and wait for it; its pid, or None if none."""
    path = state_path(interface, state_dir)
    if not path.exists():
        return None
    pid = _read_state(path).get("pid")
    if not _alive(pid):
        path.unlink(missing_ok=True)
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        raise TimeoutError(f"pid {pid} still serves {interface} after {timeout_s:.0f}s")
    return pid


@dataclass(frozen=True)
class ServerStatus:
    """A serving `longhaul netboot serve`, as its state file and logs say."""
    interface: str
    pid: int
    address: str
    network: str
    port: int
    proxy: bool
    served: list[HostServed]

    def as_dict(self) -> dict:
        return asdict(self)


def status(state_dir: Path = STATE_DIR) -> list[ServerStatus]:
    """Every serving interface: where it answers and, per host, what it was given."""
    out = []
    for path in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
        state = _read_state(path)
        if not _alive(state.get("pid")):
            continue
        workdir = Path(state["workdir"])
        hosts = [plan.NetbootHost(h["name"], h["role"], h["mac"], h["address"], {}) for h in state["hosts"]]
        dhcp = (workdir / DHCP_LOG).read_text(errors="replace") if (workdir / DHCP_LOG).exists() else ""
        out.append(ServerStatus(state["interface"], state["pid"], state["address"], state["network"], state["port"],
                                state["proxy"], summary(hosts, read_requests(workdir / HTTP_LOG), leases(dhcp, hosts))))
    return out


def leftovers(remove: bool, state_dir: Path = STATE_DIR) -> list[str]:
    """What servers killed without a teardown left (their dnsmasq and HTTP server are
    run_marker's to end: they were journaled): state files of dead pids with `serve`'s work
    directories, and TFTP roots that no live server owns on an interface that is gone (a qemu
    fleet's, whose veth went with its namespace)."""
    if not state_dir.is_dir():
        return []
    states = {p: _read_state(p) for p in sorted(state_dir.glob("*.json"))}
    stale = [p for p, state in states.items() if not _alive(state.get("pid"))]
    live = {p.stem for p in states} - {p.stem for p in stale}
    stale += [p for p in sorted(state_dir.glob("*.tftp"))
              if p.stem not in live and not Path("/sys/class/net", p.stem).exists()]
    if remove:
        for path in stale:
            if path.suffix == ".json":
                workdir = states[path].get("workdir")
                if workdir and Path(workdir).parent == state_dir:     # `serve`'s own, not a fleet's
                    shutil.rmtree(workdir, ignore_errors=True)
                path.unlink(missing_ok=True)
            shutil.rmtree(path.with_suffix(".tftp"), ignore_errors=True)
    return [str(p) for p in stale]


def _read_state(path: Path) -> dict:
    try:
        return STATE.read(json.loads(path.read_text()), path)
    except (OSError, ValueError):
        return {}               # half-written by a server killed while writing it, or not ours: stale
