"""Events posted off the reconcile path, in the client's EVENT write class.

A reconcile that awaited its Events held its worker (and the shared budget's place) until they were posted: a
new 8-worker job's `SuccessfulCreate` and `MPIJobCreated` took two tokens in the middle of the ramp of creates
that every job is waiting for, and the scale-in of hundreds of jobs queued their `WorkersLeaving` Events in
front of the marks and deletes. Here each Event is its own task, in the EVENT class (the shared budget, after
the work's writes): it is posted at once when the budget has room, and after the creates, patches and deletes
waiting at the same time when it has not; while the work keeps the budget below half its burst (a ramp of
creates) it waits, up to 30 s (`TokenBucket`). client-go's broadcaster likewise posts Events outside the sync
loop, from the same budget, but in turn with the work. One job's Events keep their order (each waits for the
one before it). Past `limit` Events in flight, the caller waits for its Event, as before: memory stays bounded
when the API server is slow.
A post that meets a loaded API server (429, 5xx, a timeout, a dropped connection) is tried again with backoff,
up to `tries` times (client-go's recorder tries 12 times, 10 s apart); the name is set here, as client-go
does, so a retry of a post that did land meets 409 instead of making a second Event. What is dropped is
counted by why (`dropped`, metric `mpijob_events_dropped_total`): `rejected` (any other 4xx, such as a
namespace being deleted), `retries` (still failing after the last try), `stopping` (not posted within
`drain`'s timeout when the operator stops). An Event never fails a reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import aiohttp

from mpijob.kube.client import ApiError, WriteClass

log = logging.getLogger("mpijob.executor")

# Failures of a post that a retry may cure (a loaded or restarting API server), and all that are logged and
# dropped (an Event never fails a reconcile).
TRANSIENT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)
POST_ERRORS = (ApiError, *TRANSIENT_ERRORS)
# Why an Event was not posted: the label values of mpijob_events_dropped_total.
REJECTED, RETRIES, STOPPING = "rejected", "retries", "stopping"
DROP_REASONS = (REJECTED, RETRIES, STOPPING)


async def post_event(create: Callable[..., Awaitable[Any]], path: str, body: dict[str, Any], **how: Any) -> bool:
    """Posts one Event; False (logged) when it could not. An Event is best effort: never fail a reconcile on
    it. A timeout or a dropped connection too: the writes it announces are done, and failing would back the
    job off for nothing."""
    try:
        await create(path, body, **how)
    except POST_ERRORS as err:
        log.warning("could not post event %s: %s", body.get("reason"), err or type(err).__name__)
        return False
    return True


class Creator(Protocol):
    async def create(self, path: str, obj: Any, *, write_class: WriteClass = ...) -> Any: ...


class EventPoster:
    def __init__(self, client: Creator, limit: int = 1000, tries: int = 6, first_wait: float = 0.5) -> None:
        self.client = client
        self.limit = limit
        self.tries = tries
        self.first_wait = first_wait  # doubled after each failed try: 0.5 s .. 8 s, ~15 s in all
        self.pending: set[asyncio.Task[None]] = set()
        # The last Event's task of each job (by its uid): the next one of the same job waits for it.
        self._tails: dict[str, asyncio.Task[None]] = {}
        self.posted = 0
        self.retried = 0
        self.dropped: Counter[str] = Counter()  # why -> Events not posted

    async def post(self, path: str, body: dict[str, Any], job: str) -> None:
        """Queues one Event of `job`; returns at once unless `limit` Events are already in flight."""
        body = _named(body)
        before = self._tails.get(job)
        if len(self.pending) >= self.limit:
            await self._send(path, body, before)
            return
        task = asyncio.create_task(self._send(path, body, before), name=f"event {body.get('reason')}")
        self.pending.add(task)
        self._tails[job] = task
        task.add_done_callback(partial(self._done, job))

    async def _send(self, path: str, body: dict[str, Any], before: asyncio.Task[None] | None) -> None:
        if before is not None and not before.done():
            await asyncio.wait([before])
        why = await self._tries(path, body)
        if why is None:
            self.posted += 1
        else:
            self.dropped[why] += 1

    async def _tries(self, path: str, body: dict[str, Any]) -> str | None:
        """Posts `body`, trying again while the API server is loaded; None once posted, else why not."""
        wait = self.first_wait
        error: Exception | None = None
        for attempt in range(1, self.tries + 1):
            try:
                await self.client.create(path, body, write_class=WriteClass.EVENT)
                return None
            except ApiError as err:
                if err.status == 409 and attempt > 1:
                    return None  # an earlier try landed after all: the name is ours
                if err.status != 429 and err.status < 500:
                    log.warning("event %s rejected: %s", body.get("reason"), err)
                    return REJECTED
                error = err
            except TRANSIENT_ERRORS as err:
                error = err
            if attempt < self.tries:
                self.retried += 1
                await asyncio.sleep(wait * random.uniform(0.8, 1.2))  # jitter
                wait *= 2
        log.warning(
            "event %s dropped after %d tries: %s", body.get("reason"), self.tries, error or type(error).__name__
        )
        return RETRIES

    def _done(self, job: str, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if self._tails.get(job) is task:
            del self._tails[job]

    async def drain(self, seconds: float) -> int:
        """Waits up to `seconds` for the Events in flight, then drops the rest; how many were dropped."""
        if not self.pending:
            return 0
        _, late = await asyncio.wait(set(self.pending), timeout=seconds)
        for task in late:
            task.cancel()
        if late:
            log.warning("stopping: %d Event(s) not posted", len(late))
            await asyncio.gather(*late, return_exceptions=True)
            self.dropped[STOPPING] += len(late)
        return len(late)


def _named(body: dict[str, Any]) -> dict[str, Any]:
    """The Event with its name set here, `<object>.<nanoseconds, hex><random>` like client-go's recorder
    (plus a random tail: two Events of one job in the same nanosecond), so that a retry cannot double it."""
    meta = body.get("metadata") or {}
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or "name" in meta:
        return body
    name = f"{prefix}{time.time_ns():x}{random.getrandbits(16):04x}"
    rest = {k: v for k, v in meta.items() if k != "generateName"}
    return {**body, "metadata": {**rest, "name": name}}
