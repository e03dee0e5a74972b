"""`longhaul netboot`: boot a lab's hosts from this controller (docs/netboot.md).

    longhaul netboot serve --inventory hardware/lab.toml --interface IF [--image build/image]
                           [--port 8067] [--proxy] [--keys DIR]
    longhaul netboot stop --interface IF
    longhaul netboot status [--json]

serve runs in the foreground until SIGTERM or SIGINT (a systemd unit, or `&`): DHCP and TFTP by
dnsmasq and the HTTP server, on IF only, to the inventory's MACs only (hardware/netboot/). Exit
status: 0 stopped cleanly, 1 a server died or teardown failed, 2 bad input (nothing started).
"""
from __future__ import annotations

import json
import shutil
import signal
import sys
import threading
from pathlib import Path

from longhaul.core.errors import ConfigError
from longhaul.core.paths import REPO
from longhaul.hardware.executors.process import CommandError, LocalExecutor, ProcessTable
from longhaul.hardware.netboot import service
from longhaul.hardware.netboot.plan import NetbootError
from longhaul.hardware.netboot.server import HostServed


def register(sub) -> None:
    p = sub.add_parser("netboot", help="serve the appliance image to a lab's hosts by PXE (DHCP, TFTP, HTTP)")
    nsub = p.add_subparsers(dest="netboot_command", required=True)
    serve = nsub.add_parser("serve", help="serve on one interface until stopped")
    serve.add_argument("--inventory", type=Path, required=True, help="the lab's inventory (hosts with mac)")
    serve.add_argument("--interface", required=True, help="the management network's interface: the only one answered on")
    serve.add_argument("--image", type=Path, default=REPO / "build/image", help="the image directory (make image)")
    serve.add_argument("--port", type=int, default=8067, help="the HTTP port (default 8067)")
    serve.add_argument("--proxy", action="store_true",
                       help="proxy DHCP: the facility's DHCP server gives addresses, this one only where to boot")
    serve.add_argument("--keys", type=Path, help="where the hosts' kept host keys live (default: netboot-keys/ "
                                                 "beside the inventory)")
    serve.set_defaults(func=cmd_serve)
    stop = nsub.add_parser("stop", help="stop the server of an interface")
    stop.add_argument("--interface", required=True)
    stop.set_defaults(func=cmd_stop)
    status = nsub.add_parser("status", help="what each server serves and has served")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)


def cmd_serve(args) -> int:
    if not 1 <= args.port <= 65535:
        raise ConfigError.option("--port", args.port, "a TCP port, 1-65535")
    executor = LocalExecutor("controller", ProcessTable())
    keys = args.keys or args.inventory.resolve().parent / "netboot-keys"
    try:
        server = service.open_server(args.inventory, args.interface, args.image, service.STATE_DIR / args.interface,
                                     keys, executor, port=args.port, proxy=args.proxy)
    except CommandError as exc:          # `ip addr show dev IF`: no such interface
        raise ConfigError.option("--interface", args.interface, f"an interface of this machine ({exc})") from None
    except NetbootError as exc:
        raise ConfigError.option("--inventory", str(args.inventory), str(exc)) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def started() -> None:
        s = server.served
        print(f"netboot: serving {len(server.hosts)} hosts on {s.interface} ({s.address}, {s.network}"
              f"{', proxy DHCP' if s.proxy else ''}), HTTP {s.base_url}", flush=True)
        for h in server.hosts:
            print(f"  {h.name:8} {h.role:9} {h.mac} -> {h.address}", flush=True)

    try:
        failures = service.serve(server, service.state_path(args.interface), stop, on_start=started)
    finally:
        for row in service.served(server):       # what was handed out, for the unit's journal
            print(_row(row), flush=True)
        shutil.rmtree(server.workdir, ignore_errors=True)
    for failure in failures:
        print(f"netboot: teardown: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_stop(args) -> int:
    pid = service.stop(args.interface)
    print(f"netboot: nothing serves {args.interface}" if pid is None else f"netboot: stopped pid {pid} ({args.interface})")
    return 0


def cmd_status(args) -> int:
    states = service.status()
    if args.json:
        print(json.dumps([s.as_dict() for s in states], indent=1))
        return 0
    if not states:
        print("netboot: not serving")
    for state in states:
        print(f"{state.interface}: pid {state.pid}, {state.address} ({state.network}), port {state.port}"
              f"{', proxy DHCP' if state.proxy else ''}")
        for row in state.served:
            print(_row(row))
    return 0


def _row(row: HostServed) -> str:
    files = ", ".join(f"{p} {b / 1e6:.1f} MB" for p, b in sorted(row.files.items())) or "nothing"
    return f"  {row.host:8} {row.mac} {row.address:15} {'leased' if row.leased else 'no lease'}; {files}"
