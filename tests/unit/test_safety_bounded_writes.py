"""Bounded work per reconcile: a job with very many workers that is suspended, scaled down or finished with
cleanPodPolicy All gets its leaving marks and pod deletes over several reconciles, each of them bounded
(creates are bounded by the slow start, see test_safety_hostile_input), and still in the graceful order: a
worker is deleted only once it is out of discovery and carries its leaving mark.

Driven by the in-memory world (the real Executor against an in-memory API server)."""

from __future__ import annotations

import pytest

from mpijob.planner import worker_writes
from mpijob.planner.actions import Delete, Patch, RequeueAfter

from .builders import cond_true, elastic, mpijob, running_status, worker
from .world import World, is_leaving, is_terminating


def _big_world(workers: int, **job: object) -> World:
    """A running job of many workers (added directly: growing it through the slow start takes long), its
    other objects made by a first few reconciles."""
    world = World(share_pods=True)
    world.add_nodes("node-1")
    made = world.add(mpijob(workers=workers, status=running_status(), **job))  # type: ignore[arg-type]
    for i in range(workers):
        world.add(worker(made, i))
    world.settle("pi", kubelet=False, max_rounds=3)
    return world


def _drain(world: World, *, graceful: bool) -> list[tuple[int, int]]:
    """Reconciles until a plan writes nothing; (marks, deletes) of each reconcile that wrote. The pods one
    reconcile deleted go away before the next (the kubelet). With `graceful`, checks after each reconcile
    that every worker being deleted carries its leaving mark and is out of discovery."""
    per_reconcile: list[tuple[int, int]] = []
    for _ in range(200):
        start = len(world.applied)
        world.reconcile("pi")
        writes = world.applied[start:]
        if not writes:
            return per_reconcile
        marks = [a for a in writes if isinstance(a, Patch) and a.kind == "Pod" and a.patch.get("metadata")]
        deletes = [a for a in writes if isinstance(a, Delete) and a.kind == "Pod"]
        per_reconcile.append((len(marks), len(deletes)))
        if graceful:
            going = [p for p in world.workers("pi") if is_terminating(p)]
            assert all(is_leaving(p) for p in going), "a worker deleted without its leaving mark"
            assert not {p["metadata"]["name"] for p in going} & set(world.discovered("pi")), "deleted while listed"
        world.kubelet()
    raise AssertionError("the job never settled")


def test_suspending_a_10000_worker_job_deletes_its_workers_over_bounded_reconciles() -> None:
    world = _big_world(10_000, elastic_policy=elastic(1, 10_000, grace=30))
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}

    per_reconcile = _drain(world, graceful=True)

    assert world.workers("pi") == []
    assert cond_true(world.job("pi")["status"], "Suspended")
    assert max(m for m, _ in per_reconcile) <= worker_writes.MAX_MARKS_PER_RECONCILE
    assert max(d for _, d in per_reconcile) <= worker_writes.MAX_DELETES_PER_RECONCILE
    assert sum(d for _, d in per_reconcile) == 10_000
    assert len(per_reconcile) >= 10_000 // worker_writes.MAX_DELETES_PER_RECONCILE


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> int:
    """The same bounds, smaller, so a job of 2,000 workers needs as many reconciles as 10,000 do."""
    monkeypatch.setattr(worker_writes, "MAX_MARKS_PER_RECONCILE", 100)
    monkeypatch.setattr(worker_writes, "MAX_DELETES_PER_RECONCILE", 100)
    return 100


def test_scaling_a_large_job_down_marks_and_deletes_over_bounded_reconciles(small_budget: int) -> None:
    world = _big_world(2_000, elastic_policy=elastic(1, 2_000, grace=0))
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1

    per_reconcile = _drain(world, graceful=True)

    assert world.worker_names("pi") == ["pi-worker-0"]
    assert world.discovered("pi") == ["pi-worker-0"]
    assert max(max(m, d) for m, d in per_reconcile) <= small_budget
    assert sum(m for m, _ in per_reconcile) == sum(d for _, d in per_reconcile) == 1_999


def test_a_large_scale_down_with_a_grace_period_marks_in_bounded_reconciles_then_deletes(small_budget: int) -> None:
    world = _big_world(2_000, elastic_policy=elastic(1, 2_000, grace=30))
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1

    marking = _drain(world, graceful=True)

    # Everyone left discovery at once (one write); the marks follow in bounded reconciles; nobody is
    # deleted before the grace period.
    assert world.discovered("pi") == ["pi-worker-0"]
    assert sum(m for m, _ in marking) == 1_999 and sum(d for _, d in marking) == 0
    assert max(m for m, _ in marking) <= small_budget
    world.advance(30)
    deleting = _drain(world, graceful=True)
    assert world.worker_names("pi") == ["pi-worker-0"]
    assert max(d for _, d in deleting) <= small_budget


def test_cleaning_up_a_large_finished_job_deletes_over_bounded_reconciles(small_budget: int) -> None:
    world = _big_world(2_000, run_policy={"cleanPodPolicy": "All"})
    world.start_launcher("pi")
    world.finish_launcher("pi", succeeded=True)

    per_reconcile = _drain(world, graceful=False)

    assert cond_true(world.job("pi")["status"], "Succeeded")
    assert world.workers("pi") == []
    assert max(d for _, d in per_reconcile) <= small_budget
    assert len(per_reconcile) >= 2_000 // small_budget


def test_suspending_a_large_static_job_deletes_over_bounded_reconciles(small_budget: int) -> None:
    world = _big_world(2_000)
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}

    per_reconcile = _drain(world, graceful=False)

    assert world.workers("pi") == []
    assert max(d for _, d in per_reconcile) <= small_budget


def test_a_bounded_reconcile_asks_to_be_woken_for_the_rest(small_budget: int) -> None:
    world = _big_world(2_000)
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}

    actions = world.reconcile("pi")

    assert len([a for a in actions if isinstance(a, Delete) and a.kind == "Pod"]) == small_budget
    # Woken even if no watch event comes (the deleted pods' events normally come first).
    assert [a.seconds for a in actions if isinstance(a, RequeueAfter)] == [worker_writes.BUDGET_REQUEUE_SECONDS]
