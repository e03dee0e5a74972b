"""Unconditional teardown: a LIFO stack of undo actions, and signals turned into exceptions."""

from __future__ import annotations

import logging
import signal
from contextlib import contextmanager

log = logging.getLogger(__name__)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; a BaseException so `except Exception` cannot swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by signal {signal.Signals(signum).name}")


class CleanupStack:
    """Undo actions run newest first; every action runs even if an earlier one fails."""

    def __init__(self):
        self._actions: list[tuple[str, object]] = []

    def push(self, description: str, action) -> None:
        self._actions.append((description, action))

    def __len__(self) -> int:
        return len(self._actions)

    def close(self) -> list[str]:
        failures = []
        with signals_deferred():
            while self._actions:
                description, action = self._actions.pop()
                try:
                    action()
                except Exception as exc:  # teardown must go on; failures are reported together
                    failures.append(f"{description}: {exc}")
                    log.error("cleanup step failed: %s: %s", description, exc)
        return failures

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@contextmanager
def signals_raise():
    """While inside, SIGINT and SIGTERM raise Interrupted so `finally` blocks run teardown."""
    def handler(signum, _frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def signals_deferred():
    """While tearing down, a Ctrl-C must not cut the teardown short: note it, act on it after.

    A teardown that runs because something is already propagating (an Interrupted, an error)
    only logs it: the run is ending anyway. Any other teardown (a trial's, a verification's)
    delivers the signal again once it is done, so an interrupt is never lost."""
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: received.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
    if received:
        log.warning("signal %s received during teardown; teardown completed first", received)
        if sys.exc_info()[0] is None:
            signal.raise_signal(received[0])
