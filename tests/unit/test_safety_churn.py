"""Issue 8, rule 7: no churn. Workers that keep failing are replaced with a per-job backoff kept in the
status (so a restart does not reset it): the first two failures at once, then 10 s, 20 s, ... after the
last failure, at most 5 min; forgotten after 10 quiet minutes.

Issue 19: a worker lost to its node (a termination taint, a cordon, the node deleted) or to a disruption
(DisruptionTarget) is no failure, however young: it is replaced at once. Its replacement cannot land on a
node with a signal (the scheduler does not place pods on tainted or cordoned nodes), so waiting would only
keep the job below its floor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mpijob.planner.plan import plan

from .builders import SPOT_TAINT, created_names, disruption_target, elastic, mpijob
from .world import World


def _world() -> World:
    world = World(placement=["node-1"])
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, node_termination_policy="Replace", grace=0)))
    world.settle("pi")
    return world


def _fail_one(world: World) -> str:
    name = world.kept_workers("pi")[0]
    pod = world.pod(name)
    pod["status"] = {"phase": "Failed", "reason": "Error", "conditions": [{"type": "Ready", "status": "False"}]}
    world._touch(pod)
    return name


def _creates_now(world: World) -> int:
    """Reconciles (and lets the kubelet act) without letting time pass; pods created meanwhile."""
    start = len(world.plans)
    world.settle("pi", follow_requeue=False)
    return sum(len(created_names(p, "Pod")) for p in world.plans[start:])


def test_the_first_failures_are_replaced_at_once_then_replacements_back_off() -> None:
    world = _world()

    _fail_one(world)
    assert _creates_now(world) == 1
    _fail_one(world)
    assert _creates_now(world) == 1

    _fail_one(world)  # the third failure in a row: 10 s before the replacement
    assert _creates_now(world) == 0
    assert world.job("pi")["status"]["recentWorkerFailures"] == 3
    world.advance(9)
    assert _creates_now(world) == 0
    world.advance(1)
    assert _creates_now(world) == 1

    _fail_one(world)  # the fourth: 20 s
    assert _creates_now(world) == 0
    world.advance(19)
    assert _creates_now(world) == 0
    world.advance(1)
    assert _creates_now(world) == 1
    assert len(world.kept_workers("pi")) == 2


def _lose(world: World, how: str) -> None:
    """One kept worker is killed by the cluster, not by a crash of its own."""
    name = world.kept_workers("pi")[0]
    pod = world.pod(name)
    if how == "graceful node shutdown":
        world.disrupt(name, "TerminationByKubelet")  # the kubelet says so, then stops it
        world.shut_down(name)
    elif how == "node shutdown, kubelet without the condition":
        world.shut_down(name)
    elif how == "node shutdown, kubelet 1.21":
        pod["status"] = {"phase": "Failed", "reason": "Shutdown", "message": "Node is shutting, evicting pods"}
        world._touch(pod)
    elif how == "node-pressure eviction":
        world.kubelet_evict(name)
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}, disruption_target("TerminationByKubelet")]
    else:
        world.disrupt(name, how)  # the condition, then a graceful delete


DISRUPTIONS = [
    "graceful node shutdown",
    "node shutdown, kubelet without the condition",
    "node shutdown, kubelet 1.21",
    "node-pressure eviction",
    "EvictionByEvictionAPI",
    "PreemptionByScheduler",
    "DeletionByTaintManager",
]


@pytest.mark.parametrize("how", DISRUPTIONS)
def test_workers_lost_to_disruptions_are_not_training_failures(how: str) -> None:
    # Issue 19: whatever killed them said so (DisruptionTarget, or the kubelet's node-shutdown reason): each
    # is replaced at once, none is counted, so no backoff ever starts (three crashes would start one).
    world = _world()
    for _ in range(5):
        _lose(world, how)
        assert _creates_now(world) == 1
        assert "recentWorkerFailures" not in world.job("pi")["status"]
    assert len(world.kept_workers("pi")) == 2


def test_backoff_is_forgotten_after_ten_quiet_minutes() -> None:
    world = _world()
    for _ in range(3):
        _fail_one(world)
        world.settle("pi")  # follows the requeue: the clock jumps over the backoff
    assert world.job("pi")["status"]["recentWorkerFailures"] == 3

    world.advance(600)
    world.settle("pi")

    assert "recentWorkerFailures" not in world.job("pi")["status"]
    _fail_one(world)
    assert _creates_now(world) == 1


def test_bad_failure_count_in_the_status_is_ignored() -> None:
    world = _world()
    world.job("pi")["status"]["recentWorkerFailures"] = "lots"
    world.job("pi")["status"]["lastWorkerFailureTime"] = "not a time"

    world.settle("pi")

    assert "recentWorkerFailures" not in world.job("pi")["status"]
    _fail_one(world)
    assert _creates_now(world) == 1


def _running_on(world: World, node: str) -> list[str]:
    return [n for n in world.kept_workers("pi") if world.pod(n)["spec"].get("nodeName") == node]


def test_workers_lost_to_a_run_of_spot_reclaims_are_replaced_at_once_and_never_counted() -> None:
    # Issue 19: spot reclaims one after the other, each taking the workers that had just landed on the newest
    # node. Rule 7 used to count a worker whose node was signalled within 2 minutes of its creation as a
    # failure: the job (minReplicas 2) backed off for minutes below its floor while healthy nodes had joined.
    world = World(placement=["node-1"])
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(2, 4, grace=0)))
    world.settle("pi")

    for reclaim in range(2, 8):
        world.advance(20)  # the workers are 20 s old
        world.add_nodes(f"node-{reclaim}")
        world.placement = [f"node-{reclaim}"]  # where the scheduler can place pods: not the tainted nodes
        world.taint(f"node-{reclaim - 1}", SPOT_TAINT)

        assert _creates_now(world) == 2, f"reclaim {reclaim - 1}"
        assert "recentWorkerFailures" not in world.job("pi")["status"]
        assert len(_running_on(world, f"node-{reclaim}")) == 2
    assert world.replicas("pi") == 2
    assert world.errors == []


def test_replacements_of_workers_lost_to_their_node_wait_for_a_healthy_node_not_for_a_backoff() -> None:
    # Churn onto doomed nodes is avoided by where replacements go: with every node tainted the scheduler
    # places none, so the replacements wait Pending, and run as soon as a healthy node joins.
    world = World(placement=["node-1"])
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(2, 4, grace=0)))
    world.settle("pi")
    world.placement = []  # the only node is tainted: nowhere to place a pod
    world.taint("node-1", SPOT_TAINT)

    assert _creates_now(world) == 2
    pending = world.kept_workers("pi")
    assert [world.pod(n)["status"]["phase"] for n in pending] == ["Pending", "Pending"]
    world.advance(40)
    world.add_nodes("node-2")
    for name in pending:
        world.schedule(name, "node-2")

    assert _creates_now(world) == 0
    assert _running_on(world, "node-2") == pending
    assert "recentWorkerFailures" not in world.job("pi")["status"]


def test_a_worker_that_crashes_on_a_node_with_a_signal_is_not_counted() -> None:
    # Lost to its node: a node going away takes its pods' processes with it, and no replacement can land
    # there (a crash loop cannot go on on a tainted node).
    world = _world()
    world.add_nodes("node-2")
    world.placement = ["node-2"]
    world.taint("node-1", SPOT_TAINT)
    for name in world.kept_workers("pi"):
        world.pod(name)["status"] = {"phase": "Failed", "reason": "Error"}
        world._touch(world.pod(name))

    assert _creates_now(world) == 2
    assert "recentWorkerFailures" not in world.job("pi")["status"]


def test_workers_that_served_before_their_node_went_are_not_counted_as_churn() -> None:
    world = _world()
    world.add_nodes("node-2")
    world.advance(600)
    world.placement = ["node-2"]
    world.taint("node-1", "cloud.google.com/impending-node-termination")

    assert _creates_now(world) == 2

    assert "recentWorkerFailures" not in world.job("pi")["status"]
    assert len(world.kept_workers("pi")) == 2


def _counts_with_and_without_a_cut(world_of: Callable[[], World], lose: Callable[[World], None]) -> list[object]:
    """recentWorkerFailures after one plan applied whole, or only its record phase (the spec patch), then
    reconciled to a fixed point without the kubelet or the clock."""
    counts = []
    for cut in (False, True):
        world = world_of()
        lose(world)
        made = plan(world.snapshot("pi"))
        assert made.record and made.status
        world.apply(list(made.record) if cut else list(made), world.job("pi"))
        world.settle("pi", kubelet=False, follow_requeue=False)
        counts.append(world.job("pi")["status"].get("recentWorkerFailures"))
    return counts


def test_a_crash_is_counted_once_even_when_the_plan_stops_after_recording_its_decision() -> None:
    # The plan that sees a ScaleIn job's failed workers lists them in the spec (first) and counts them in
    # the status (later). A reconcile cut between the two must not lose the count: the next plan, which finds
    # the workers listed already, counts them then (and only once).
    def world_of() -> World:
        world = World(placement=["node-1"])
        world.add_nodes("node-1")
        world.add(mpijob(workers=3, elastic_policy=elastic(1, 4, grace=0)))
        world.settle("pi")
        return world

    def crash(world: World) -> None:
        for name in world.kept_workers("pi")[:2]:
            world.pod(name)["status"] = {"phase": "Failed", "reason": "Error"}
            world._touch(world.pod(name))

    assert _counts_with_and_without_a_cut(world_of, crash) == [2, 2]


def test_a_node_loss_is_not_counted_whether_or_not_the_plan_stops_after_recording_its_decision() -> None:
    # Young workers (just created) on a node that gets a termination taint: no failure, cut or not.
    def world_of() -> World:
        world = _world()
        world.add_nodes("node-2")
        world.placement = ["node-2"]
        return world

    def reclaim(world: World) -> None:
        world.taint("node-1", "cloud.google.com/impending-node-termination")

    assert _counts_with_and_without_a_cut(world_of, reclaim) == [None, None]
