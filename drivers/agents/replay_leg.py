"""One leg of a plan replay, run on the sender itself (appliance/plan/leg.py starts it and reads it).

Why on the sender: a controller that launched each transfer and read the class counters through
the lab's executors paid a command's round trip each time, 1-3 s to a VM under TCG, and started
transfers 2-15 s after their arrival. Here each launch is a local fork at its arrival, whatever the
backend, and the controller only reads what the agent printed.

    python3 -m longhaul.drivers.agents.replay_leg SCHEDULE.json

The schedule (SCHEDULE, written by the controller): the transfers in arrival order, each an
arrival time, a class and its client's argv with "{port}" where the server's port goes; the two
classes' server ports; and, for the BE cap, the htb's interface and the cap policy (htb_caps.py).

Transfers. A transfer takes a free port of its class at its arrival (a port is handed out again
COOLDOWN after its last client exited, least recently used first; none free: it waits, and its
runtime counts the wait); a client whose output has the busy marker (the server was still busy
with the previous one) is launched again on another port, up to max_attempts.

Ticks, once an interval from t0 in a thread of their own (a fork of tc takes up to a second on a
slow host and must not hold back launches): read the class counters (timed at the midpoint of
the read), then with caps, move BE's cap (an OD arrival sets it to the floor at once).

Events, one JSON object a line on stdout, times in seconds from t0 on this host's monotonic clock:

  {"ev": "start", "epoch": E}                      t0 on this host's wall clock
  {"ev": "launch", "i": 3, "t": 1.02, "port": 20001, "attempt": 1}
  {"ev": "exit", "i": 3, "t": 5.2, "attempt": 1, "code": 0, "retry": false, "stdout": "...", "stderr": "..."}
  {"ev": "sample", "t": 2.0, "od": B, "be": B, "other": B, "cap": bps|null, "od_rate": bps|null}
  {"ev": "cap", "t": 1.03, "bps": bps|null}
  {"ev": "end", "t": 61.0, "reason": "done"|"deadline"|"stopped"|"failed", "error": null}

Standard library and longhaul.core only: it starts in a fraction of a second on a VM under TCG.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from longhaul.core.documents import DocumentFormat
from longhaul.drivers.agents.htb_caps import (
    BE_CLASS,
    OD_CLASS,
    OTHER_CLASS,
    CapController,
    CapPolicy,
    cap_argv,
    class_bytes,
    counters_argv,
)

MODULE = "longhaul.drivers.agents.replay_leg"
SCHEDULE = DocumentFormat("longhaul-replay-leg", 1, "a leg schedule")
PORT = "{port}"
POLL_S = 0.01
TC_TIMEOUT_S = 30.0


class Stopped(Exception):
    """SIGTERM or SIGINT: the controller stops the leg."""


@dataclass
class _Flow:
    index: int
    arrival_s: float
    od: bool
    argv: list[str]
    attempt: int = 0
    port: int | None = None
    proc: object = None
    out: Path | None = None


@dataclass
class _Ports:
    """A class's free ports, least recently used first, each with the time it may be used again."""

    free: deque = field(default_factory=deque)

    def take(self, now: float) -> int | None:
        if self.free and self.free[0][1] <= now:
            return self.free.popleft()[0]
        return None

    def give(self, port: int, at: float) -> None:
        self.free.append((port, at))


def check_schedule(doc: dict) -> None:
    SCHEDULE.check(doc, "the schedule")
    arrivals = [t["arrival_s"] for t in doc["transfers"]]
    if arrivals != sorted(arrivals):
        raise ValueError("transfers must be in arrival order")
    for t in doc["transfers"]:
        if not any(PORT in arg for arg in t["argv"]):
            raise ValueError(f"a transfer's argv has no {PORT}: {t['argv']}")
        if not doc["ports"]["od" if t["od"] else "be"]:
            raise ValueError("a transfer's class has no server port")


def local_tc(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=TC_TIMEOUT_S).stdout


def local_spawn(argv: list[str], out: Path, err: Path):
    """The client, in the agent's process group: the controller's stop of the agent's group ends it."""
    with open(out, "w") as stdout, open(err, "w") as stderr:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)


class Emitter:
    """Events to a text stream, whole lines, from both threads."""

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, ev: str, **fields) -> None:
        line = json.dumps({"ev": ev, **fields})
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class Ticker(threading.Thread):
    """Counters and caps, once an interval, and the cap's reset at an OD arrival."""

    def __init__(self, doc: dict, emit, t0: float, od_running, tc=local_tc, clock=time.monotonic):
        super().__init__(name="replay-leg-ticker", daemon=True)
        shaper = doc["shaper"]
        self.ifname, self.root_bps, self.mtu = shaper["ifname"], shaper["root_bps"], shaper["mtu"]
        self.min_step_bps = shaper.get("min_step_bps", 0.0)
        caps = doc.get("caps")
        self.controller = CapController(CapPolicy(**caps)) if caps else None
        self.interval_s = doc["interval_s"]
        self.emit, self.t0, self.od_running, self.tc, self.clock = emit, t0, od_running, tc, clock
        self.arrived = threading.Event()
        self.finishing = threading.Event()
        self.cap_bps: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            k = 0
            while True:
                due = self.t0 + k * self.interval_s
                woken = self.arrived.wait(timeout=max(0.0, due - self.clock()))
                if self.finishing.is_set():
                    self._sample()
                    return
                if woken:
                    self.arrived.clear()
                    if self.controller is not None:
                        self._apply(self.controller.arrived())
                    continue
                self._sample()
                # a tick that took longer than an interval skips the ticks it missed
                k = max(k + 1, math.ceil((self.clock() - self.t0) / self.interval_s))
        except Exception as exc:                       # tc failed: the leg fails, it does not go on blind
            self.error = f"{type(exc).__name__}: {exc}"

    def finish(self) -> None:
        """One last sample (it counts the last bytes), then the thread ends."""
        self.finishing.set()
        self.arrived.set()
        if self.is_alive():
            self.join(timeout=2 * TC_TIMEOUT_S)

    def _sample(self) -> None:
        a = self.clock()
        counters = class_bytes(self.tc(counters_argv(self.ifname)))
        t = (a + self.clock()) / 2 - self.t0
        od = counters.get(OD_CLASS, 0)
        cap = od_rate = None
        if self.controller is not None:
            cap = self.controller.step(t, od, self.od_running() > 0)
            od_rate = self.controller.od_rate_bps
            self._apply(cap)
        self.emit("sample", t=round(t, 4), od=od, be=counters.get(BE_CLASS, 0), other=counters.get(OTHER_CLASS, 0),
                  cap=self.cap_bps, od_rate=od_rate)

    def _apply(self, cap: float | None) -> None:
        """Change BE's cap if it moved by min_step_bps or more (a tc call saved otherwise)."""
        old = self.cap_bps
        if (old is None and cap is None) or (old is not None and cap is not None
                                             and abs(old - cap) < self.min_step_bps):
            return
        self.tc(cap_argv(self.ifname, cap, self.root_bps, self.mtu))
        self.cap_bps = cap
        self.emit("cap", t=round(self.clock() - self.t0, 4), bps=cap)


class Leg:
    """The launch loop: arrivals, exits, retries, the deadline."""

    def __init__(self, doc: dict, emit, workdir: Path, spawn=local_spawn, tc=local_tc, clock=time.monotonic):
        self.doc, self.emit, self.workdir, self.spawn, self.tc, self.clock = doc, emit, workdir, spawn, tc, clock
        self.flows = [_Flow(i, t["arrival_s"], bool(t["od"]), list(t["argv"])) for i, t in enumerate(doc["transfers"])]
        self.ports = {True: _Ports(), False: _Ports()}
        for is_od, key in ((True, "od"), (False, "be")):
            for port in doc["ports"][key]:
                self.ports[is_od].give(int(port), 0.0)
        self.waiting = {c: deque(f for f in self.flows if f.od == c) for c in (True, False)}
        self.running: list[_Flow] = []
        self.t0 = math.nan

    def od_running(self) -> int:
        return sum(1 for f in self.running if f.od)

    def run(self) -> str:
        """Returns why it ended: done, deadline or failed."""
        self.t0 = self.clock() + self.doc.get("lead_s", 0.0)
        epoch = time.time() + (self.t0 - self.clock())
        ticker = Ticker(self.doc, self.emit, self.t0, self.od_running, self.tc, self.clock)
        while self.clock() < self.t0:
            time.sleep(min(POLL_S, self.t0 - self.clock()))
        self.emit("start", epoch=epoch)
        ticker.start()
        try:
            reason = self._loop(ticker)
        finally:
            for flow in list(self.running):
                flow.proc.terminate()
            for flow in list(self.running):
                try:
                    flow.proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    flow.proc.kill()
                    flow.proc.wait()
                self._exited(flow, flow.proc.returncode, retry=False)
            ticker.finish()
        if ticker.error:
            raise RuntimeError(f"the tick failed: {ticker.error}")
        return reason

    def _loop(self, ticker: Ticker) -> str:
        deadline = self.doc["deadline_s"]
        while True:
            now = self.clock() - self.t0
            for is_od, queue in self.waiting.items():
                while queue and queue[0].arrival_s <= now:
                    port = self.ports[is_od].take(now)
                    if port is None:
                        break          # no server free: the transfer waits, its runtime counts it
                    flow = queue.popleft()
                    if is_od:
                        ticker.arrived.set()
                    self._launch(flow, port)
            now = self.clock() - self.t0
            for flow in list(self.running):
                code = flow.proc.poll()
                if code is None:
                    continue
                self.ports[flow.od].give(flow.port, now + self.doc["cooldown_s"])
                retry = code != 0 and flow.attempt < self.doc["max_attempts"] and self._busy(flow)
                self._exited(flow, code, retry)
                if retry:
                    self.waiting[flow.od].appendleft(flow)       # again, on another server
            if not self.running and not any(self.waiting.values()):
                return "done"
            if ticker.error:
                return "failed"
            if now > deadline:
                return "deadline"
            arrivals = [q[0].arrival_s for q in self.waiting.values() if q]
            # exits are polled every POLL_S (a transfer waiting for a server is past its arrival)
            wait = min([POLL_S if self.running else 0.1] + [a - now for a in arrivals])
            time.sleep(max(0.001, wait))

    def _launch(self, flow: _Flow, port: int) -> None:
        flow.attempt += 1
        flow.port = port
        flow.out = self.workdir / f"t{flow.index}-{flow.attempt}"
        argv = [arg.replace(PORT, str(port)) for arg in flow.argv]
        flow.proc = self.spawn(argv, flow.out.with_suffix(".out"), flow.out.with_suffix(".err"))
        self.running.append(flow)
        self.emit("launch", i=flow.index, t=round(self.clock() - self.t0, 4), port=port, attempt=flow.attempt)

    def _read(self, flow: _Flow, suffix: str) -> str:
        path = flow.out.with_suffix(suffix)
        return path.read_text(errors="replace") if path.exists() else ""

    def _busy(self, flow: _Flow) -> bool:
        marker = self.doc.get("busy_marker")
        return bool(marker) and marker in (self._read(flow, ".out") + self._read(flow, ".err")).lower()

    def _exited(self, flow: _Flow, code: int, retry: bool) -> None:
        self.running.remove(flow)
        self.emit("exit", i=flow.index, t=round(self.clock() - self.t0, 4), attempt=flow.attempt, code=code,
                  retry=retry, stdout=self._read(flow, ".out"), stderr=self._read(flow, ".err"))


def _raise_stopped(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python3 -m {MODULE} SCHEDULE.json", file=sys.stderr)
        return 2
    doc = json.loads(Path(args[0]).read_text())
    check_schedule(doc)
    emit = Emitter()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise_stopped)
    workdir = Path(tempfile.mkdtemp(prefix="longhaul-leg-"))
    leg = Leg(doc, emit, workdir)
    reason, error = "failed", None
    try:
        reason = leg.run()
    except Stopped:
        reason = "stopped"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    t = leg.clock() - leg.t0 if not math.isnan(leg.t0) else 0.0
    emit("end", t=round(t, 4), reason=reason, error=error)
    return 0 if reason in ("done", "deadline") else 1


if __name__ == "__main__":
    sys.exit(main())
