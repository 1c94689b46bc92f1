"""Issue 8, rule 8: the floor holds on soft signals.

A cordon alone (spec.unschedulable) may scale a job in down to minReplicas, never below: workers beyond the
floor on a cordoned node keep serving until as many replacements run (make before break). Only a hard
signal (node deleted, a termination taint, out-of-service) removes serving workers below the floor.
"""

from __future__ import annotations

from mpijob.planner.plan import plan

from .builders import (
    SPOT_TAINT,
    cond,
    created_names,
    elastic,
    emits,
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


def _at_floor(policy: str = "ScaleIn") -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    job = mpijob(workers=2, elastic_policy=elastic(2, 4, node_termination_policy=policy), status=running_status())
    return job, [worker(job, 0, node="node-1"), worker(job, 1, node="node-1")]


def test_cordon_at_the_floor_removes_no_serving_worker_and_creates_replacements_first() -> None:
    job, pods = _at_floor()
    nodes = {"node-1": node("node-1", unschedulable=True), "node-2": node("node-2")}

    actions = plan(snap(job, pods, node_map=nodes, **existing_children(job)))

    assert patched_pods(actions) == []  # nobody marked leaving
    assert spec_patches(actions) == []  # neither listed nor replicas lowered
    assert len(created_names(actions, "Pod")) == 2
    [held] = emits(actions, "Normal", "FloorHeld")
    assert "pi-worker-0" in held.message and "pi-worker-1" in held.message


def test_replace_policy_on_cordon_at_the_floor_also_holds() -> None:
    job, pods = _at_floor("Replace")
    nodes = {"node-1": node("node-1", unschedulable=True), "node-2": node("node-2")}

    actions = plan(snap(job, pods, node_map=nodes, **existing_children(job)))

    assert patched_pods(actions) == []
    assert spec_patches(actions) == []
    assert len(created_names(actions, "Pod")) == 2


def test_termination_taint_at_the_floor_still_removes_at_once() -> None:
    job, pods = _at_floor()
    nodes = {"node-1": node("node-1", taints=[SPOT_TAINT]), "node-2": node("node-2")}

    actions = plan(snap(job, pods, node_map=nodes, **existing_children(job)))

    assert sorted(patched_pods(actions)) == ["pi-worker-0", "pi-worker-1"]


def test_cordon_above_the_floor_scales_in_down_to_the_floor_only() -> None:
    job = mpijob(workers=4, elastic_policy=elastic(3, 4), status=running_status())
    pods = [worker(job, i, node="node-1" if i < 2 else "node-2") for i in range(4)]
    nodes = {"node-1": node("node-1", unschedulable=True), "node-2": node("node-2")}

    actions = plan(snap(job, pods, node_map=nodes, **existing_children(job)))

    # One of the two cordoned workers may go (4 -> 3 = minReplicas); the other is held and replaced first.
    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert len(spec.patch["spec"]["elasticPolicy"]["workersToDelete"]) == 1
    assert len(patched_pods(actions)) == 1
    assert len(created_names(actions, "Pod")) == 1


def _serving_at_the_floor(*nodes: str) -> World:
    """Job "pi" at its floor (2 of 2..4 workers, grace 0) placed on node-1, its launcher running."""
    world = World(placement=["node-1"])
    world.add_nodes(*nodes)
    world.add(mpijob(workers=2, elastic_policy=elastic(2, 4, grace=0)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    return world


def test_cordon_at_the_floor_never_takes_discovery_below_min_replicas_and_converges() -> None:
    world = _serving_at_the_floor("node-1", "node-2")
    old = set(world.worker_names("pi"))
    assert len(world.discovered("pi")) == 2

    world.cordon("node-1")
    world.placement[:] = ["node-2"]
    for _ in range(20):
        world.reconcile("pi")
        assert len(world.discovered("pi")) >= 2, "a cordon took the job below minReplicas"
        world.kubelet()
        assert len(world.discovered("pi")) >= 2, "a cordon took the job below minReplicas"
    world.settle("pi")

    assert world.replicas("pi") == 2
    assert set(world.kept_workers("pi")).isdisjoint(old)
    assert len(world.kept_workers("pi")) == 2
    assert all(world.pod(n)["spec"]["nodeName"] == "node-2" for n in world.kept_workers("pi"))
    assert world.workers_to_delete("pi") == []


def test_cordon_with_no_room_elsewhere_keeps_the_workers_serving() -> None:
    world = _serving_at_the_floor("node-1")
    old = sorted(world.worker_names("pi"))

    world.cordon("node-1")
    world.placement[:] = []  # replacements stay Pending (nowhere to go)
    world.settle("pi")

    assert sorted(world.discovered("pi")) == old
    assert world.replicas("pi") == 2


def test_a_condition_says_when_the_floor_cannot_be_held_and_when_it_holds_again() -> None:
    # Issue 8, rule 7 (the condition part): a termination taint at the floor removes the workers at once;
    # while their replacements cannot be placed, BelowMinReplicas is True, then False.
    world = _serving_at_the_floor("node-1", "node-2")
    assert cond(world.job("pi")["status"], "BelowMinReplicas") is None

    world.taint("node-1", SPOT_TAINT)
    world.placement[:] = []
    world.settle("pi")
    below = cond(world.job("pi")["status"], "BelowMinReplicas")
    assert below is not None and below["status"] == "True" and "0 of minReplicas 2" in below["message"]

    world.placement[:] = ["node-2"]
    for name in world.worker_names("pi"):
        if not world.pod(name)["spec"].get("nodeName"):
            world.schedule(name, "node-2")
    world.settle("pi")
    held = cond(world.job("pi")["status"], "BelowMinReplicas")
    assert held is not None and held["status"] == "False"
