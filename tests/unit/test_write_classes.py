"""Every request carries its write class, and each class has its budget (`Client.bucket_for`): the writes that
take leaving workers out of discovery (URGENT) never wait behind the status writes and Events of other jobs
after a spot notice, and the executor sends exactly a plan's `leave_discovery` writes as URGENT."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from mpijob.executor.apply import Executor
from mpijob.kube.client import Client, WriteClass
from mpijob.planner.actions import Patch, Plan

JOB = {"metadata": {"name": "pi", "namespace": "team-a", "uid": "u", "resourceVersion": "1"}}
CONFIG_MAP = "/api/v1/namespaces/team-a/configmaps/pi-config"


class _Response:
    status = 200
    reason = "OK"
    headers: dict[str, str] = {}

    async def read(self) -> bytes:
        return b'{"metadata": {"resourceVersion": "2"}}'


class _Session:
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    async def request(self, method: str, url: str, **_: Any) -> _Response:
        self.paths.append(url.removeprefix("https://api"))
        return _Response()


class _Api:
    """kubernetes_asyncio's ApiClient as far as Client uses it: its session answers every request at once."""

    default_headers: dict[str, str] = {}
    cookie = None

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.configuration = SimpleNamespace(host="https://api")
        self.rest_client = SimpleNamespace(
            pool_manager=_Session(self.paths), proxy=None, proxy_headers=None, server_hostname=None
        )

    async def update_params_for_auth(self, *_: Any) -> None:
        return None

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return obj


def _drained_client(api: _Api) -> Client:
    # One token each, refilled once every 100 s: a second request of a class waits ~100 s.
    return Client(api, qps=0.01, burst=1, urgent_qps=0.01, urgent_burst=1)  # type: ignore[arg-type]


def test_an_urgent_write_does_not_wait_for_the_shared_budget() -> None:
    async def scenario() -> None:
        api = _Api()
        client = _drained_client(api)
        await client.merge_patch("/api/v1/namespaces/team-a/pods/pi-worker-0", {})  # the shared token
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.merge_patch("/api/v1/namespaces/team-a/pods/pi-launcher", {}), 0.3)
        await asyncio.wait_for(client.merge_patch(CONFIG_MAP, {}, write_class=WriteClass.URGENT), 0.3)
        assert api.paths[-1] == CONFIG_MAP

    asyncio.run(scenario())


def test_the_urgent_class_keeps_its_own_budget() -> None:
    """It is a budget, not an exemption: the class's own bucket limits it."""

    async def scenario() -> None:
        client = _drained_client(_Api())
        await client.merge_patch(CONFIG_MAP, {}, write_class=WriteClass.URGENT)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.merge_patch(CONFIG_MAP, {}, write_class=WriteClass.URGENT), 0.3)

    asyncio.run(scenario())


def test_each_class_takes_its_bucket_events_after_the_work_and_mpijobs_their_own() -> None:
    client = Client(_Api(), qps=50, burst=100)  # type: ignore[arg-type]
    job = "/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs/pi"
    assert client.bucket_for(WriteClass.URGENT, CONFIG_MAP) == (client.urgent_bucket, 0)
    assert client.bucket_for(WriteClass.NORMAL, CONFIG_MAP) == (client.bucket, 0)
    assert client.bucket_for(WriteClass.NORMAL, job) == (client.mpijob_bucket, 0)
    assert client.bucket_for(WriteClass.EVENT, "/api/v1/namespaces/team-a/events") == (client.bucket, 1)
    assert len({id(client.bucket), id(client.mpijob_bucket), id(client.urgent_bucket)}) == 3


def test_the_default_urgent_budget_is_ten_times_the_shared_one() -> None:
    client = Client(_Api(), qps=50, burst=100)  # type: ignore[arg-type]
    assert (client.urgent_bucket.qps, client.urgent_bucket.capacity) == (500, 1000)


class _Recorder:
    """A client that records the write class of each write."""

    def __init__(self) -> None:
        self.calls: list[tuple[WriteClass, str]] = []

    async def merge_patch(self, path: str, patch: Any, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        self.calls.append((write_class, path))
        return {"metadata": {"resourceVersion": "2"}}

    async def create(self, path: str, obj: Any, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        self.calls.append((write_class, path))
        return obj


def test_only_the_plans_leave_discovery_writes_are_urgent() -> None:
    client = _Recorder()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]  # a fake client
    shrink = Patch("v1", "ConfigMap", "pi-config", {"data": {}}, resource_version="1")
    plan = Plan(leave_discovery=(shrink,), mark=(Patch("v1", "Pod", "pi-worker-3", {"metadata": {}}),))

    first = asyncio.run(executor.apply(JOB, plan))
    assert first.deferred  # the shrink alone, then the job is planned again behind the queue
    # The next plan: the same ConfigMap write, now as an ordinary discovery change, and the mark.
    grow = Patch("v1", "ConfigMap", "pi-config", {"data": {}}, resource_version="2")
    asyncio.run(executor.apply(JOB, Plan(mark=(plan.mark[0],), discovery=(grow,))))

    assert client.calls == [
        (WriteClass.URGENT, CONFIG_MAP),
        (WriteClass.NORMAL, "/api/v1/namespaces/team-a/pods/pi-worker-3"),
        (WriteClass.NORMAL, CONFIG_MAP),
    ]


def test_a_plain_action_list_has_no_urgent_write() -> None:
    """Callers that pass actions rather than a Plan (tests, tools) write in the NORMAL class."""
    client = _Recorder()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]
    asyncio.run(executor.apply(JOB, [Patch("v1", "ConfigMap", "pi-config", {"data": {}})]))
    assert client.calls == [(WriteClass.NORMAL, CONFIG_MAP)]
