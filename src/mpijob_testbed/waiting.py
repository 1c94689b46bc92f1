"""Polling with a deadline: the one helper the testbed, the tests, the demo and the benchmarks wait with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_until(
    check: Callable[[], Awaitable[T]],
    *,
    what: str,
    within: float = 60.0,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `check` until it returns something truthy and return that. An exception of a `retry_on` type
    counts as "not yet" (an object not created yet, a transient API error).

    Raises TimeoutError naming `what` and the last answer after `within` seconds. The limit is meant to be
    generous: it bounds a broken run, it is not an assertion about speed.
    """
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        try:
            result = await check()
        except retry_on as err:
            last = err
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {within:g}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)


async def seconds_until(
    check: Callable[[], Awaitable[Any]], *, what: str, within: float = 60.0, interval: float = 0.2
) -> float:
    """`wait_until`, returning how long it took (the demo's and the benchmarks' timings)."""
    started = time.monotonic()
    await wait_until(check, what=what, within=within, interval=interval)
    return time.monotonic() - started
