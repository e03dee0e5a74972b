"""Globus GridFTP: globus-gridftp-server on the receiver, globus-url-copy PUTs from the sender.

The data must cross the shaped direction (S -> D), and the Tool interface puts the server on the
receiver, so every burst is a PUT: the client reads /dev/zero (memory) or a file it writes first
(disk) and STOREs it to the server, which writes /dev/null or a file under the burst's workdir.

Ports. The burst's port (spec.port, one of the flow's own ports) is the *data* port: the server's
passive listener is pinned to it with -port-range, so the trial's socket sampler, which keys sockets
to flows by destination port, sees all N parallel data streams as the flow's sockets. Globus's TCP
driver binds listeners without SO_REUSEADDR unless told, and a one-port range has no other port to
try: a connection on that port in TIME_WAIT on the receiver (a stopped trial's server closes first)
would fail PASV for a minute, so the data stack is `tcp:reuse=true`. The control
channel listens on control_port(spec) (spec.port + CONTROL_PORT_OFFSET unless the flow's options
name one), which no flow owns, so the few-hundred-byte control socket is never sampled.

What the tool reports (see parse): globus-url-copy -vb prints the receiver's byte count whenever the
server sends a GridFTP performance marker (112). globus-gridftp-server sends those every 5 s; the
period can only be changed by the client (the TREV PERF command), and globus-url-copy never sends it.
So the tool's own timeline has 5 s resolution; per-second throughput and per-stream retransmits come
from socket sampling on the sender. The server's transfer-stats line adds the exact received byte
count, the transfer's start and end, the stream count and the TCP buffer it used.

CCA: globus-url-copy has no option for it; the trial runs both ends under the LD_PRELOAD shim
(drivers/ccashim.py), which sets the flow's CCA on every TCP socket, and the socket sampler records
the algorithm each data stream really used.

Name resolution: the server resolves its own host name and the address it binds at start; in a
namespace without DNS each lookup waits 5 s for the unreachable resolver and an unresolvable bind
address is fatal. GLOBUS_HOSTNAME is set to the receiver's name (which longhaul's hosts file
resolves) and the bind address is that name too.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import quote

from longhaul.drivers import gridftp_log
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import BurstSpec, FlowRules, ServerSpec, listening

CONTROL_PORT_OFFSET = 10000     # control channel port = the burst's port + this (below the ephemeral range)
MIB = 1048576                   # globus-url-copy's "MB/sec" is MiB per second
MARKER_PERIOD_S = 5.0           # the server's performance-marker period (not settable from globus-url-copy)

# Run a command after making sure a directory exists: argv-safe, no quoting of paths into a script.
SERVER, CLIENT = "globus-gridftp-server", "globus-url-copy"
_MKDIR_EXEC = 'mkdir -p "$1" && shift && exec "$@"'
# Disk source: write the file, send it, remove it on any exit (trial stops send SIGTERM to the group).
# The source file is written before the trial's clock starts (GridFTP.prepare): a burst times the
# transfer, not the writing of 20 GB. The sender removes it when done, whatever ends it.
_DISK_WRITE = 'mkdir -p "$(dirname "$1")" && head -c "$2" /dev/zero > "$1"'
_DISK_SEND = ('src=$1; shift; trap \'rm -f "$src"\' EXIT; trap \'exit 143\' TERM INT; '
              'test -f "$src" || { echo "source file $src missing" >&2; exit 1; }; "$@"')


def control_port(spec: BurstSpec) -> int:
    return int(spec.options.get("gridftp_control_port") or spec.port + CONTROL_PORT_OFFSET)


def bind_host(spec: BurstSpec) -> str:
    """Name or address the server binds (control and data); the sender must reach it as well."""
    return str(spec.options.get("gridftp_bind") or spec.receiver)


def receiver_path(spec: BurstSpec) -> PurePosixPath:
    return spec.workdir / f"gridftp-recv-{spec.port}.dat"


def source_path(spec: BurstSpec) -> PurePosixPath:
    return spec.workdir / f"gridftp-src-{spec.port}.dat"


def transfer_log_path(spec: BurstSpec) -> PurePosixPath:
    return spec.workdir / f"gridftp-transfer-{spec.port}.log"


def server_argv(spec: BurstSpec) -> list[str]:
    """Anonymous server in the foreground (daemon mode forks one child per connection, all in the
    executor's process group). Its log, with the TRANSFER level, goes unbuffered to stdout, which the
    trial hands to parse; the netlogger transfer log is also kept in the workdir."""
    host = bind_host(spec)
    argv = ["env", f"GLOBUS_HOSTNAME={host}", SERVER,
            "-c", "/dev/null",                       # no host config (/etc/gridftp.conf sets port 2811)
            "-aa", "-anonymous-user", "root", "-allow-root",  # root: write files in the burst's workdir
            "-p", str(control_port(spec)),
            "-control-interface", host, "-data-interface", host,
            "-port-range", f"{spec.port},{spec.port}",
            "-dc-default", "tcp:reuse=true",           # bind the data port beside TIME_WAIT ones
            "-log-level", "error,warn,info,transfer",
            "-logfile", "/dev/stdout", "-log-module", "stdio:buffer=0",
            "-log-transfer", str(transfer_log_path(spec))]
    return ["sh", "-c", _MKDIR_EXEC, SERVER, str(spec.workdir), *argv]     # $0: the program it becomes


def _url(host: str, port: int | str, path: PurePosixPath | str) -> str:
    return f"ftp://{host}:{port}{quote(str(path))}"


def _file_bytes(spec: BurstSpec) -> int:
    size = spec.bytes or spec.options.get("file_bytes")
    if not size:
        raise ValueError("a disk GridFTP burst needs bytes or options.file_bytes for its source file")
    return int(size)


def duration_arg(duration_s: float) -> str:
    """globus-url-copy -t takes whole seconds (atoi): round to the nearest, at least 1."""
    return str(max(1, int(duration_s + 0.5)))


def client_argv(spec: BurstSpec) -> list[str]:
    if spec.protocol != "tcp":
        raise ValueError("GridFTP moves data over TCP only")
    if (spec.duration_s is None) == (spec.bytes is None):
        raise ValueError("give exactly one of duration_s or bytes")
    if spec.storage not in ("memory", "disk"):
        raise ValueError(f"unknown storage {spec.storage!r}")
    host, port = bind_host(spec), control_port(spec)
    # -fast: MODE E even for one stream, so the server sends performance markers for any -p
    argv = [CLIENT, "-vb", "-fast", "-p", str(max(1, spec.streams))]
    if spec.window_bytes:
        argv += ["-tcp-bs", str(spec.window_bytes)]
    if spec.duration_s is not None:
        argv += ["-t", duration_arg(spec.duration_s)]
    if spec.storage == "memory":
        if spec.bytes is not None:
            argv += ["-len", str(spec.bytes)]     # partial length of the endless /dev/zero
        return argv + ["file:///dev/zero", _url(host, port, "/dev/null")]
    _file_bytes(spec)               # refuse a disk burst that does not know its file's size
    src = source_path(spec)
    argv += [f"file://{quote(str(src))}", _url(host, port, receiver_path(spec))]
    return ["sh", "-c", _DISK_SEND, argv[0], str(src), *argv]


def memory_put_argv(host: str, control_port: int | str, nbytes: int, streams: int = 1) -> list[str]:
    """One PUT of nbytes from memory to the server's /dev/null (a plan replay's transfer; the
    port may be a placeholder its agent fills in)."""
    return [CLIENT, "-vb", "-fast", "-p", str(max(1, streams)), "-len", str(int(nbytes)),
            "file:///dev/zero", _url(host, control_port, "/dev/null")]


def prepare_argv(spec: BurstSpec) -> tuple[list[list[str]], list[list[str]]]:
    if spec.storage != "disk":
        return [], []
    src = str(source_path(spec))
    return [["sh", "-c", _DISK_WRITE, "sh", src, str(_file_bytes(spec))]], [["rm", "-f", src]]


# --------------------------------------------------------------------------- parsing

_VB = re.compile(r"^\s*(\d+) bytes\s+([\d.]+) MB/sec avg\s+([\d.]+) MB/sec inst\s*$")


def parse_markers(text: str) -> list[tuple[float, int]]:
    """-vb lines (separated by carriage returns) -> [(seconds since the transfer began, bytes)].
    A line carries no time; its average rate is bytes over the time since the start, so the time is
    bytes / average (the rate has two decimals: well under 1 % off at any useful rate)."""
    out: list[tuple[float, int]] = []
    for line in re.split(r"[\r\n]+", text):
        match = _VB.match(line)
        if not match:
            continue
        nbytes, avg = int(match.group(1)), float(match.group(2))
        prev_t = out[-1][0] if out else 0.0
        t = nbytes / (avg * MIB) if avg > 0 else prev_t + MARKER_PERIOD_S
        out.append((max(t, prev_t), nbytes))
    return out


def parse_transfer_stats(text: str) -> list[dict]:
    """Every netlogger FTP_INFO record, from the server log ("Transfer stats: ...") or the
    -log-transfer file: DATE START NBYTES STREAMS BUFFER TYPE CODE, retrans per stream if present.
    Fields are split as gridftp_log.fields does, so a FILE with spaces comes out whole."""
    records = []
    for line in text.splitlines():
        if "NL.EVNT=FTP_INFO" not in line:
            continue
        fields = gridftp_log.fields(line)
        rec: dict = {"file": fields.get("FILE"), "type": fields.get("TYPE"),
                     "code": int(fields["CODE"]) if fields.get("CODE", "").isdigit() else None,
                     "bytes": int(fields.get("NBYTES", 0)), "streams": int(fields.get("STREAMS", 0) or 0),
                     "buffer": int(fields.get("BUFFER", 0) or 0), "block": int(fields.get("BLOCK", 0) or 0),
                     "dest": fields.get("DEST", "").strip("[]")}
        if "DATE" in fields and "START" in fields:
            end, start = gridftp_log.stamp(fields["DATE"]), gridftp_log.stamp(fields["START"])
            rec["seconds"] = round((end - start).total_seconds(), 6)
        if fields.get("retrans"):
            rec["retrans"] = [int(x) for x in fields["retrans"].split(",") if x.isdigit()]
        records.append(rec)
    return records


def _intervals(markers: list[tuple[float, int]], total: int | None, seconds: float | None) -> list[Interval]:
    """Marker-to-marker deltas (about 5 s each), then what the server counted after the last marker."""
    out, prev_t, prev_b = [], 0.0, 0
    for t, nbytes in markers:
        if t > prev_t and nbytes >= prev_b:
            out.append(Interval(end_s=round(t, 3), seconds=round(t - prev_t, 3), bytes=nbytes - prev_b))
            prev_t, prev_b = t, nbytes
    if total is not None and seconds is not None and total > prev_b and seconds > prev_t:
        out.append(Interval(end_s=round(seconds, 3), seconds=round(seconds - prev_t, 3), bytes=total - prev_b))
    return out


def parse(client_text: str, server_text: str, spec: BurstSpec | None = None) -> Result:
    """client_text: globus-url-copy's stdout (-vb); server_text: the server's stdout (its log with
    the transfer-stats line) or the transfer log. Raises ValueError if neither shows a transfer."""
    markers = parse_markers(client_text)
    records = parse_transfer_stats(server_text)
    if not markers and not records:
        raise ValueError("no GridFTP transfer in the outputs (no -vb marker, no transfer-stats line)")
    rec = records[-1] if records else None
    received = rec["bytes"] if rec else markers[-1][1]
    seconds = rec.get("seconds") if rec else None
    if seconds is None:
        seconds = markers[-1][0] if markers else 0.0
    error = None
    if rec and rec["code"] not in (None, 226):
        error = f"GridFTP transfer ended with code {rec['code']}"
    elif spec is not None and spec.bytes is not None and received < spec.bytes:
        error = f"GridFTP moved {received} of {spec.bytes} bytes"
    extra = {"marker_period_s": MARKER_PERIOD_S, "markers": len(markers)}
    if rec:
        extra.update({k: rec[k] for k in ("type", "code", "buffer", "block") if rec.get(k) is not None})
        if "retrans" in rec:     # the receiver's sockets: a PUT's server only sends ACKs
            extra["receiver_retrans"] = rec["retrans"]
    if spec is not None:
        extra.update({"control_port": control_port(spec), "requested_cca": spec.cca})
    return Result(
        protocol="tcp", cca=spec.cca if spec is not None else None,
        streams=(rec["streams"] if rec and rec["streams"] else (spec.streams if spec else 1)),
        seconds=float(seconds), bytes_sent=received, bytes_received=received,
        retransmits=None,        # the sender's retransmits are in socket sampling, not in any GridFTP output
        lost_percent=None,
        receiver_intervals=_intervals(markers, rec["bytes"] if rec else None, rec.get("seconds") if rec else None),
        remote_port=spec.port if spec is not None else None,
        error=error, extra=extra)


def _check_flow(flow) -> str | None:
    if flow.storage == "disk" and flow.file_bytes is None and flow.bytes is None:
        return "a timed file transfer needs file_bytes (the size of each file it moves)"
    return None


class GridFTP:
    """drivers.tool.Tool for GridFTP. One server per burst (shared_servers False): each server's
    stdout then holds exactly one transfer-stats line, its passive data port is the burst's own
    port, and it starts in about 0.5 s, well inside the trial's server lead."""

    name = "gridftp"
    executables = (SERVER, CLIENT)
    shared_servers = False
    sets_cca = False               # the trial's LD_PRELOAD shim sets it per socket
    counts_arrivals = False        # -vb reports every 5 s; the sender's tcp_info every 0.1 s
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = True   # the server looks up the receiver's test address at start
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = ("gridftp_control_port", "gridftp_bind")   # what a flow's [flows.options] may set
    rules = FlowRules(("tcp",), multi_stream=True, flow_fields=("storage", "file_bytes"), check=_check_flow)

    def prepare(self, spec: BurstSpec) -> tuple[list[list[str]], list[list[str]]]:
        return prepare_argv(spec)

    def server(self, spec: BurstSpec) -> ServerSpec:
        cleanup = [["rm", "-f", str(receiver_path(spec))]] if spec.storage == "disk" else []
        return ServerSpec(server_argv(spec), listening(control_port(spec)), cleanup)

    def client(self, spec: BurstSpec) -> list[str]:
        return client_argv(spec)

    def parse(self, client_text: str, server_text: str, spec: BurstSpec) -> Result:
        return parse(client_text, server_text, spec)
