"""A de-duplicating work queue, as client-go's: a key is queued at most once, never processed by two
workers at once, and re-queued after processing if it was added meanwhile. Failures back off."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class WorkQueue:
    def __init__(self, base_delay: float = 0.05, max_delay: float = 300.0) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        # add_batched's timers, apart: a pass that starts cancels them (never a requeue_after or a backoff).
        self._batches: dict[Hashable, asyncio.TimerHandle] = {}
        self._failures: dict[Hashable, int] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._dirty)

    def add(self, key: Hashable) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Adds `key` after `delay` seconds; an earlier pending timer for the same key wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def add_batched(self, key: Hashable, delay: float) -> None:
        """Adds `key` within `delay` seconds, together with whatever else arrives for it meanwhile: nothing
        to do when it is queued already (that pass has not started, so it reads this change too); else a
        timer, which later calls do not push back. A pass of the key that starts first (queued by something
        else) cancels it: that pass reads every change the timer was for."""
        if key in self._dirty or key in self._batches:
            return
        self._batches[key] = asyncio.get_running_loop().call_later(delay, self._fire_batch, key)

    def _fire_batch(self, key: Hashable) -> None:
        self._batches.pop(key, None)
        self.add(key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: Hashable) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = float(min(self.base_delay * (2**failures), self.max_delay))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._dirty.discard(key)
        batch = self._batches.pop(key, None)
        if batch is not None:
            batch.cancel()
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def shutdown(self) -> None:
        for timer in (*self._timers.values(), *self._batches.values()):
            timer.cancel()
        self._timers.clear()
        self._batches.clear()
