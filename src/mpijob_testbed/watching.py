"""A real watch stream recorded in the background: what the tests and the benchmarks observe changes with."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.watch import Watch


class WatchRecorder:
    """Every event of one watch (`func` is a kubernetes_asyncio list call, e.g. list_namespaced_pod), opened
    at the resourceVersion of a list taken before the caller acts, so nothing in between is missed.
    `events` holds (arrival time on the monotonic clock, event type, object). A stream the server ends before
    `timeout_seconds` is opened again from the last resourceVersion seen (`resumed` counts it: a 2-core
    testbed under a burst closes slow watchers); a failed stream (410 Gone, any error) is kept in `error`."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.error: BaseException | None = None
        self.resumed = 0
        self.watch = Watch()
        self.task: asyncio.Task[None] | None = None

    async def start(self, resource_version: str, *, timeout_seconds: int = 900) -> None:
        self.task = asyncio.create_task(self._run(resource_version, time.monotonic() + timeout_seconds))

    async def _run(self, resource_version: str, until: float) -> None:
        try:
            opened = 0
            while (left := int(until - time.monotonic())) > 0:
                self.resumed, opened = opened, opened + 1
                stream = self.watch.stream(
                    self.func, *self.args, resource_version=resource_version, timeout_seconds=left, **self.kwargs
                )
                async for event in stream:
                    obj = event["raw_object"]
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    self.events.append((time.monotonic(), event["type"], obj))
                await self.watch.close()
                self.watch = Watch()
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # the caller decides whether a broken stream matters
            self.error = err

    def raise_if_broken(self, what: str) -> None:
        """For a caller waiting on the events: a failed stream fails it now, not at its own timeout."""
        if self.error is not None:
            raise RuntimeError(f"the watch of {what} failed: {self.error!r}") from self.error

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        with contextlib.suppress(Exception):
            await self.watch.close()
