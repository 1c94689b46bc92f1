"""A kube-apiserver that is briefly unreachable must not end the leader election (found by the chaos run:
a restart of the API server stopped every operator). A network error is a failed attempt."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from mpijob.app.operator import sturdy_lease_lock


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


class _Leases:
    """A CoordinationV1Api over one in-memory Lease with a resourceVersion, as the API server keeps it."""

    def __init__(self) -> None:
        from kubernetes_asyncio.client import V1Lease, V1LeaseSpec, V1ObjectMeta

        self.lease = V1Lease(metadata=V1ObjectMeta(name="l", resource_version="1"), spec=V1LeaseSpec())
        self.reads = 0
        self.writes = 0

    async def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        import copy

        self.reads += 1
        return copy.deepcopy(self.lease)

    async def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        import copy

        from kubernetes_asyncio.client.exceptions import ApiException

        self.writes += 1
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self.lease = copy.deepcopy(body)
        for field in ("acquire_time", "renew_time"):  # the API server answers with timestamps, as it parses them
            value = getattr(self.lease.spec, field)
            if isinstance(value, str):
                setattr(self.lease.spec, field, datetime.fromisoformat(value.replace("Z", "+00:00")))
        self.lease.metadata.resource_version = str(int(self.lease.metadata.resource_version) + 1)
        return copy.deepcopy(self.lease)


def test_the_leader_renews_with_one_request_and_reads_again_after_a_conflict() -> None:
    async def renewals() -> tuple[int, int, bool, int]:
        lock = sturdy_lease_lock("l", "ns", "me", None)  # type: ignore[arg-type]
        api = _Leases()
        lock.api_instance = api
        election = LeaderElection(_config(lock))
        assert await election.try_acquire_or_renew()  # first: read, then write
        for _ in range(3):
            assert await election.try_acquire_or_renew()  # renewals: a write each, no read
        steady = (api.reads, api.writes)
        # Someone else writes the Lease (e.g. takes it over): our optimistic write conflicts, then we read.
        api.lease.metadata.resource_version = "100"
        api.lease.spec.holder_identity = "other"
        conflicted = not await election.try_acquire_or_renew()
        await election.try_acquire_or_renew()
        return steady[0], steady[1], conflicted, api.reads

    reads, writes, conflicted, reads_after = asyncio.run(renewals())

    assert (reads, writes) == (1, 4)
    assert conflicted
    assert reads_after == 2  # the Lease was read again, not overwritten blindly


def _config(lock: Any) -> Any:
    from kubernetes_asyncio.leaderelection import electionconfig

    async def noop() -> None:
        return None

    return electionconfig.Config(lock, 15, 10, 3, noop, noop)
