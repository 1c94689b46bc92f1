"""Events posted off the reconcile path, at the lowest priority of the client's budget.

A reconcile that awaited its Events held its worker (and the shared budget's place) until they were posted:
a new 8-worker job's `SuccessfulCreate` and `MPIJobCreated` took two tokens in the middle of the ramp of
creates that every job is waiting for, and the scale-in of hundreds of jobs queued their `WorkersLeaving`
Events in front of the marks and deletes. Here each Event is its own task, waiting at `client.LOW` priority:
it is posted at once when the budget has room, and after the creates, patches and deletes waiting at the
same time when it has not (client-go's broadcaster likewise posts Events outside the sync loop, from the
same budget). One job's Events keep their order (each waits for the one before it). Past `limit` Events in
flight, the caller waits for its Event, as before: memory stays bounded when the API server is slow.
An Event is best effort, as in Kubernetes: a failed post is logged, never retried, and an operator that
stops drops what it could not post within `drain`'s timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import aiohttp

from mpijob.executor.client import LOW, ApiError

log = logging.getLogger("mpijob.executor")

# Failures of a post that are logged and dropped (an Event never fails a reconcile).
POST_ERRORS = (ApiError, TimeoutError, aiohttp.ClientError, OSError)


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
    async def create(self, path: str, obj: Any, *, priority: int = ...) -> Any: ...


class EventPoster:
    def __init__(self, client: Creator, limit: int = 1000) -> None:
        self.client = client
        self.limit = limit
        self.pending: set[asyncio.Task[None]] = set()
        # The last Event's task of each job (by its uid): the next one of the same job waits for it.
        self._tails: dict[str, asyncio.Task[None]] = {}
        self.posted = 0
        self.failed = 0

    async def post(self, path: str, body: dict[str, Any], job: str) -> None:
        """Queues one Event of `job`; returns at once unless `limit` Events are already in flight."""
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
        if await post_event(self.client.create, path, body, priority=LOW):
            self.posted += 1
        else:
            self.failed += 1

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
        return len(late)
