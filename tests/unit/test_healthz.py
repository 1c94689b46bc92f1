"""/healthz (--health-port): 200 while every long-running task of the operator runs, 500 naming the one that
ended (the kubelet's liveness probe then restarts a process that no longer watches or reconciles). /readyz:
503 until the informers have listed (the warm gate), 200 after, whether or not this process leads; 503 again
once a task has ended."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from mpijob.app.operator import _serve_health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_fails_once_a_long_running_task_has_ended() -> None:
    async def go() -> list[tuple[int, dict[str, object]]]:
        port = _free_port()
        stop = asyncio.Event()
        informer = asyncio.create_task(stop.wait(), name="informer Pod")
        runner = await _serve_health(port, [informer], asyncio.Event())
        answers = []
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(2):
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        answers.append((response.status, await response.json()))
                    stop.set()
                    await informer
        finally:
            await runner.cleanup()
        return answers

    assert asyncio.run(go()) == [(200, {"ok": True}), (500, {"ended": ["informer Pod"]})]


def test_readyz_waits_for_the_warm_gate_not_for_the_lease_and_fails_once_a_task_has_ended() -> None:
    async def go() -> list[tuple[int, dict[str, object]]]:
        port = _free_port()
        stop, warm = asyncio.Event(), asyncio.Event()
        # The election task of a standby runs (it keeps trying for the Lease) and never leads here.
        election = asyncio.create_task(stop.wait(), name="leader election")
        runner = await _serve_health(port, [election], warm)
        answers = []
        try:
            async with aiohttp.ClientSession() as session:

                async def ask() -> None:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                        answers.append((response.status, await response.json()))

                await ask()
                warm.set()
                await ask()
                stop.set()
                await election
                await ask()
        finally:
            await runner.cleanup()
        return answers

    assert asyncio.run(go()) == [
        (503, {"waiting": "informers listing"}),
        (200, {"ok": True}),
        (503, {"ended": ["leader election"]}),
    ]
