"""The writes that take leaving workers out of discovery have their own budget (`client.UrgentLane`): after a
spot notice on a node with many jobs, they never wait behind the status writes and Events of other jobs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from mpijob.executor.apply import Executor
from mpijob.executor.client import Client, UrgentLane
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
    # One token each, refilled once every 100 s: a second request on a lane waits ~100 s.
    client = Client(api, qps=0.01, burst=1, urgent_qps=0.01, urgent_burst=1)  # type: ignore[arg-type]
    return client


def test_an_urgent_write_does_not_wait_for_the_shared_budget() -> None:
    async def scenario() -> None:
        api = _Api()
        client = _drained_client(api)
        await client.merge_patch("/api/v1/namespaces/team-a/pods/pi-worker-0", {})  # the shared token
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.merge_patch("/api/v1/namespaces/team-a/pods/pi-launcher", {}), 0.3)
        await asyncio.wait_for(UrgentLane(client).merge_patch(CONFIG_MAP, {}), 0.3)
        assert api.paths[-1] == CONFIG_MAP

    asyncio.run(scenario())


def test_the_urgent_lane_keeps_its_own_budget() -> None:
    """It is a budget, not an exemption: the lane's own bucket limits it."""

    async def scenario() -> None:
        client = _drained_client(_Api())
        lane = UrgentLane(client)
        await lane.merge_patch(CONFIG_MAP, {})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lane.merge_patch(CONFIG_MAP, {}), 0.3)

    asyncio.run(scenario())


def test_the_default_urgent_budget_is_ten_times_the_shared_one() -> None:
    client = Client(_Api(), qps=50, burst=100)  # type: ignore[arg-type]
    assert (client.urgent_bucket.qps, client.urgent_bucket.capacity) == (500, 1000)


class _Lanes:
    """Records which lane each write took."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def lane(self, name: str) -> Any:
        calls = self.calls

        class Lane:
            async def merge_patch(self, path: str, patch: Any) -> Any:
                calls.append((name, path))
                return {"metadata": {"resourceVersion": "2"}}

            async def create(self, path: str, obj: Any) -> Any:
                calls.append((name, path))
                return obj

        return Lane()


def _executor(lanes: _Lanes) -> Executor:
    return Executor(lanes.lane("shared"), post_events=False, urgent=lanes.lane("urgent"))


def test_only_the_plans_leave_discovery_writes_take_the_urgent_lane() -> None:
    lanes = _Lanes()
    shrink = Patch("v1", "ConfigMap", "pi-config", {"data": {}}, resource_version="1")
    plan = Plan(leave_discovery=(shrink,), mark=(Patch("v1", "Pod", "pi-worker-3", {"metadata": {}}),))

    first = asyncio.run(_executor(lanes).apply(JOB, plan))
    assert first.deferred  # the shrink alone, then the job is planned again behind the queue
    # The next plan: the same ConfigMap write, now as an ordinary discovery change, and the mark.
    grow = Patch("v1", "ConfigMap", "pi-config", {"data": {}}, resource_version="2")
    asyncio.run(_executor(lanes).apply(JOB, Plan(mark=(plan.mark[0],), discovery=(grow,))))

    assert lanes.calls == [
        ("urgent", CONFIG_MAP),
        ("shared", "/api/v1/namespaces/team-a/pods/pi-worker-3"),
        ("shared", CONFIG_MAP),
    ]


def test_a_plain_action_list_takes_no_urgent_lane() -> None:
    """Callers that pass actions rather than a Plan (tests, tools) keep one lane."""
    lanes = _Lanes()
    asyncio.run(_executor(lanes).apply(JOB, [Patch("v1", "ConfigMap", "pi-config", {"data": {}})]))
    assert lanes.calls == [("shared", CONFIG_MAP)]
