"""The work queue of job keys: one priority queue, after controller-runtime's (pkg/controller/priorityqueue).

Priorities, highest first: SIGNAL, DISCOVERY, NORMAL, LOW (what each is for: below). The rules:
- one entry per key: a re-add keeps the higher priority and the earlier ready time;
- `get` takes the highest priority that is ready (due), first in first out within it; a delayed key joins
  the back of its priority when it comes due;
- a key is never processed twice at once: added during its pass, it is queued again when `done`;
- admission: passes below DISCOVERY hold at most `limit` reconcilers, so the rest of hundreds of jobs'
  passes, waiting on the shared QPS budget, never take the reconcilers the next signal needs;
- `add_rate_limited`: exponential backoff by the key's failures in a row (counted by the caller: the job's
  record, runtime/record.py), at the priority given.
Why this order: docs/design.md, "The order of work".
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

# Priorities, highest first. SIGNAL: an event that can change who is in a launcher's discovery (a node
# signal, a pod going, someone's edit of the MPIJob: runtime/signals.py). DISCOVERY: the rest of a pass cut
# before its launcher nudges (`Plan.urgent_rest`). NORMAL: everything else. LOW: the startup sweep, the
# events of the first list, and a new job's objects nothing waits for (`Plan.settle`).
SIGNAL, DISCOVERY, NORMAL, LOW = 3, 2, 1, 0


@dataclass
class _Entry:
    priority: int
    ready_at: float
    # Its item in `_ready` or `_waiting` carries this seq; an item with another one is stale (the key was
    # pushed again since) and is skipped when it comes up.
    seq: int


class WorkQueue:
    def __init__(
        self,
        limit: int | None = None,
        base_delay: float = 0.05,
        max_delay: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # At most this many passes below DISCOVERY run at once; None: no limit.
        self.limit = limit
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._clock = clock
        # Every queued key's entry; a heap of the ready ones (highest priority, then oldest push, first) and
        # one of the delayed ones (earliest first), both with stale items (see _Entry.seq); the ready keys.
        self._pending: dict[Hashable, _Entry] = {}
        self._ready: list[tuple[int, int, Hashable]] = []  # (-priority, seq, key)
        self._waiting: list[tuple[float, int, Hashable]] = []  # (ready_at, seq, key)
        self._ready_keys: set[Hashable] = set()
        # Keys being processed -> the priority they were taken at; and what was added for them meanwhile.
        self._processing: dict[Hashable, int] = {}
        self._again: dict[Hashable, tuple[int, float]] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        # Called with how many keys were done since the queue last had nothing ready or running, each time it
        # has nothing again (runtime/heap.py: a burst's freed heap is returned then).
        self.on_idle: Callable[[int], None] | None = None
        self._done_since_idle = 0

    def __len__(self) -> int:
        """Keys ready to be taken (delayed ones are not work yet)."""
        self._promote()
        return len(self._ready_keys)

    def queued(self) -> int:
        """Keys queued, ready or delayed."""
        return len(self._pending)

    def busy(self) -> bool:
        """Keys ready or being reconciled."""
        return bool(self._ready_keys or self._processing)

    def add(self, key: Hashable, priority: int = NORMAL, delay: float = 0.0) -> None:
        """Queues `key` at `priority`, due in `delay` seconds; merged with what is queued for it already."""
        ready_at = self._clock() + max(0.0, delay)
        if key in self._processing:  # queued when its pass is done
            old = self._again.get(key, (priority, ready_at))
            self._again[key] = (max(old[0], priority), min(old[1], ready_at))
            return
        entry = self._pending.get(key)
        if entry is not None:
            priority, ready_at = max(priority, entry.priority), min(ready_at, entry.ready_at)
            if priority == entry.priority and (key in self._ready_keys or ready_at == entry.ready_at):
                return  # the merge changes nothing: the entry keeps its place
        self._push(key, priority, ready_at)

    def add_rate_limited(self, key: Hashable, priority: int = NORMAL, failures: int = 0) -> float:
        """Adds `key` after its exponential backoff for `failures` earlier failures in a row; returns the
        delay."""
        delay = float(min(self.base_delay * (2 ** min(failures, 64)), self.max_delay))
        self.add(key, priority, delay)
        return delay

    def get_nowait(self) -> tuple[Hashable, int] | None:
        """The next key and its priority, now being processed; None when nothing may be taken now."""
        self._promote()
        while self._ready:
            _, seq, key = self._ready[0]
            entry = self._current(key, seq)
            if entry is None:
                heapq.heappop(self._ready)
                continue
            if not self._admits(entry.priority):
                return None  # and nothing behind it is: it is of this priority or lower
            heapq.heappop(self._ready)
            del self._pending[key]
            self._ready_keys.discard(key)
            self._processing[key] = entry.priority
            return key, entry.priority
        return None

    def _admits(self, priority: int) -> bool:
        """The admission rule: a pass below DISCOVERY starts only while fewer than `limit` such passes run."""
        if priority >= DISCOVERY or self.limit is None:
            return True
        return sum(1 for p in self._processing.values() if p < DISCOVERY) < self.limit

    async def get(self) -> tuple[Hashable, int]:
        while (taken := self.get_nowait()) is None:
            self._wakeup.clear()
            await self._wakeup.wait()
        return taken

    def done(self, key: Hashable) -> None:
        """The key's pass is over: what was added for it meanwhile is queued now."""
        if self._processing.pop(key) < DISCOVERY:
            self._wakeup.set()  # an admission slot is free
        again = self._again.pop(key, None)
        if again is not None:
            self._push(key, *again)
        self._done_since_idle += 1
        if self.on_idle is not None and not self._ready_keys and not self._processing:
            done, self._done_since_idle = self._done_since_idle, 0
            self.on_idle(done)

    def take_pending(self) -> list[Hashable]:
        """Every queued key, ready or delayed, removed without a pass (tests read what events queued)."""
        keys = list(self._pending)
        self._pending.clear()
        self._ready_keys.clear()
        self._ready.clear()
        self._waiting.clear()
        return keys

    def shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _push(self, key: Hashable, priority: int, ready_at: float) -> None:
        """A new entry for `key` (any older item of it goes stale), ready or delayed by its time."""
        seq = next(self._seq)
        self._pending[key] = _Entry(priority, ready_at, seq)
        if ready_at <= self._clock():
            heapq.heappush(self._ready, (-priority, seq, key))
            self._ready_keys.add(key)
            self._wakeup.set()
        else:
            self._ready_keys.discard(key)
            heapq.heappush(self._waiting, (ready_at, seq, key))
            self._arm()

    def _current(self, key: Hashable, seq: int) -> _Entry | None:
        """The key's entry if a heap item with `seq` is its latest push; None for a stale item."""
        entry = self._pending.get(key)
        return entry if entry is not None and entry.seq == seq else None

    def _promote(self) -> None:
        """Delayed entries whose time has come join the ready ones (at the back of their priority)."""
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            _, seq, key = heapq.heappop(self._waiting)
            entry = self._current(key, seq)
            if entry is not None:
                self._push(key, entry.priority, entry.ready_at)

    def _arm(self) -> None:
        """One timer, for the earliest delayed entry: it wakes the reconcilers waiting in `get`."""
        while self._waiting and self._current(self._waiting[0][2], self._waiting[0][1]) is None:
            heapq.heappop(self._waiting)
        if not self._waiting:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test drives the clock): get_nowait promotes
        when = loop.time() + max(0.0, self._waiting[0][0] - self._clock())
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        # The handle's own `when()` is asyncio's, not uvloop's (the operator's loop): the time is kept here.
        self._timer, self._timer_at = loop.call_at(when, self._fire), when

    def _fire(self) -> None:
        self._timer = None
        self._promote()
        if self._ready_keys:
            self._wakeup.set()
        self._arm()
