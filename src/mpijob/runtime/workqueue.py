"""A de-duplicating work queue, as client-go's: a key is queued at most once, never processed by two workers at
once, and re-queued after processing if it was added meanwhile. Failures back off.

Two lanes. `add` queues in the ready lane, first in first out. `add_later` queues the rest of a deferred pass (a
job whose urgent discovery writes are done, `Plan.leave_discovery`; one cut before its launcher nudges,
`Defer.urgent_rest`, goes to the front of the lane, `add_later(key, first=True)`): those passes wait on the
shared QPS budget for seconds when many jobs were affected at once, and if they could take every worker, the
next job's urgent pass would wait behind them (a mass scale-in: each patched job waited for a worker while 16 of
them waited for tokens). So the later lane is taken first while fewer than `later_limit` of its passes run, and
never by more: the other workers stay free for the ready lane. And while the ready lane has keys waiting (a
burst: a spot taint queues every job on the node at once), a later-lane pass starts only when none runs: the
passes that put a job's leaving workers out of discovery get the CPU and the workers, and the later lane still
moves, one pass at a time, however long the burst. A key pending in the later lane stays there when an event
adds it (its own ConfigMap write's event would, at once); that pass reads the event's change too. So does the
rest of a pass whose own write's event came back while it ran (the event marked it for the ready lane; the
pass's `add_later` moves it). So does a later-lane pass that found the cache behind its own write and waits for
it (`add_after(..., later=True)`): the event it waits for sends it back to the later lane, not to the ready one,
where it would wait on the shared budget in a worker the next signalled job needs."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable

# Where a pending key waits: the ready lane, the front of the later lane (the rest of a pass cut before
# its launcher nudges), or the later lane.
READY, LATER_FIRST, LATER = 0, 1, 2


class WorkQueue:
    def __init__(self, base_delay: float = 0.05, max_delay: float = 300.0, later_limit: int | None = None) -> None:
        self._ready: deque[Hashable] = deque()
        # Insertion-ordered: the later lane's FIFO, and ahead of it the passes cut before their nudges.
        self._later: dict[Hashable, None] = {}
        self._later_first: dict[Hashable, None] = {}
        self._wakeup = asyncio.Event()
        # Pending keys -> their lane (READY, LATER_FIRST, LATER).
        self._dirty: dict[Hashable, int] = {}
        self._processing: set[Hashable] = set()
        self._later_running: set[Hashable] = set()
        # None: no limit (a queue without a worker count, in tests).
        self.later_limit = later_limit
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        # Keys whose timer (add_after) is for the later lane: an event for one meanwhile sends it there too.
        self._later_timers: set[Hashable] = set()
        # add_batched's timers, apart: a pass that starts cancels them (never a requeue_after or a backoff).
        self._batches: dict[Hashable, asyncio.TimerHandle] = {}
        self._failures: dict[Hashable, int] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay
        # Called with how many keys were done since the queue last had nothing pending or running, each time
        # it has nothing again (runtime/heap.py: a burst's freed heap is returned then).
        self.on_idle: Callable[[int], None] | None = None
        self._done_since_idle = 0

    def __len__(self) -> int:
        return len(self._dirty)

    def busy(self) -> bool:
        """Keys pending or being reconciled (timers not counted: a requeue_after is not work yet)."""
        return bool(self._dirty or self._processing)

    def add(self, key: Hashable) -> None:
        if key in self._later_timers:
            self._later_timers.discard(key)
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self.add_later(key)
            return
        if key in self._dirty:
            return
        self._dirty[key] = READY
        if key not in self._processing:
            self._ready.append(key)
            self._wakeup.set()

    def add_later(self, key: Hashable, *, first: bool = False) -> None:
        """Queues the rest of a deferred pass in the later lane (see the module's docstring); `first`: ahead
        of the lane's other keys (a pass cut before its launcher nudges)."""
        lane = LATER_FIRST if first else LATER
        if self._dirty.get(key) == READY and key in self._processing:
            # An event of this very pass's writes came back while it ran: the rest still goes to the later
            # lane (and reads that event's change), as for a key already waiting there.
            self._dirty[key] = lane
            return
        if key in self._dirty:
            return
        self._dirty[key] = lane
        if key not in self._processing:
            self._queue_later(key, lane)

    def _queue_later(self, key: Hashable, lane: int) -> None:
        (self._later_first if lane == LATER_FIRST else self._later)[key] = None
        self._wakeup.set()

    def add_after(self, key: Hashable, delay: float, *, later: bool = False) -> None:
        """Adds `key` after `delay` seconds; an earlier pending timer for the same key wins. `later`: to the
        later lane, and so does an event for the key before then."""
        if later:
            self._later_timers.add(key)
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
        self.add(key)  # to the later lane when it waited for it (`add` reads `_later_timers`)

    def in_later_lane(self, key: Hashable) -> bool:
        """Whether the pass of `key` running now was taken from the later lane."""
        return key in self._later_running

    def add_rate_limited(self, key: Hashable) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = float(min(self.base_delay * (2**failures), self.max_delay))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def take_pending(self) -> list[Hashable]:
        """Every queued key of both lanes, removed from the queue without a pass (tests read what a burst of
        events queued this way)."""
        keys = [*self._ready, *self._later_first, *self._later]
        self._ready.clear()
        self._later_first.clear()
        self._later.clear()
        for key in keys:
            self._dirty.pop(key, None)
        return keys

    def _later_may_run(self) -> bool:
        if not (self._later or self._later_first):
            return False
        running = len(self._later_running)
        if self._ready:
            # A burst waits in the ready lane: one later-lane pass at a time, so that lane is never starved.
            return running == 0
        return self.later_limit is None or running < self.later_limit

    async def get(self) -> Hashable:
        while not (self._later_may_run() or self._ready):
            self._wakeup.clear()
            await self._wakeup.wait()
        if self._later_may_run():
            lane = self._later_first or self._later
            key = next(iter(lane))
            del lane[key]
            self._later_running.add(key)
        else:
            key = self._ready.popleft()
        self._dirty.pop(key, None)
        batch = self._batches.pop(key, None)
        if batch is not None:
            batch.cancel()
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._later_running:
            self._later_running.discard(key)
            self._wakeup.set()  # a later-lane slot is free
        lane = self._dirty.get(key)
        if lane == READY:
            self._ready.append(key)
            self._wakeup.set()
        elif lane is not None:
            self._queue_later(key, lane)
        self._done_since_idle += 1
        if self.on_idle is not None and not self._dirty and not self._processing:
            done, self._done_since_idle = self._done_since_idle, 0
            self.on_idle(done)

    def shutdown(self) -> None:
        for timer in (*self._timers.values(), *self._batches.values()):
            timer.cancel()
        self._timers.clear()
        self._later_timers.clear()
        self._batches.clear()
