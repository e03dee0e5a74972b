"""Whether the remote hosts of a lab still answer while a trial runs: a host that is powered off,
cut from the network or frozen must fail the trial within a bounded time, named, instead of the
trial waiting on its processes until some timeout far away. Every `period_s` each remote host is
asked to run `true` (over its shared SSH connection: a few ms); a host that has not answered
`misses` checks in a row, each given `timeout_s`, is lost: its executor is fenced (every later
command to it fails at once, so the teardown of the rest of the lab does not wait on it) and
`lost()` says since when and why. Hosts of this machine (namespaces) are not watched: they cannot
fail apart from it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from longhaul.hardware.executors.process import Executor

PERIOD_S = 5.0
TIMEOUT_S = 8.0         # an emulated VM's sshd under load answers in well under a second
MISSES = 2              # so a host is named lost at most ~2 x (PERIOD_S + TIMEOUT_S) after it went


class HostLost(RuntimeError):
    """Lab hosts stopped answering: host -> why."""

    def __init__(self, hosts: dict[str, str]):
        self.hosts = dict(hosts)
        super().__init__("lab host lost: " + "; ".join(f"{h}: {why}" for h, why in sorted(self.hosts.items())))


class HostWatch:
    def __init__(self, executors: dict[str, Executor], period_s: float = PERIOD_S, timeout_s: float = TIMEOUT_S,
                 misses: int = MISSES):
        self.executors = {h: e for h, e in executors.items() if e.remote}
        self.period_s, self.timeout_s, self.misses = period_s, timeout_s, misses
        self._lost: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def lost(self) -> dict[str, str]:
        return dict(self._lost)

    def check(self) -> None:
        """HostLost if a host is lost."""
        if self._lost:
            raise HostLost(self._lost)

    def settle(self) -> dict[str, str]:
        """After a trial failed for another reason: whether a host that went with it is the cause.
        A tool's SSH session can break (a new one time out) before the watch's next checks; each
        host not yet lost is asked now, up to `misses` times, and one that never answers is lost
        like any other (at most misses x timeout_s). The hosts lost."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.executors))) as pool:
            hosts = [h for h in self.executors if h not in self._lost]
            t0 = time.monotonic()
            answered = dict(zip(hosts, pool.map(self._answers, hosts)))
        for host, ok in answered.items():
            if not ok and host not in self._lost:
                why = f"no answer over SSH for {time.monotonic() - t0:.0f} s ({self.misses} checks of {self.timeout_s:g} s)"
                self.executors[host].fence(why)
                self._lost[host] = why
        return self.lost()

    def _answers(self, host: str) -> bool:
        return any(self.executors[host].alive(self.timeout_s) for _ in range(self.misses))

    def __enter__(self) -> HostWatch:
        if self.executors:
            self._thread = threading.Thread(target=self._watch, name="host-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)

    def _watch(self) -> None:
        missed = {h: 0 for h in self.executors}
        last_answer = {h: time.monotonic() for h in self.executors}
        with ThreadPoolExecutor(max_workers=len(self.executors)) as pool:
            while not self._stop.is_set():
                hosts = [h for h in self.executors if h not in self._lost]
                for host, ok in zip(hosts, pool.map(lambda h: self.executors[h].alive(self.timeout_s), hosts)):
                    missed[host] = 0 if ok else missed[host] + 1
                    if ok:
                        last_answer[host] = time.monotonic()
                    elif missed[host] >= self.misses:
                        why = (f"no answer over SSH for {time.monotonic() - last_answer[host]:.0f} s "
                               f"({self.misses} checks of {self.timeout_s:g} s)")
                        self.executors[host].fence(why)
                        self._lost[host] = why
                self._stop.wait(self.period_s)
