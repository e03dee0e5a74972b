"""What the console computes from the store that takes seconds on a large run: a run's study
sections (seed 001's fits and figures over 630 cells take ~30 s) and a comparison (~20 s).

Each is computed once per state of the store it reads (the key includes live.store_key, so a run
that moves is computed again), on one worker thread (the controller's CPU belongs to the lab
first: twenty viewers of a large run cost one computation, not twenty), and shared by every
request that asks meanwhile. A page waits for it a moment, so a small run's page comes whole,
and otherwise shows the rest of itself at once and fetches this part when it is ready
(static/fragments.js). What is held is markup and rows derived from the store, in memory, bounded
by LIMIT and gone with the process: not a second copy of results."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

LIMIT = 16            # derived views held; the least recently asked for goes first
INLINE_WAIT_S = 0.5   # a page waits this long before it leaves the part to be fetched
FETCH_WAIT_S = 10.0   # a fragment request waits this long before it answers "not yet" (202)


class Derived:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._held: OrderedDict[Hashable, Future] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="console-derived")

    def future(self, key: Hashable, compute: Callable[[], Any]) -> Future:
        """The computation for key: the one under way or done, else a new one queued."""
        with self._lock:
            held = self._held.get(key)
            if held is not None and not (held.done() and held.exception() is not None):
                self._held.move_to_end(key)
                return held
            fut = self._pool.submit(compute)
            self._held[key] = fut
            while len(self._held) > self.limit:
                self._held.popitem(last=False)
            return fut

    async def within(self, key: Hashable, compute: Callable[[], Any], wait_s: float) -> tuple[bool, Any]:
        """(True, result) if it is ready within wait_s (its exception raised here), else (False, None)."""
        fut = self.future(key, compute)
        try:
            return True, await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), wait_s)
        except asyncio.TimeoutError:
            return False, None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
