"""Polling with a deadline, for tests and helpers that wait on cluster state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_until(
    check: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    within: float = 60.0,
    interval: float = 0.2,
) -> T:
    """Call `check` until it returns something other than None/False and return that.

    Raises TimeoutError naming `what` after `within` seconds. The limit is meant to be generous: it
    bounds a broken run, it is not an assertion about speed.
    """
    deadline = time.monotonic() + within
    while True:
        result = await check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(interval)
