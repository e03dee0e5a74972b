"""NFS-over-TCP application traffic (seed 000, Figures 15 and 19): K clients copying a file to an
NFS server again and again, throughput per copy and per iteration.

This kernel has neither an NFS server nor client, so both ends are userspace: nfs-ganesha (FSAL
VFS) on the receiver through nfs_server.py, longhaul-nfswrite (libnfs) on the sender through nfs_client.py.
Data goes the paper's way, client -> server (cp from local memory to the NFS-mounted folder), so
the server runs on the receiver D and the clients on the sender S: the copies cross the shaped
direction. NFSv3 over TCP (why not v4: nfs_server.py).

Flow options (BurstSpec.options): clients (default 1), file_bytes (default 1 GB = 10**9 bytes,
the paper's size), iterations (copies per client; default: until the burst's duration ends, or
enough for the burst's `bytes`), window (bytes of WRITE calls in flight per client, default 64 MB),
mount_port (default port + MOUNT_PORT_OFFSET), bind (the server's listening address; default the
receiver's name, resolved on the receiver).

Fidelity: a kernel client writes back with many WRITE calls outstanding on one connection, so TCP
sets its rate (seed 000: one client 410 Mb/s at 128 ms). longhaul-nfswrite does the same with up to
`window` bytes of 1 MB WRITEs in flight. libnfs' nfs-cp, which this driver used before, waits for
each 1 MB WRITE's reply: one copy then moves at most 1 MB per round trip; window = 1048576
reproduces that. Measured on Overlay-1 at 128 ms (bench/RESULTS-nfs.md): 59 Mb/s that way, and a
1 GB copy in 19.8 s, 403 Mb/s, with the default window (the paper: about 20 s, 410 Mb/s).

Per-second intervals are an approximation: the writer reports nothing until a copy is done, so each
copy's bytes are spread evenly over its duration and summed per second. The socket sampler
(collectors/live/socket_sampler.py, keyed by the NFS port) gives the real per-second view.
"""

from __future__ import annotations

import math
import sys

from longhaul.drivers import nfs_client
from longhaul.drivers.jsonlines import json_lines
from longhaul.drivers.nfs_server import READY_LINE, paths
from longhaul.drivers.result import Interval, Result
from longhaul.drivers.tool import FlowRules, ServerSpec

DEFAULT_FILE_BYTES = 1_000_000_000
# NFSv3 needs a MOUNT port beside the NFS port; a flow owns ports base..base+9 (appliance/run/trial/plan.py)
# from 5201 on, so an offset of 10000 stays clear of every flow's ports and below the ephemeral range.
MOUNT_PORT_OFFSET = 10_000


def mount_port(spec) -> int:
    return int(spec.options.get("mount_port") or spec.port + MOUNT_PORT_OFFSET)


def plan(spec) -> tuple[int, int, int]:
    """(clients, file_bytes, iterations per client; 0 = until the duration ends)."""
    opts = spec.options or {}
    clients = int(opts["clients"]) if opts.get("clients") is not None else 1
    file_bytes = opts.get("file_bytes")
    iterations = int(opts.get("iterations") or 0)
    if clients < 1:
        raise ValueError(f"bad NFS plan: clients={clients}")
    if spec.bytes is not None:
        # a sized burst moves about `bytes` in all: whole copies of file_bytes, or one round
        if file_bytes is None:
            file_bytes = math.ceil(spec.bytes / clients)
        iterations = iterations or max(1, math.ceil(spec.bytes / (clients * int(file_bytes))))
    file_bytes = int(file_bytes or DEFAULT_FILE_BYTES)
    if clients < 1 or file_bytes < 1 or iterations < 0:
        raise ValueError(f"bad NFS plan: clients={clients} file_bytes={file_bytes} iterations={iterations}")
    return clients, file_bytes, iterations


def server_argv(spec) -> list[str]:
    bind = str((spec.options or {}).get("bind") or spec.receiver)
    return [sys.executable, "-m", "longhaul.drivers.nfs_server", "--workdir", str(spec.workdir),
            "--port", str(spec.port), "--bind", bind, "--mount-port", str(mount_port(spec))]


def client_argv(spec) -> list[str]:
    if spec.protocol != "tcp":
        raise ValueError("NFS runs over TCP only")
    clients, file_bytes, iterations = plan(spec)
    argv = [sys.executable, "-m", "longhaul.drivers.nfs_client", "--server", spec.receiver,
            "--port", str(spec.port), "--mount-port", str(mount_port(spec)), "--clients", str(clients),
            "--file-bytes", str(file_bytes), "--iterations", str(iterations)]
    window = (spec.options or {}).get("window")
    if window is not None:
        argv += ["--window", str(int(window))]
    if spec.duration_s is not None:
        argv += ["--duration", f"{spec.duration_s:g}"]
    return argv


# --------------------------------------------------------------------------- parsing

def read_lines(text: str) -> tuple[dict, list[dict], dict | None]:
    """(start, copies, summary) from nfs_client's JSON lines; other lines are ignored."""
    start, copies, summary = {}, [], None
    for obj in json_lines(text):
        if "start" in obj:
            start = obj["start"]
        elif "copy" in obj:
            copies.append(obj["copy"])
        elif "partial" in obj:
            part = obj["partial"]
            for c in copies:
                if (c.get("client"), c.get("iteration")) == (part.get("client"), part.get("iteration")):
                    c["partial_bytes"] = int(part.get("bytes") or 0)
        elif "summary" in obj:
            summary = obj["summary"]
    return start, copies, summary


def moved_bytes(copy: dict) -> int:
    """What a copy delivered: the file for a complete one, what reached the server for a stopped one."""
    return int(copy["bytes"]) if copy.get("complete") else int(copy.get("partial_bytes") or 0)


def mbps(nbytes: int, seconds: float) -> float | None:
    return round(nbytes * 8 / seconds / 1e6, 3) if seconds > 0 else None


def spread_intervals(copies: list[dict], clients: int) -> list[Interval]:
    """Per-second bytes, each copy's delivered bytes spread evenly over [start, end)."""
    done = [c for c in copies if moved_bytes(c) > 0]
    if not done:
        return []
    last = max(c["end"] for c in done)
    nbins = max(1, math.ceil(last - 1e-9))
    bins = [[0.0] * clients for _ in range(nbins)]
    for c in done:
        start, end, rate = c["start"], c["end"], moved_bytes(c) / max(c["end"] - c["start"], 1e-9)
        for b in range(int(start), min(nbins, math.ceil(end))):
            overlap = min(end, b + 1) - max(start, b)
            if overlap > 0 and 0 <= c["client"] < clients:
                bins[b][c["client"]] += overlap * rate
    out = []
    for b, per_client in enumerate(bins):
        end_s = min(float(b + 1), last)
        streams = [round(x) for x in per_client]
        out.append(Interval(end_s=round(end_s, 6), seconds=round(end_s - b, 6), bytes=sum(streams), streams=streams))
    return out


def iteration_table(copies: list[dict]) -> list[dict]:
    """Figure 19's view: per iteration, the mean per-client rate (19a) and the clients' sum (19b).
    Clients drift apart (each starts its next copy when its own ends), so sum_mbps overstates the
    aggregate when an iteration's copies barely overlap and span_mbps (bytes over the iteration's
    whole span) understates it; the intervals give the aggregate over time."""
    rows = []
    for it in sorted({c["iteration"] for c in copies}):
        these = [c for c in copies if c["iteration"] == it and c.get("complete")]
        if not these:
            continue
        rates = [mbps(c["bytes"], c["seconds"]) for c in these]
        rates = [r for r in rates if r is not None]
        span = max(c["end"] for c in these) - min(c["start"] for c in these)
        rows.append({"iteration": it, "copies": len(these), "bytes": sum(c["bytes"] for c in these),
                     "mean_mbps": round(sum(rates) / len(rates), 3) if rates else None,
                     "sum_mbps": round(sum(rates), 3) if rates else None,
                     "span_mbps": mbps(sum(c["bytes"] for c in these), span),
                     "per_client_mbps": {str(c["client"]): mbps(c["bytes"], c["seconds"]) for c in these}})
    return rows


def parse(client_text: str, server_text: str = "", spec=None) -> Result:
    start, copies, summary = read_lines(client_text)
    if not start and not copies:
        raise ValueError("not nfs_client output")
    clients = int(start.get("clients") or (max((c["client"] for c in copies), default=0) + 1))
    done = [c for c in copies if c.get("complete")]
    failed = [c for c in copies if c.get("failed")]
    moved = sum(moved_bytes(c) for c in copies)
    span = (max(c["end"] for c in copies) - min(c["start"] for c in copies)) if copies else 0.0
    error = None
    if failed:
        error = f"{len(failed)} of {len(copies)} copies failed: {failed[0].get('stderr', '')[:200]}"
    elif not copies:
        error = "no copy started"
    elif summary is None:
        error = "nfs_client ended without its summary (killed?)"
    extra = {
        "iterations": iteration_table(copies),
        "copies": [{k: c.get(k) for k in ("client", "iteration", "bytes", "partial_bytes", "start", "end",
                                          "seconds", "complete")}
                   | {"mbps": mbps(moved_bytes(c), c["seconds"])} for c in copies],
        "clients": clients, "file_bytes": start.get("file_bytes"), "complete": len(done),
        "incomplete": len(copies) - len(done),
        "intervals_note": "approximation: each copy's bytes (a stopped copy's: what the server acknowledged) "
                          "spread evenly over its duration; the socket sampler has the measured per-second view",
    }
    intervals = spread_intervals(copies, clients)
    # the CCA the trial asked the ccashim for; the socket sampler records what each socket ran
    return Result(protocol="tcp", cca=getattr(spec, "cca", None), streams=clients, seconds=round(span, 6), bytes_sent=moved,
                  bytes_received=moved, retransmits=None, lost_percent=None, receiver_intervals=intervals,
                  remote_port=start.get("port"), error=error, extra=extra)


def _check_flow(flow) -> str | None:
    if flow.file_bytes is None and flow.bytes is None:
        return "a timed file transfer needs file_bytes (the size of each file it moves)"
    window = flow.options.get("window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or not 4096 <= window <= nfs_client.WINDOW_MAX):
        return f"options.window {window!r}: bytes of WRITEs in flight per client, an integer 4096 to {nfs_client.WINDOW_MAX}"
    return None


class Nfs:
    """drivers.tool.Tool for NFS: one ganesha per burst (its files live in the burst's workdir)."""

    name = "nfs"
    shared_servers = False
    sets_cca = False    # the writer has no CCA option: the trial's ccashim sets it on every TCP socket
    counts_arrivals = False     # per copy figures spread over time are approximate; tcp_info is not
    needs_link_facts = False
    sends_from = "sender"
    resolves_own_address = False
    setup_round_trips = 2
    start_allowance_s = 0.0
    option_keys = ("iterations", "window", "mount_port", "bind")   # what a flow's [flows.options] may set
    rules = FlowRules(("tcp",), flow_fields=("clients", "file_bytes"), check=_check_flow)

    @property
    def executables(self) -> tuple[str, ...]:
        # ganesha on receivers; the writer (an absolute path, as preflight checks it) on senders
        return ("ganesha.nfsd", str(nfs_client.helper_path()))

    def prepare(self, spec):
        return [], []

    def server(self, spec):
        p = paths(spec.workdir, spec.port)
        # ganesha logs READY_LINE once it serves; the launcher deletes an old log before starting.
        # Cleanup drops only the copied files (clients x file size); the log stays with the run.
        return ServerSpec(argv=server_argv(spec), ready=["grep", "-s", "-m1", READY_LINE, p["log"]],
                          cleanup=[["rm", "-rf", "--", p["export"]]])

    def client(self, spec) -> list[str]:
        return client_argv(spec)

    def parse(self, client_text: str, server_text: str, spec) -> Result:
        return parse(client_text, server_text, spec)
