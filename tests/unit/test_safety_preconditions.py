"""Fail closed on a name that changed hands: every patch of an object the job owns carries the
resourceVersion the plan read, so an object deleted and made again under the same name by someone else
between the cache read and the patch is never changed (the API server answers 409). The executor stops
the batch there and the reconcile is requeued (a conflict, not an error), to plan again on fresh data,
which sees the new object as someone else's (ResourceConflict) and leaves it alone.

Driven by the in-memory world (the real Executor against an in-memory API server, which answers 409 to a
stale resourceVersion as the real one does)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable

import pytest

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.planner.actions import Action, Defer, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Snapshot

from .builders import cond_true, elastic, mpijob
from .world import World, WorldApi

Perturb = Callable[[World], tuple[str, str]]


def _running() -> World:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, grace=0)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    return world


def _service_drifted(world: World) -> tuple[str, str]:
    world.get("Service", "pi")["spec"]["publishNotReadyAddresses"] = True  # type: ignore[index]
    return "Service", "pi"


def _pdb_behind(world: World) -> tuple[str, str]:
    world.job("pi")["spec"]["elasticPolicy"]["minReplicas"] = 2
    return "PodDisruptionBudget", c.pdb_name("pi")


def _role_drifted(world: World) -> tuple[str, str]:
    world.get("Role", c.discovery_rbac_name("pi"))["rules"] = []  # type: ignore[index]
    return "Role", c.discovery_rbac_name("pi")


def _binding_drifted(world: World) -> tuple[str, str]:
    world.get("RoleBinding", c.discovery_rbac_name("pi"))["subjects"] = []  # type: ignore[index]
    return "RoleBinding", c.discovery_rbac_name("pi")


def _suspended(world: World) -> tuple[str, str]:
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}
    return "Job", c.launcher_name("pi")


def _scaled_up(world: World) -> tuple[str, str]:
    # The discovery list changes: the launcher pod's annotation is nudged.
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    world.settle("pi", kubelet=False, max_rounds=2)
    world.kubelet()
    [launcher_pod] = [p for p in world.pods() if p["metadata"]["name"].startswith(c.launcher_name("pi") + "-")]
    return "Pod", launcher_pod["metadata"]["name"]


CASES: dict[str, Perturb] = {
    "Service": _service_drifted,
    "PodDisruptionBudget": _pdb_behind,
    "Role": _role_drifted,
    "RoleBinding": _binding_drifted,
    "launcher Job": _suspended,
    "launcher pod": _scaled_up,
}


def _plan(world: World) -> tuple[Snapshot, list[Action]]:
    """The plan whose writes go out now: after the urgent discovery writes of a deferring plan."""
    while True:
        snapshot = world.snapshot("pi")
        actions = list(plan(snapshot))
        if not any(isinstance(a, Defer) for a in actions):
            return snapshot, actions
        assert world.apply(actions, snapshot.job) is None


@pytest.mark.parametrize("case", CASES)
def test_a_patch_of_our_object_never_changes_one_made_again_under_its_name(case: str) -> None:
    world = _running()
    kind, name = CASES[case](world)
    snapshot, actions = _plan(world)
    assert [a for a in actions if isinstance(a, Patch) and (a.kind, a.name) == (kind, name)], "no patch to test"

    # Between the cache read and the patch: deleted, and made again by someone else under the same name.
    theirs = copy.deepcopy(world.get(kind, name))
    assert theirs is not None
    del world.objects[(kind, name)]
    theirs["metadata"] = {"name": name, "labels": {"app": "theirs"}}
    theirs = world.add(theirs)
    before = copy.deepcopy(theirs)

    outcome = asyncio.run(Executor(WorldApi(world)).apply(snapshot.job, actions))  # type: ignore[arg-type]

    assert world.get(kind, name) == before
    # A conflict: the reconcile is requeued to plan again on fresh data; not an error (no backoff, no crash).
    assert outcome.error is None and outcome.conflict is not None and "409" in outcome.conflict


@pytest.mark.parametrize("case", ["Service", "PodDisruptionBudget", "Role", "RoleBinding"])
def test_after_the_conflict_the_new_object_is_reported_and_left_alone(case: str) -> None:
    world = _running()
    kind, name = CASES[case](world)
    snapshot, actions = _plan(world)
    theirs = copy.deepcopy(world.get(kind, name))
    assert theirs is not None
    del world.objects[(kind, name)]
    theirs["metadata"] = {"name": name, "labels": {"app": "theirs"}}
    world.add(theirs)
    asyncio.run(Executor(WorldApi(world)).apply(snapshot.job, actions))  # type: ignore[arg-type]
    before = copy.deepcopy(world.get(kind, name))

    world.settle("pi")

    assert world.get(kind, name) == before
    assert cond_true(world.job("pi")["status"], "ResourceConflict")


def test_resuming_the_launcher_job_status_then_spec_in_one_batch_carries_our_own_version() -> None:
    # Two optimistic writes to the same Job in one reconcile (clear startTime, then unsuspend): the second
    # builds on the version the first made, so our own write is not taken for a concurrent one.
    world = _running()
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}
    world.settle("pi")
    world.get("Job", c.launcher_name("pi"))["status"]["startTime"] = "2026-03-01T11:00:00Z"  # type: ignore[index]
    world.job("pi")["spec"]["runPolicy"] = {"suspend": False}

    world.settle("pi")

    launcher = world.get("Job", c.launcher_name("pi"))
    assert launcher is not None and launcher["spec"]["suspend"] is False
    assert "startTime" not in launcher["status"]
    assert world.errors == []


def test_every_patch_of_a_whole_lifecycle_carries_a_precondition() -> None:
    # A job that starts, drifts, grows, shrinks, is suspended and resumed, and finishes: no patch it sends
    # may change an object other than the one the plan read.
    world = _running()
    for perturb in CASES.values():
        perturb(world)
        world.settle("pi")
    world.job("pi")["spec"]["runPolicy"] = {"suspend": False}
    world.settle("pi")
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    world.settle("pi")
    world.start_launcher("pi")
    world.finish_launcher("pi")
    world.settle("pi")

    patches = [a for a in world.applied if isinstance(a, Patch)]
    assert {a.kind for a in patches} >= {"MPIJob", "ConfigMap", "Service", "PodDisruptionBudget", "Role", "Job", "Pod"}
    assert [a for a in patches if a.resource_version is None] == []
