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
    `events` holds (arrival time on the monotonic clock, event type, object); a failed stream is kept in
    `error`."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.error: BaseException | None = None
        self.watch = Watch()
        self.task: asyncio.Task[None] | None = None

    async def start(self, resource_version: str, *, timeout_seconds: int = 900) -> None:
        stream = self.watch.stream(
            self.func, *self.args, resource_version=resource_version, timeout_seconds=timeout_seconds, **self.kwargs
        )
        self.task = asyncio.create_task(self._run(stream))

    async def _run(self, stream: Any) -> None:
        try:
            async for event in stream:
                self.events.append((time.monotonic(), event["type"], event["raw_object"]))
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # the caller decides whether a broken stream matters
            self.error = err

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        with contextlib.suppress(Exception):
            await self.watch.close()
