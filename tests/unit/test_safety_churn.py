"""Issue 8, rule 7: no churn. Workers that keep failing are replaced with a per-job backoff kept in the
status (so a restart does not reset it): the first two failures at once, then 10 s, 20 s, ... after the
last failure, at most 5 min; forgotten after 10 quiet minutes."""

from __future__ import annotations

from mpijob.planner.plan import plan

from .builders import created_names, elastic, mpijob
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


def test_workers_that_keep_landing_on_a_terminating_node_are_replaced_with_the_backoff() -> None:
    # Rule 7: the scheduler keeps putting replacements on a node that is going (here the only node).
    world = _world()
    world.advance(600)  # the first workers have served for a while
    world.taint("node-1", "cloud.google.com/impending-node-termination")

    # The old workers losing their node are no churn: replaced at once, not counted. Their replacements
    # land on the same node and are signalled young: counted, replaced at once twice, then backed off
    # (without the backoff this would create pods forever: settle would find no fixed point).
    assert _creates_now(world) == 4
    status = world.job("pi")["status"]
    assert status["recentWorkerFailures"] == 4
    world.advance(19)
    assert _creates_now(world) == 0
    world.advance(1)  # 10 s * 2 after the last landing
    assert _creates_now(world) == 2
    assert world.job("pi")["status"]["recentWorkerFailures"] == 6


def test_workers_that_served_before_their_node_went_are_not_counted_as_churn() -> None:
    world = _world()
    world.add_nodes("node-2")
    world.advance(600)
    world.placement = ["node-2"]
    world.taint("node-1", "cloud.google.com/impending-node-termination")

    assert _creates_now(world) == 2

    assert "recentWorkerFailures" not in world.job("pi")["status"]
    assert len(world.kept_workers("pi")) == 2


def test_a_landing_is_counted_once_even_when_the_plan_stops_after_recording_its_decision() -> None:
    # The plan that sees a young worker's node signal lists it in the spec (first) and counts it in the
    # status (later). A reconcile cut between the two must not lose the count: the next plan, which finds the
    # worker listed already, counts it then (and only once).
    counts = []
    for cut in (False, True):
        world = _world()
        world.add_nodes("node-2")
        world.placement = ["node-2"]  # the replacements land well
        world.taint("node-1", "cloud.google.com/impending-node-termination")  # the workers are young
        made = plan(world.snapshot("pi"))
        assert made.record and made.status
        world.apply(list(made.record) if cut else list(made), world.job("pi"))
        world.settle("pi", kubelet=False, follow_requeue=False)
        counts.append(world.job("pi")["status"].get("recentWorkerFailures"))
    assert counts == [2, 2]
