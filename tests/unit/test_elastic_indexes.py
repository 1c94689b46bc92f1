"""Worker indexes of elastic jobs: gaps are allowed, survivors keep their names, new workers follow indexPolicy."""

from __future__ import annotations

import pytest

from mpijob.api.models import IndexPolicy
from mpijob.planner.indexes import new_indexes
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj

from .builders import (
    created_names,
    elastic,
    existing_children,
    foreign_pod,
    mpijob,
    running_elastic_job,
    running_status,
    snap,
    status_of,
    worker,
)
from .world import World


def _created(job: Obj, indexes: list[int], foreign: list[Obj] | None = None) -> list[str]:
    pods = [worker(job, i) for i in indexes]
    return created_names(plan(snap(job, pods, foreign=foreign or [], **existing_children(job))), "Pod")


def test_fill_gaps_takes_the_lowest_free_indexes() -> None:
    assert _created(running_elastic_job(workers=4, max_replicas=16, index_policy="FillGaps", last_index=5), [0, 2]) == [
        "pi-worker-1",
        "pi-worker-3",
    ]


def test_fill_gaps_is_the_default() -> None:
    assert _created(running_elastic_job(workers=3, max_replicas=16, last_index=9), [1, 2]) == ["pi-worker-0"]


def test_append_takes_indexes_above_the_highest_ever_used() -> None:
    assert _created(running_elastic_job(workers=4, max_replicas=16, index_policy="Append", last_index=5), [0, 2]) == [
        "pi-worker-6",
        "pi-worker-7",
    ]


def test_append_without_history_starts_above_the_current_workers() -> None:
    assert _created(running_elastic_job(workers=3, max_replicas=16, index_policy="Append"), [0, 2]) == ["pi-worker-3"]


def test_fresh_append_job_starts_at_zero() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4, index_policy="Append"))
    assert created_names(plan(snap(job)), "Pod") == ["pi-worker-0", "pi-worker-1"]


@pytest.mark.parametrize("policy", ["FillGaps", "Append"])
def test_created_indexes_are_remembered_in_status(policy: str) -> None:
    job = running_elastic_job(workers=3, max_replicas=16, index_policy=policy, last_index=4)
    status = status_of(plan(snap(job, [worker(job, 0), worker(job, 4)], **existing_children(job))))
    assert status is not None
    assert status["lastWorkerIndex"] == (4 if policy == "FillGaps" else 5)


def test_a_foreign_pod_holding_a_worker_name_is_skipped() -> None:
    assert _created(
        running_elastic_job(workers=3, max_replicas=16, index_policy="FillGaps"), [0], [foreign_pod("pi-worker-1")]
    ) == ["pi-worker-2", "pi-worker-3"]


def test_many_foreign_pods_holding_worker_names_are_all_skipped() -> None:
    foreign = [foreign_pod(f"pi-worker-{i}") for i in range(5)]
    assert _created(running_elastic_job(workers=2, max_replicas=16, index_policy="FillGaps"), [], foreign) == [
        "pi-worker-5",
        "pi-worker-6",
    ]


def test_foreign_pods_above_the_history_are_skipped_by_append() -> None:
    foreign = [foreign_pod(f"pi-worker-{i}") for i in range(3, 9)]
    assert _created(
        running_elastic_job(workers=3, max_replicas=16, index_policy="Append", last_index=2), [0, 1, 2][:2], foreign
    ) == ["pi-worker-9"]


def test_a_terminating_worker_still_holds_its_index() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4, node_termination_policy="Replace"), status=running_status())
    pods = [worker(job, 0), worker(job, 1, terminating=True, phase="Failed")]
    actions = plan(snap(job, pods, **existing_children(job)))
    assert created_names(actions, "Pod") == ["pi-worker-2"]


@pytest.mark.parametrize(
    "count,taken,blocked,policy,last,expected",
    [
        (2, [], [], IndexPolicy.FILL_GAPS, -1, [0, 1]),
        (2, [0, 2], [1], IndexPolicy.FILL_GAPS, -1, [3, 4]),
        (1, [5], [], IndexPolicy.FILL_GAPS, 9, [0]),
        (2, [0, 1], [], IndexPolicy.APPEND, 7, [8, 9]),
        (1, [12], [13], IndexPolicy.APPEND, 7, [14]),
        (0, [], [], IndexPolicy.APPEND, -1, []),
    ],
)
def test_new_indexes(
    count: int, taken: list[int], blocked: list[int], policy: IndexPolicy, last: int, expected: list[int]
) -> None:
    assert new_indexes(count, taken, lambda i: i in blocked, policy, last) == expected


@pytest.mark.parametrize("policy,regrown", [("FillGaps", "pi-worker-1"), ("Append", "pi-worker-4")])
def test_survivors_keep_their_names_through_scale_in_and_out(policy: str, regrown: str) -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 8, grace=0, index_policy=policy)))
    world.settle("pi")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")}
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    job["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-1"]
    world.settle("pi")
    assert world.worker_names("pi") == ["pi-worker-0", "pi-worker-2", "pi-worker-3"]

    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 4
    world.settle("pi")

    assert sorted(world.kept_workers("pi")) == sorted(["pi-worker-0", "pi-worker-2", "pi-worker-3", regrown])
    for name in ("pi-worker-0", "pi-worker-2", "pi-worker-3"):
        assert world.pod(name)["metadata"]["uid"] == uids[name]
    assert world.errors == []
