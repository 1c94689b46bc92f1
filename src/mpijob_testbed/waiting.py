"""Polling with a deadline: the one helper the testbed, the tests, the demo and the benchmarks wait with
(`wait_until`), and the one the testbed starts its processes with (`until_healthy`: poll a just-spawned
process's health, fail with its exit status and log tail)."""

from __future__ import annotations

import asyncio
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from mpijob_testbed import processes
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.rest import get_status

T = TypeVar("T")
Echo = Callable[[str], None]
# True when healthy; otherwise False or what it saw instead ("HTTP 503"), which the timeout error quotes.
Check = Callable[[], bool | str]

TAIL_LINES = 25
# How much of a log the tail is read from: a kubelet's log grows to many megabytes.
_TAIL_BYTES = 64 * 1024


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


def until_healthy(
    check: Check,
    *,
    what: str,
    name: str,
    pid: int,
    log: Path,
    timeout: float,
    echo: Echo,
    interval: float = 0.2,
    progress_every: float = 10.0,
) -> None:
    """Poll `check` until it returns True while process `pid` (spawned as `name`, output in `log`) runs.

    Raises TestbedError when the process ends first (with its exit status) or after `timeout` seconds (with
    the last answer); both say what was awaited and for how long, and end with the tail of the log. A long
    wait says so through `echo` every `progress_every` seconds, in the testbed's "[testbed] ..." style.
    """
    started = time.monotonic()
    deadline = started + timeout
    next_progress = started + progress_every
    last: bool | str = False
    while True:
        # Before the check: an answer while our process is gone would come from someone else.
        if processes.has_exited(pid):
            raise TestbedError(
                f"{name} {_ended(processes.exit_code(pid))} after {time.monotonic() - started:.1f}s, "
                f"while waiting for {what}; see {log}\n{log_tail(log)}"
            )
        last = check()
        if last is True:
            return
        now = time.monotonic()
        if now >= deadline:
            raise TestbedError(
                f"{name}: timed out after {timeout:g}s waiting for {what}{_answer(last)}; see {log}\n{log_tail(log)}"
            )
        if now >= next_progress:
            echo(f"[testbed] {name}: still waiting for {what} ({now - started:.0f}s of {timeout:g}s{_answer(last)})")
            next_progress = now + progress_every
        time.sleep(interval)


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> Check:
    """A `Check` that GET `url` answers 200; otherwise what it answered (`what` should name the URL)."""

    def check() -> bool | str:
        status = get_status(url, ctx)
        if status == 200:
            return True
        return f"HTTP {status}" if status is not None else "no answer"

    return check


def until_http_ok(
    url: str,
    ctx: ssl.SSLContext | None = None,
    *,
    name: str,
    pid: int,
    log: Path,
    timeout: float,
    echo: Echo,
    interval: float = 0.2,
) -> None:
    """`until_healthy` for the usual health check: GET `url` answers 200."""
    until_healthy(
        http_ok(url, ctx),
        what=f"GET {url} to answer 200",
        name=name,
        pid=pid,
        log=log,
        timeout=timeout,
        echo=echo,
        interval=interval,
    )


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log, indented under the error that quotes them."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - _TAIL_BYTES))
            text = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return "    (no log file)"
    return "\n".join("    " + line for line in text[-lines:]) or "    (empty log)"


def _ended(code: int | None) -> str:
    if code is None:
        return "exited (exit status unknown: not a child of this process)"
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _answer(last: bool | str) -> str:
    return f"; last answer: {last}" if isinstance(last, str) else ""
