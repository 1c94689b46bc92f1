"""The executor stops at Defer: the urgent writes before it go out, nothing after it does."""

from __future__ import annotations

import asyncio
from typing import Any

from mpijob.executor.apply import Executor
from mpijob.planner.actions import Defer, Emit, Patch


class RecordingClient:
    """Records requests; answers patches with a new resourceVersion (a stand-in for the API server)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def merge_patch(self, path: str, patch: Any, **_: Any) -> Any:
        self.calls.append(("PATCH", path))
        return {"metadata": {"resourceVersion": "43"}}

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        self.calls.append(("POST", path))
        return obj


def test_executor_applies_the_urgent_writes_and_stops_at_defer() -> None:
    client = RecordingClient()
    job = {"metadata": {"name": "pi", "namespace": "team-a", "uid": "u", "resourceVersion": "1"}}
    actions = [
        Patch("v1", "ConfigMap", "pi-config", {"data": {}}, resource_version="42"),
        Defer(),
        Patch("kubeflow.org/v2beta1", "MPIJob", "pi", {"spec": {}}, resource_version="1"),
        Emit("Normal", "NodeTerminating", "x"),
    ]

    outcome = asyncio.run(Executor(client, post_events=True).apply(job, actions))  # type: ignore[arg-type]

    assert client.calls == [("PATCH", "/api/v1/namespaces/team-a/configmaps/pi-config")]
    assert outcome.deferred
    assert outcome.config_map_resource_version == "43"
    assert outcome.writes == 1


class TimingOutEvents(RecordingClient):
    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        if path.endswith("/events"):
            raise TimeoutError
        return await super().create(path, obj)


def test_an_event_that_times_out_does_not_fail_the_writes_it_announces() -> None:
    client = TimingOutEvents()
    job = {"metadata": {"name": "pi", "namespace": "team-a", "uid": "u", "resourceVersion": "1"}}
    actions = [Patch("v1", "ConfigMap", "pi-config", {"data": {}}), Emit("Normal", "NodeTerminating", "x")]

    outcome = asyncio.run(Executor(client, post_events=True).apply(job, actions))  # type: ignore[arg-type]

    assert outcome.writes == 1 and outcome.error is None
