"""/healthz (--health-port): 200 while every long-running task of the operator runs, 500 naming the one that
ended (the kubelet's liveness probe then restarts a process that no longer watches or reconciles)."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from mpijob.runtime.operator import _serve_health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_fails_once_a_long_running_task_has_ended() -> None:
    async def go() -> list[tuple[int, dict[str, object]]]:
        port = _free_port()
        stop = asyncio.Event()
        informer = asyncio.create_task(stop.wait(), name="informer Pod")
        runner = await _serve_health(port, [informer])
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
