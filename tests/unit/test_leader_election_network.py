"""A kube-apiserver that is briefly unreachable must not end the leader election (found by the chaos run:
a restart of the API server stopped every operator). A network error is a failed attempt."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from mpijob.runtime.operator import sturdy_lease_lock


class _Api:
    """A CoordinationV1Api whose API server refuses connections."""

    def __getattr__(self, name: str) -> Any:
        async def refused(*_: Any, **__: Any) -> Any:
            raise aiohttp.ClientConnectionError("connect call failed")

        return refused


def test_a_network_error_is_a_failed_attempt_not_the_end_of_the_election() -> None:
    async def attempt() -> Any:
        lock = sturdy_lease_lock("mpijob-operator", "ns", "me", None)  # type: ignore[arg-type]
        lock.api_instance = _Api()
        found = await lock.get("mpijob-operator", "ns")
        record = LeaderElectionRecord("me", "15", "now", "now")
        created = await lock.create("mpijob-operator", "ns", record)
        return found, created

    (ok, record), created = asyncio.run(attempt())

    assert ok is False and record.status == 503
    assert created is False


def test_the_election_keeps_trying_while_the_api_server_is_unreachable() -> None:
    from kubernetes_asyncio.leaderelection import electionconfig

    async def noop() -> None:
        return None

    async def run_briefly() -> bool:
        lock = sturdy_lease_lock("mpijob-operator", "ns", "me", None)  # type: ignore[arg-type]
        lock.api_instance = _Api()
        election = LeaderElection(electionconfig.Config(lock, 15, 10, 1, noop, noop))
        task = asyncio.create_task(election.run())
        await asyncio.sleep(0.2)
        still_running = not task.done()
        task.cancel()
        return still_running

    assert asyncio.run(run_briefly())
