"""Sender side of the NFS flows: K concurrent clients each copying a file to the server, in rounds.

    python3 -m longhaul.drivers.nfs_client --server D1 --port P --mount-port M --clients K \
        --file-bytes N [--window BYTES] [--iterations I] [--duration S]

Seed 000 copies 1 GB from local memory to an NFS-mounted folder with 1 to 16 clients, again and
again, and reports throughput per iteration. This kernel has no NFS client, so each copy is one
run of longhaul-nfswrite (drivers/nfswrite, on libnfs) to
`nfs://server/export/c<k>-<tag>-<i>.bin?version=3&nfsport=P&mountport=M` (NFSv3: Debian 12's libnfs
cannot WRITE more than ~3.5 KB per NFSv4 call, see nfs_server.py). It writes zeros from memory with
up to --window bytes of WRITE calls in flight on one connection, as a kernel client's writeback
does; libnfs' own nfs-cp waits for each 1 MB WRITE's reply (--window 1048576 behaves like it).

Output, one JSON object per line, times in seconds since the start line's wall clock `t0`:
  {"start": {"t0": ..., "clients": K, "file_bytes": N, ...}}
  {"copy": {"client": k, "iteration": i, "bytes": n, "start": s, "end": e, "seconds": d,
            "returncode": 0, "complete": true}}                      one per finished copy
  {"summary": {"copies": ..., "complete": ..., "bytes": ..., "seconds": ..., "failed": ...}}
Iterations are per client (each client starts its next copy when its last one ends). With
--duration, no copy starts after the deadline and copies still running then are stopped and
reported with "complete": false and bytes null, then with the bytes the server had acknowledged:
  {"partial": {"client": k, "iteration": i, "bytes": n}}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from longhaul.core.paths import BUILD_BIN

BINARY_NAME = "longhaul-nfswrite"
WINDOW_MAX = 1 << 30     # the writer's own bound (drivers/nfswrite/nfswrite.c, MAX_WINDOW)
EXPORT = "/export"


def copy_url(server: str, port: int, mount_port: int, name: str, export: str = EXPORT,
             version: int = 3) -> str:
    host = f"[{server}]" if ":" in server else server
    return f"nfs://{host}{export}/{name}?version={version}&nfsport={port}&mountport={mount_port}"


def file_name(client: int, tag: str, iteration: int) -> str:
    """c<client>-<tag>-<iteration>.bin: nfs_server.Janitor keeps only the newest per c<client>-<tag>."""
    return f"c{client}-{tag}-{iteration}.bin"


def helper_path() -> Path:
    """Where the writer is: $LONGHAUL_NFSWRITE or <repo>/build/bin (built by the setup)."""
    env = os.environ.get("LONGHAUL_NFSWRITE")
    return Path(env) if env else BUILD_BIN / BINARY_NAME


def write_argv(file_bytes: int, url: str, window: int | None = None) -> list[str]:
    return [str(helper_path()), "--bytes", str(file_bytes), *(["--window", str(window)] if window else []), url]


_COPIED = re.compile(r"^copied (\d+) bytes$", re.M)
_STOPPED = re.compile(r"^stopped after (\d+) bytes$", re.M)


class Runner:
    def __init__(self, args):
        self.args = args
        self.lock = threading.RLock()   # re-entrant: the SIGTERM handler may run inside emit()
        self.stop = threading.Event()
        self.procs: dict[int, subprocess.Popen] = {}
        self.copies: list[dict] = []
        self.t0 = time.time()
        self.mono0 = time.monotonic()
        self.deadline = None if args.duration is None else self.mono0 + args.duration
        self.tag = f"{int(self.t0 * 1000) % 10**9}"   # a re-run into the same export gets new names

    def emit(self, obj: dict) -> None:
        with self.lock:
            print(json.dumps(obj, separators=(",", ":")), flush=True)

    def now(self) -> float:
        return round(time.monotonic() - self.mono0, 6)

    def client(self, k: int) -> None:
        a = self.args
        iteration = 0
        while not self.stop.is_set() and (a.iterations == 0 or iteration < a.iterations):
            if self.deadline is not None and time.monotonic() >= self.deadline:
                break
            # libnfs creates files exclusively (NFS3ERR_EXIST on an existing name), so every copy
            # gets a new name; the server removes a client's older files (nfs_server.Janitor)
            name = file_name(k, self.tag, iteration)
            url = copy_url(a.server, a.port, a.mount_port, name, a.export, a.version)
            start = self.now()
            with self.lock:
                if self.stop.is_set():
                    break
                proc = subprocess.Popen(write_argv(a.file_bytes, url, a.window), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                self.procs[k] = proc
            out, err = proc.communicate()
            end = self.now()
            with self.lock:
                self.procs.pop(k, None)
            complete = proc.returncode == 0
            copied = _COPIED.search(out)
            record = {"client": k, "iteration": iteration, "name": name, "bytes": a.file_bytes if complete else None,
                      "start": start, "end": end, "seconds": round(end - start, 6),
                      "returncode": proc.returncode, "complete": complete}
            short = complete and (copied is None or int(copied.group(1)) != a.file_bytes)
            if short:
                record.update(complete=False, bytes=None)
            stopped = _STOPPED.search(out)
            if stopped and not complete:
                record["partial_bytes"] = int(stopped.group(1))
            if not record["complete"]:
                record["stderr"] = (err or out).strip()[-300:]
                if short or not self.stop.is_set():    # not merely stopped at the deadline
                    record["failed"] = True
            self.copies.append(record)
            self.emit({"copy": record})
            if record.get("failed"):
                break
            iteration += 1

    def halt(self) -> None:
        """Stop starting copies and end the running ones (deadline or SIGTERM)."""
        with self.lock:
            self.stop.set()
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.terminate()

    def run(self) -> int:
        a = self.args
        self.emit({"start": {"t0": self.t0, "server": a.server, "port": a.port, "mount_port": a.mount_port,
                             "clients": a.clients, "file_bytes": a.file_bytes, "iterations": a.iterations,
                             "duration_s": a.duration, "version": a.version, "window": a.window}})
        threads = [threading.Thread(target=self.client, args=(k,), daemon=True) for k in range(a.clients)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
                    if self.deadline is not None and time.monotonic() >= self.deadline and not self.stop.is_set():
                        self.halt()
        finally:
            self.halt()
            for t in threads:
                t.join(5)
        self.report_partial()
        done = [c for c in self.copies if c["complete"]]
        failed = [c for c in self.copies if c.get("failed")]
        span = (max(c["end"] for c in done) - min(c["start"] for c in done)) if done else 0.0
        self.emit({"summary": {"copies": len(self.copies), "complete": len(done), "failed": len(failed),
                               "bytes": sum(c["bytes"] for c in done), "seconds": round(span, 6),
                               "partial_bytes": sum(c.get("partial_bytes", 0) for c in self.copies)}})
        return 1 if failed else 0

    def report_partial(self) -> None:
        """How far the stopped copies got (the bytes the server acknowledged, as each writer said on
        its way out), so a timed burst's last seconds are not lost from the per-second view."""
        for c in self.copies:
            if not c["complete"] and not c.get("failed") and "partial_bytes" in c:
                self.emit({"partial": {"client": c["client"], "iteration": c["iteration"], "bytes": c["partial_bytes"]}})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mount-port", type=int, required=True)
    ap.add_argument("--export", default=EXPORT)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--file-bytes", type=int, required=True)
    ap.add_argument("--iterations", type=int, default=0, help="copies per client; 0: until --duration")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--window", type=int, default=None,
                    help="bytes of WRITE calls in flight per client (default: longhaul-nfswrite's, 64 MB)")
    ap.add_argument("--version", type=int, choices=(3, 4), default=3)
    args = ap.parse_args(argv)
    if args.iterations == 0 and args.duration is None:
        ap.error("give --iterations, --duration or both")
    if args.clients < 1 or args.file_bytes < 1:
        ap.error("--clients and --file-bytes must be positive")
    if args.window is not None and not 4096 <= args.window <= WINDOW_MAX:
        ap.error(f"--window must be 4096 to {WINDOW_MAX} bytes")
    runner = Runner(args)
    signal.signal(signal.SIGTERM, lambda *_: runner.halt())
    signal.signal(signal.SIGINT, lambda *_: runner.halt())
    return runner.run()


if __name__ == "__main__":
    sys.exit(main())
