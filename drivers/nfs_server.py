"""Receiver side of the NFS flows: writes a private nfs-ganesha config and runs ganesha.nfsd -F.

    python3 -m longhaul.drivers.nfs_server --workdir W --port P --bind ADDR [--mount-port M]

Everything ganesha needs lives under W/nfs-<P>/ (config, log, pid file, NFSv4 recovery dir,
exported directory), so several instances can run side by side and nothing under /etc/ganesha or
/var/lib/nfs is touched. The process stays in the foreground until SIGTERM, which it passes on.

Why NFSv3 and a portmapper stub: Debian 12's libnfs (4.0.0) encodes an NFSv4 COMPOUND into a
fixed 4 KB buffer, so every NFSv4 WRITE above ~3.5 KB fails on the client before it is sent
(measured: 3500 B works, 3501 B fails; fixed upstream later by libnfs PR #319). The clients
therefore speak NFSv3, and ganesha refuses to start NFSv3 unless it can register with a
portmapper ("Cannot register NFS V3 on TCP", exit 2). It registers through /var/run/rpcbind.sock,
else TCP [::1]:111 (nothing else, not even with IPv6 off). So the launcher gives itself a private
mount namespace with an empty /run and answers on that socket with a tiny in-process portmapper
(private_run, PortmapStub): no rpcbind, no port 111, no IPv6 needed, a host's rpcbind untouched.
Without the privilege for that it falls back to the stub on [::1]:111. The clients never ask the
portmapper: their URLs carry nfsport= and mountport=.

Bind address: ganesha 4.3 sometimes listens on the wildcard instead of an IPv4 Bind_addr. Its
debug log then shows "Binding to address 10.235.1.2:0" followed by a bind to ":::<port>", else the
v4-mapped "::ffff:10.235.1.2". Measured: 3 of 5 starts right after the namespace was made, every
start with IPv6 off; never once the namespace had an IPv6 address besides ::1 (a fresh veth's
link-local is tentative for ~1-2 s). A "::ffff:a.b.c.d" Bind_addr is worse: ganesha cannot
resolve it then and exits. A namespace only has its own addresses, so nothing measured changes.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

GANESHA = "ganesha.nfsd"
READY_LINE = "NFS SERVER INITIALIZED"     # ganesha logs it once its dispatchers run
EXPORT_PSEUDO = "/export"                 # the path clients name in their URLs (v3 and v4)
PORTMAP_PORT = 111


def paths(workdir: str | os.PathLike, port: int) -> dict[str, str]:
    """Where one instance keeps its files; the driver derives the ready check and cleanup from it."""
    base = Path(workdir) / f"nfs-{port}"
    return {"base": str(base), "config": str(base / "ganesha.conf"), "log": str(base / "ganesha.log"),
            "pid": str(base / "ganesha.pid"), "recovery": str(base / "recovery"),
            "export": str(base / "export")}


def config_text(workdir: str | os.PathLike, port: int, bind: str, mount_port: int,
                protocols: tuple[int, ...] = (3, 4)) -> str:
    """The ganesha.conf of one instance: one VFS export, TCP only, no NLM/RQUOTA/UDP/grace."""
    p = paths(workdir, port)
    protos = ", ".join(str(v) for v in protocols)
    return f"""# written by longhaul.drivers.nfs_server
NFS_CORE_PARAM {{
    NFS_Port = {port};
    MNT_Port = {mount_port};
    Bind_addr = {bind};
    Protocols = {protos};
    Enable_NLM = false;        # needs rpc.statd; copies take no locks
    Enable_RQUOTA = false;
    Enable_UDP = false;        # NFS over TCP only, as in the paper
    mount_path_pseudo = true;  # v3 mounts name {EXPORT_PSEUDO} like v4
}}
NFSv4 {{
    Graceless = true;          # a fresh server must not make clients wait out a grace period
    RecoveryBackend = fs;
    RecoveryRoot = {p["recovery"]};
    Only_Numeric_Owners = true;
}}
NFS_KRB5 {{
    Active_krb5 = false;
    CCacheDir = {p["base"]}/krb5;
}}
EXPORT {{
    Export_Id = 1;
    Path = {p["export"]};
    Pseudo = {EXPORT_PSEUDO};
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = {protos};
    Transports = TCP;
    FSAL {{
        Name = VFS;
    }}
}}
LOG {{
    Default_Log_Level = EVENT;
}}
"""


def ganesha_argv(workdir: str | os.PathLike, port: int) -> list[str]:
    p = paths(workdir, port)
    return [GANESHA, "-F", "-f", p["config"], "-L", p["log"], "-p", p["pid"], "-N", "NIV_EVENT"]


# --------------------------------------------------------------------------- portmapper stub
# ONC RPC (RFC 5531) over TCP with record marking; PMAP v2 and RPCBIND v3/v4 (RFC 1833): SET and
# UNSET are acknowledged and remembered, GETPORT/GETADDR answered from what was set.

PMAP_PROG = 100000


def _xdr_string(data: bytes, off: int) -> tuple[bytes, int]:
    (n,) = struct.unpack_from(">I", data, off)
    off += 4
    return data[off:off + n], off + ((n + 3) & ~3)


def _pack_string(s: bytes) -> bytes:
    return struct.pack(">I", len(s)) + s + b"\0" * ((4 - len(s) % 4) % 4)


def portmap_reply(call: bytes, table: dict) -> bytes | None:
    """The reply to one RPC call message (without record mark); None if it is not a call."""
    if len(call) < 24:
        return None
    xid, mtype, rpcvers, prog, vers, proc = struct.unpack_from(">6I", call, 0)
    if mtype != 0:
        return None
    off = 24
    for _ in range(2):                       # credential, verifier: flavor + opaque body
        off += 4
        _, off = _xdr_string(call, off)
    head = struct.pack(">IIIII", xid, 1, 0, 0, 0)   # REPLY, MSG_ACCEPTED, AUTH_NONE verifier
    if rpcvers != 2 or prog != PMAP_PROG:
        return head + struct.pack(">I", 1)   # PROG_UNAVAIL
    if vers not in (2, 3, 4):
        return head + struct.pack(">III", 2, 2, 4)   # PROG_MISMATCH low 2 high 4
    ok = struct.pack(">I", 0)
    if proc == 0:
        return head + ok
    if vers == 2:
        if proc in (1, 2, 3):
            prog_, vers_, prot, port = struct.unpack_from(">4I", call, off)
            key = (prog_, vers_, "tcp" if prot == 6 else "udp")
            if proc == 1:
                table[key] = port
            elif proc == 2:
                for k in [k for k in table if k[:2] == (prog_, vers_)]:
                    del table[k]
            else:
                found = table.get(key)
                return head + ok + struct.pack(">I", found if isinstance(found, int) else 0)
            return head + ok + struct.pack(">I", 1)
        return head + struct.pack(">I", 3)   # PROC_UNAVAIL
    if proc in (1, 2, 3):
        prog_, vers_ = struct.unpack_from(">2I", call, off)
        netid, o = _xdr_string(call, off + 8)
        addr, o = _xdr_string(call, o)
        key = (prog_, vers_, netid.decode(errors="replace"))
        if proc == 1:
            table[key] = addr.decode(errors="replace")
        elif proc == 2:
            for k in [k for k in table if k[:2] == (prog_, vers_) and (not netid or k[2] == key[2])]:
                del table[k]
        else:
            found = table.get(key)
            return head + ok + _pack_string(found.encode() if isinstance(found, str) else b"")
        return head + ok + struct.pack(">I", 1)
    return head + struct.pack(">I", 3)


def _read_record(conn: socket.socket) -> bytes | None:
    data = b""
    while True:
        mark = _read_exact(conn, 4)
        if mark is None:
            return None
        (word,) = struct.unpack(">I", mark)
        frag = _read_exact(conn, word & 0x7FFFFFFF)
        if frag is None:
            return None
        data += frag
        if word & 0x80000000:
            return data


def _read_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class PortmapStub:
    """Answers portmapper calls until close(): on a unix socket (`unix_path`) or, with tcp=True,
    on [::1]:111 and 127.0.0.1:111 of this network namespace."""

    def __init__(self, unix_path: str | None = None, tcp: bool = False):
        self.table: dict = {}
        self.socks: list[socket.socket] = []
        self.unix_path = unix_path
        ends = [(socket.AF_UNIX, unix_path)] if unix_path else []
        if tcp:
            ends += [(socket.AF_INET6, ("::1", PORTMAP_PORT)), (socket.AF_INET, ("127.0.0.1", PORTMAP_PORT))]
        for family, addr in ends:
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                if family != socket.AF_UNIX:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(addr)
                s.listen(16)
            except OSError:
                s.close()
                continue
            self.socks.append(s)
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while (call := _read_record(conn)) is not None:
                    reply = portmap_reply(call, self.table)
                    if reply is not None:
                        conn.sendall(struct.pack(">I", 0x80000000 | len(reply)) + reply)
            except (OSError, struct.error):
                return

    def close(self) -> None:
        for s in self.socks:
            s.close()
        if self.unix_path:
            Path(self.unix_path).unlink(missing_ok=True)


RPCBIND_SOCKET = "/run/rpcbind.sock"    # where ganesha (ntirpc) looks first, as /var/run/rpcbind.sock


def private_run() -> str | None:
    """Give this process (and ganesha, its child) a mount namespace with an empty tmpfs on /run,
    so RPCBIND_SOCKET can be our stub's: ganesha then registers with it and never with a host's
    rpcbind (whose NFS registrations its start-up UNSETs would remove), needs no IPv6 loopback
    ([::1]:111 is its only other try) and no port 111, and several instances do not collide.
    Nothing outside this process tree sees the mount. Returns why not, or None on success.
    Must run before any thread starts (unshare of the mount namespace)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_rec, ms_private = 0x00020000, 0x4000, 1 << 18
    steps = (("unshare(CLONE_NEWNS)", lambda: libc.unshare(clone_newns)),
             ("make / private", lambda: libc.mount(b"none", b"/", None, ms_rec | ms_private, None)),
             ("mount tmpfs on /run", lambda: libc.mount(b"tmpfs", b"/run", b"tmpfs", 0, b"size=1m,mode=0755")))
    for what, step in steps:
        if step() != 0:
            return f"{what}: {os.strerror(ctypes.get_errno())}"
    return None


def portmapper_listening() -> bool:
    """Is a portmapper reachable the way ganesha looks for one (TCP [::1]:111 in this netns)?"""
    for family, addr in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.1")):
        try:
            with socket.create_connection((addr, PORTMAP_PORT), timeout=1):
                return True
        except OSError:
            continue
    return False


# --------------------------------------------------------------------------- janitor

COPY_NAME = re.compile(r"^(c\d+-\w+)-(\d+)\.bin$")    # nfs_client.file_name


def stale_copies(names: list[str]) -> list[str]:
    """Files a client has finished with: all but the newest iteration of each client's series.
    libnfs creates exclusively, so each copy has its own name; without this the export would
    grow by clients x file size every iteration (16 GB per round at the paper's scale)."""
    newest: dict[str, int] = {}
    for name in names:
        m = COPY_NAME.match(name)
        if m:
            newest[m.group(1)] = max(newest.get(m.group(1), -1), int(m.group(2)))
    return [n for n in names if (m := COPY_NAME.match(n)) and int(m.group(2)) < newest[m.group(1)]]


class Janitor:
    def __init__(self, export: str, period_s: float = 1.0):
        self.export, self.period_s = Path(export), period_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(self.period_s):
            try:
                for name in stale_copies([p.name for p in self.export.iterdir()]):
                    (self.export / name).unlink(missing_ok=True)
            except OSError:
                continue

    def close(self) -> None:
        self.done.set()


# --------------------------------------------------------------------------- main

def resolve_bind(name: str) -> str:
    """ganesha's Bind_addr takes an address: resolve a host name (the lab names receivers D<i>);
    if the receiver cannot resolve its own name, listen on every address of its namespace."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in name else socket.AF_INET, name)
        return name
    except OSError:
        pass
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        print(f"nfs_server: cannot resolve {name!r}; listening on 0.0.0.0", file=sys.stderr)
        return "0.0.0.0"


def _death_signal():
    """preexec_fn for ganesha: SIGTERM it if this launcher dies, even by SIGKILL, so no server
    outlives the process the trial started and stops. libc is loaded here, before the fork: the
    child of a threaded parent should only make the call."""
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, int(signal.SIGTERM), 0, 0, 0)       # PR_SET_PDEATHSIG


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--mount-port", type=int, required=True)
    ap.add_argument("--protocols", default="3,4")
    ap.add_argument("--portmapper", choices=("private", "tcp", "none"), default="private",
                    help="private: stub on the rpcbind socket of a private /run (falls back to tcp); "
                         "tcp: stub on [::1]:111 unless a portmapper listens there; none: ganesha finds one")
    ap.add_argument("--no-janitor", dest="janitor", action="store_false",
                    help="keep every copied file (by default only each client's newest is kept)")
    args = ap.parse_args(argv)
    protocols = tuple(int(v) for v in args.protocols.split(","))
    p = paths(args.workdir, args.port)
    for key in ("base", "recovery", "export"):
        Path(p[key]).mkdir(parents=True, exist_ok=True)
    Path(p["log"]).unlink(missing_ok=True)   # the ready check looks for a line in it
    Path(p["config"]).write_text(config_text(args.workdir, args.port, resolve_bind(args.bind),
                                                args.mount_port, protocols))
    stub = None
    mode = args.portmapper if 3 in protocols else "none"
    if mode == "private" and Path(args.workdir).resolve().is_relative_to("/run"):
        mode = "tcp"                          # a tmpfs on /run would hide the workdir
    if mode == "private":
        why = private_run()
        if why is None:
            stub = PortmapStub(unix_path=RPCBIND_SOCKET)
        else:
            print(f"nfs_server: no private /run ({why}); portmapper stub on [::1]:111", file=sys.stderr)
            mode = "tcp"
    if mode == "tcp" and not portmapper_listening():
        stub = PortmapStub(tcp=True)
    if stub is not None and not stub.socks:
        print("nfs_server: the portmapper stub could not listen", file=sys.stderr)
    proc = subprocess.Popen(ganesha_argv(args.workdir, args.port), preexec_fn=_death_signal())  # noqa: PLW1509 (child only calls prctl)
    janitor = Janitor(p["export"]) if args.janitor else None

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    print(f'{{"event": "started", "pid": {proc.pid}, "port": {args.port}, "mount_port": {args.mount_port}, '
          f'"portmapper": "{mode if stub is not None else "none"}"}}', flush=True)
    rc = proc.wait()
    for helper in (stub, janitor):
        if helper:
            helper.close()
    print(f'{{"event": "exited", "returncode": {rc}}}', flush=True)
    return 0 if rc in (0, -signal.SIGTERM) else (rc if rc > 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
