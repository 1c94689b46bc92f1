"""The real executor, against the in-memory API: an Event goes out only with the write it announces."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mpijob.executor.apply import Executor
from mpijob.planner.actions import Create, Delete, Emit, Patch

from .builders import NS, foreign_pod
from .world import World, WorldApi

CREATED = Emit("Normal", "SuccessfulCreatePod", "Created Pod p")
DELETED = Emit("Normal", "SuccessfulDeletePod", "Deleted pod p: leaving the job")


def _pod(name: str = "p") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}


def test_a_create_is_announced_with_the_reason_kubernetes_controllers_use() -> None:
    world = World()
    assert world.apply([Create(_pod(), announce=(CREATED,))]) is None
    assert world.events == [Emit("Normal", "SuccessfulCreate", "Created Pod p")]


def test_a_new_jobs_creates_ride_on_its_mpijobcreated_event_and_other_reasons_keep_their_own() -> None:
    world = World()
    job_created = Emit("Normal", "MPIJobCreated", "MPIJob default/j is created.")
    lost = Emit("Normal", "WorkerLost", "x")
    made = [Emit("Normal", "SuccessfulCreatePod", f"Created Pod {n}") for n in "ab"]
    world.apply([Create(_pod("a"), announce=made[:1]), job_created, lost, Create(_pod("b"), announce=made[1:])])
    created = "MPIJob default/j is created. Created Pod a, b"
    assert world.events == [Emit("Normal", "MPIJobCreated", created), lost]


def test_creates_without_the_created_condition_keep_the_successfulcreate_event() -> None:
    world = World()
    world.apply([Emit("Normal", "MPIJobRunning", "r"), Create(_pod("a"), announce=(CREATED,))])
    assert world.events == [Emit("Normal", "MPIJobRunning", "r"), Emit("Normal", "SuccessfulCreate", "Created Pod p")]


def test_a_create_that_finds_the_object_there_is_not_announced_and_the_batch_goes_on() -> None:
    world = World()
    world.add(foreign_pod("p"))
    after = Emit("Normal", "NodeTerminating", "x")
    assert world.apply([Create(_pod(), announce=(CREATED,)), after]) is None
    assert world.events == [after]
    assert [e.code for e in world.tolerated] == [409]


def test_a_delete_of_a_gone_or_replaced_pod_is_not_announced() -> None:
    world = World()
    world.add(foreign_pod("p"))
    world.apply(
        [Delete("v1", "Pod", "gone", announce=(DELETED,)), Delete("v1", "Pod", "p", uid="old", announce=(DELETED,))]
    )
    assert world.events == []
    assert [e.code for e in world.tolerated] == [404, 409]
    assert world.pod("p")["metadata"].get("deletionTimestamp") is None


def test_a_refused_exclusive_create_stops_the_batch_before_anything_after_it() -> None:
    world = World()
    world.add(foreign_pod("p"))
    later = Patch("v1", "Pod", "p", {"metadata": {"labels": {"x": "1"}}})
    err = world.apply([Create(_pod(), exclusive=True, announce=(CREATED,)), later])
    assert err is not None and err.code == 409
    assert world.exclusive == {("Pod", "p"): None}
    assert "x" not in (world.pod("p")["metadata"].get("labels") or {})
    assert world.events == []


def test_events_of_a_failed_write_and_after_it_are_not_posted() -> None:
    world = World()
    stale = Patch("v1", "Pod", "p", {"metadata": {"labels": {"x": "1"}}}, resource_version="1", announce=(DELETED,))
    world.add(foreign_pod("p"))
    err = world.apply([stale, Emit("Normal", "After", "y")])
    assert err is not None and err.code == 409
    assert world.events == []


def test_the_events_of_writes_that_landed_are_posted_when_a_later_write_times_out() -> None:
    """A dropped connection or a timeout is not an ApiError: it fails the pass, but the spec patch before it
    landed, and the next plan reads its decisions (NodeTerminating's names) as made, never to announce them."""

    class TimingOut(WorldApi):
        async def merge_patch(self, path: str, patch: Any, **how: Any) -> Any:
            if "/pods/late" in path:
                raise TimeoutError
            return await super().merge_patch(path, patch, **how)

    world = World()
    world.add(foreign_pod("p"))
    world.add(foreign_pod("late"))
    said = Emit("Normal", "NodeTerminating", "node n is terminating")
    actions = [
        Patch("v1", "Pod", "p", {"metadata": {"labels": {"x": "1"}}}, announce=(said,)),
        Patch("v1", "Pod", "late", {"metadata": {"labels": {"x": "1"}}}, announce=(DELETED,)),
    ]
    job = {"metadata": {"name": "j", "namespace": NS}}

    with pytest.raises(TimeoutError):
        asyncio.run(Executor(TimingOut(world), post_events=True).apply(job, actions))  # type: ignore[arg-type]

    assert world.events == [said]
