"""The runtime's expectations (runtime/record.py:JobRecord): a job whose last reconcile deleted pods is not
planned again until the cache shows each of them terminating or gone. Found by bench/scale.py: when the
cache was a moment behind, the next reconcile saw a deleted worker still serving and deleted it again (a
second DELETE, Event and launcher patch, in 13 of 500 jobs)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mpijob.executor.apply import Executor, Outcome
from mpijob.planner.actions import Delete
from mpijob.runtime import record as runtime
from mpijob.runtime.record import JobRecord

from .builders import foreign_pod
from .world import World, WorldApi

KEY = ("team-a", "pi")
JOB = {"metadata": {"name": "pi", "namespace": "team-a", "resourceVersion": "10"}}


class Cache:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(name)

    def config_map_version(self, namespace: str, job: str) -> None:
        return None


def _pod(uid: str, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T18:00:00Z"
    return {"metadata": meta}


def _deleted(*pods: tuple[str, str | None]) -> JobRecord:
    expectations = JobRecord()
    expectations.remember(Outcome(deleted_pods=list(pods)))
    return expectations


def test_a_job_waits_while_the_cache_shows_a_pod_it_deleted_as_still_serving() -> None:
    expectations = _deleted(("pi-worker-1", "u1"), ("pi-worker-2", "u2"))
    cache = Cache({"pi-worker-1": _pod("u1", terminating=True), "pi-worker-2": _pod("u2")})
    assert expectations.wait(KEY, JOB, cache) == pytest.approx(0.05)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "seen",
    [
        pytest.param({"pi-worker-1": _pod("u1", terminating=True)}, id="terminating"),
        pytest.param({}, id="gone"),
        pytest.param({"pi-worker-1": _pod("u9")}, id="a new pod under the name"),
    ],
)
def test_a_job_is_planned_once_the_cache_shows_its_deleted_pods_terminating_or_gone(seen: dict[str, Any]) -> None:
    expectations = _deleted(("pi-worker-1", "u1"))
    assert expectations.wait(KEY, JOB, Cache(seen)) is None  # type: ignore[arg-type]
    assert expectations.deleted is None


def test_the_wait_for_a_deleted_pod_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    expectations = _deleted(("pi-worker-1", "u1"))
    stale = Cache({"pi-worker-1": _pod("u1")})
    later = runtime.time.monotonic() + runtime.EXPECTATION_TIMEOUT + 1
    monkeypatch.setattr(runtime.time, "monotonic", lambda: later)
    assert expectations.wait(KEY, JOB, stale) is None  # type: ignore[arg-type]


def test_the_executor_reports_the_pods_it_deleted_and_not_those_found_gone() -> None:
    world = World()
    uid = world.add(foreign_pod("p"))["metadata"]["uid"]
    job = {"metadata": {"name": "pi", "namespace": world.namespace}}
    executor = Executor(WorldApi(world), post_events=False)  # type: ignore[arg-type]
    actions = [Delete("v1", "Pod", "p", uid=uid), Delete("v1", "Pod", "gone")]
    outcome = asyncio.run(executor.apply(job, actions))
    assert outcome.deleted_pods == [("p", uid)]
