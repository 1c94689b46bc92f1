"""Issue 8, rule 1: absence is not deletion.

A node or pod missing from the cache (cold cache after a leader handover, a watch that has not delivered a
new node yet, a watch gap) is confirmed with a live read before any destructive or replica-lowering
decision depends on it. The planner asks (a plan made only of ConfirmAbsence actions, writing nothing);
the runtime reads and plans again with the answers in `Snapshot.absence_checks`.
"""

from __future__ import annotations

from mpijob.planner.actions import ConfirmAbsence, Create, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.workers import MAX_CONFIRMATIONS

from .builders import (
    deleted_pods,
    elastic,
    existing_children,
    mpijob,
    node,
    patched_pods,
    running_status,
    snap,
    spec_patches,
    worker,
)
from .world import World


def _job(workers: int = 3, policy: str = "ScaleIn") -> dict:  # type: ignore[type-arg]
    return mpijob(
        workers=workers, elastic_policy=elastic(1, 4, node_termination_policy=policy), status=running_status()
    )


def _pods(job: dict) -> list[dict]:  # type: ignore[type-arg]
    return [worker(job, 0, node="node-1"), worker(job, 1, node="node-2"), worker(job, 2, node="node-2")]


def test_node_missing_from_the_cache_is_confirmed_before_anything_is_decided() -> None:
    job = _job()

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Node", "node-2")]


def test_node_the_api_server_still_has_is_not_treated_as_deleted() -> None:
    job = _job()
    checks = {("Node", "node-2"): False}  # the watch has not delivered it yet

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks=checks, **existing_children(job)))

    assert spec_patches(actions) == []
    assert patched_pods(actions) == [] and deleted_pods(actions) == []
    assert not [a for a in actions if isinstance(a, ConfirmAbsence)]


def test_node_confirmed_gone_scales_in_as_before() -> None:
    job = _job()
    checks = {("Node", "node-2"): True}

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks=checks, **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    assert sorted(deleted_pods(actions)) == ["pi-worker-1", "pi-worker-2"]


def test_leaving_worker_on_a_missing_node_waits_for_the_read_before_an_immediate_delete() -> None:
    job = mpijob(
        workers=2,
        elastic_policy=elastic(1, 4, node_termination_policy="Ignore", workers_to_delete=["pi-worker-1"]),
        status=running_status(),
    )
    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-2")]

    actions = plan(snap(job, pods, node_map={"node-1": node("node-1")}, checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Node", "node-2")]


def test_worker_missing_from_the_cache_is_not_counted_as_lost_until_confirmed() -> None:
    job = _job(workers=3)
    job["status"]["discoveredHosts"] = ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    pods = [worker(job, 0), worker(job, 1)]  # pi-worker-2 is not in the cache

    asked = plan(snap(job, pods, checks={}, **existing_children(job)))
    assert list(asked) == [ConfirmAbsence("Pod", "pi-worker-2")]

    present = plan(snap(job, pods, checks={("Pod", "pi-worker-2"): False}, **existing_children(job)))
    assert spec_patches(present) == []  # no decrement: it exists, the cache is behind

    gone = plan(snap(job, pods, checks={("Pod", "pi-worker-2"): True}, **existing_children(job)))
    [spec] = spec_patches(gone)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_live_reads_per_plan_are_bounded_whatever_the_status_says() -> None:
    job = _job(workers=1)
    job["spec"]["elasticPolicy"]["maxReplicas"] = 10_000
    job["status"]["discoveredHosts"] = [f"pi-worker-{i}" for i in range(5000)] + ["not-ours", "pi-launcher"]

    actions = plan(snap(job, [worker(job, 0)], checks={}, **existing_children(job)))

    assert len(actions) == MAX_CONFIRMATIONS
    assert all(isinstance(a, ConfirmAbsence) and a.name.startswith("pi-worker-") for a in actions)


def test_world_node_deleted_is_confirmed_by_a_read_then_scaled_in() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 4, grace=0)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    reads = world.reads

    world.remove_node("node-2")
    world.settle("pi")

    assert world.reads > reads
    assert world.replicas("pi") == 2
    assert all(world.pod(n)["spec"]["nodeName"] == "node-1" for n in world.kept_workers("pi"))
    assert not [a for a in world.applied if isinstance(a, Create | Delete | Patch) and getattr(a, "kind", "") == "Node"]
