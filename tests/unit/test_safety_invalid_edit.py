"""Issue 8, rule 3: a started job is never finished by a bad edit.

An edit that makes a running job's spec invalid (admitted under an older CRD, or while the operator was
down) is reported in an `InvalidSpec` condition and a Warning Event naming the field; the job is not
marked Failed, nothing is created or deleted, and fixing the spec resumes the job with the same pods.
"""

from __future__ import annotations

import copy

from mpijob.planner.actions import Create, Delete
from mpijob.planner.plan import plan

from .builders import (
    cond,
    cond_true,
    elastic,
    emits,
    existing_children,
    mpijob,
    running_status,
    snap,
    status_of,
    worker,
)
from .world import World


def _bad_edit(job: dict) -> dict:  # type: ignore[type-arg]
    out = copy.deepcopy(job)
    out["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    return out


def test_invalid_edit_of_a_running_job_is_reported_not_failed() -> None:
    job = _bad_edit(mpijob(workers=2, status=running_status()))
    pods = [worker(job, 0), worker(job, 1)]

    actions = plan(snap(job, pods, **existing_children(job)))

    status = status_of(actions)
    assert status is not None
    assert not cond_true(status, "Failed")
    assert "completionTime" not in status or status["completionTime"] is None
    invalid = cond(status, "InvalidSpec")
    assert invalid is not None and invalid["status"] == "True"
    assert "spec.mpiReplicaSpecs.Launcher.replicas" in invalid["message"]
    [warning] = emits(actions, "Warning", "ValidationError")
    assert "spec.mpiReplicaSpecs.Launcher.replicas" in warning.message
    assert not [a for a in actions if isinstance(a, Create | Delete)]
    # `state` keeps what the last valid plan said (kubectl get still shows Running).
    assert status.get("state") in (None, "Running")


def test_invalid_edit_with_unparseable_spec_of_a_running_job_touches_nothing() -> None:
    job = mpijob(workers=2, status=running_status())
    job["spec"]["slotsPerWorker"] = -3
    pods = [worker(job, 0), worker(job, 1)]

    actions = plan(snap(job, pods, **existing_children(job)))

    status = status_of(actions)
    assert status is not None and not cond_true(status, "Failed")
    assert cond_true(status, "InvalidSpec")
    assert "spec.slotsPerWorker" in cond(status, "InvalidSpec")["message"]  # type: ignore[index]
    assert not [a for a in actions if isinstance(a, Create | Delete)]


def test_invalid_edit_reported_once_then_no_writes() -> None:
    job = _bad_edit(mpijob(workers=2, status=running_status()))
    pods = [worker(job, 0), worker(job, 1)]
    first = status_of(plan(snap(job, pods, **existing_children(job))))
    job["status"] = first

    assert list(plan(snap(job, pods, **existing_children(job)))) == []


def test_never_started_invalid_job_still_fails_as_before() -> None:
    job = _bad_edit(mpijob(workers=2))

    status = status_of(plan(snap(job)))

    assert status is not None and cond_true(status, "Failed")
    assert cond(status, "Failed")["reason"] == "InvalidSpec"  # type: ignore[index]


def test_bad_edit_of_a_running_elastic_job_then_fix_keeps_every_worker_and_resumes() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 4, grace=0), run_policy={"cleanPodPolicy": "All"}))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")}
    assert len(before) == 3
    assert cond_true(world.job("pi")["status"], "Running")
    written = len(world.applied)

    # The edit (admitted by an older CRD): maxReplicas below minReplicas.
    world.job("pi")["spec"]["elasticPolicy"]["maxReplicas"] = 0
    world.job("pi")["spec"]["elasticPolicy"]["minReplicas"] = 2
    for _ in range(5):
        world.reconcile("pi")
        world.advance(60)

    status = world.job("pi")["status"]
    assert cond_true(status, "InvalidSpec")
    assert "spec.elasticPolicy.maxReplicas" in cond(status, "InvalidSpec")["message"]  # type: ignore[index]
    assert not cond_true(status, "Failed") and not status.get("completionTime")
    assert [a for a in world.applied[written:] if isinstance(a, Create | Delete)] == []
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")} == before
    assert [e.reason for e in world.events].count("ValidationError") == 1

    # The fix: the same workers go on, nothing is cleaned up (cleanPodPolicy All would delete them all if
    # the job had been finished).
    world.job("pi")["spec"]["elasticPolicy"]["maxReplicas"] = 4
    world.settle("pi")

    status = world.job("pi")["status"]
    assert not cond_true(status, "InvalidSpec")
    assert cond(status, "InvalidSpec")["reason"] == "SpecFixed"  # type: ignore[index]
    assert cond_true(status, "Running") and not cond_true(status, "Failed")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")} == before
    assert "SpecFixed" in [e.reason for e in world.events]


def test_bad_edit_of_a_finished_job_does_not_flip_it_to_failed() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=1))
    world.settle("pi")
    world.start_launcher("pi")
    world.finish_launcher("pi", succeeded=True)
    world.settle("pi")
    assert cond_true(world.job("pi")["status"], "Succeeded")

    world.job("pi")["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 3
    world.settle("pi")

    status = world.job("pi")["status"]
    assert cond_true(status, "Succeeded") and not cond_true(status, "Failed")
    assert cond_true(status, "InvalidSpec")


def _queued_world(**job: object) -> World:
    """A job queued suspended (as Kueue creates it) that waits for its workers before its launcher: accepted
    (Created, Suspended), but with no start time, no pods and no launcher yet."""
    world = World()
    world.add_nodes("node-1")
    world.add(
        mpijob(
            workers=2,
            run_policy={"suspend": True, "cleanPodPolicy": "All"},
            launcher_creation_policy="WaitForWorkersReady",
            **job,  # type: ignore[arg-type]
        )
    )
    world.settle("pi")
    status = world.job("pi")["status"]
    assert cond_true(status, "Created") and cond_true(status, "Suspended")
    assert not status.get("startTime") and world.pods() == [] and world.get("Job", "pi-launcher") is None
    return world


def test_bad_edit_of_a_queued_job_waits_for_the_fix_and_the_job_then_runs() -> None:
    world = _queued_world()

    world.job("pi")["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    world.settle("pi")

    status = world.job("pi")["status"]
    assert not cond_true(status, "Failed") and not status.get("completionTime")
    assert cond_true(status, "InvalidSpec") and cond_true(status, "Suspended")
    assert "spec.mpiReplicaSpecs.Launcher.replicas" in cond(status, "InvalidSpec")["message"]  # type: ignore[index]
    assert [e.reason for e in world.events].count("ValidationError") == 1

    # Fixed, then admitted (Kueue unsuspends it): the job runs as if nothing happened.
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 1
    world.job("pi")["spec"]["runPolicy"]["suspend"] = False
    world.settle("pi")

    status = world.job("pi")["status"]
    assert not cond_true(status, "InvalidSpec") and not cond_true(status, "Failed")
    assert len(world.workers("pi")) == 2 and world.get("Job", "pi-launcher") is not None


def test_bad_edit_of_an_accepted_job_whose_children_are_not_cached_yet_is_not_failed() -> None:
    # A suspended job's first plan: its status write went out (Created, Suspended: no start time) and its
    # (suspended) launcher Job was created, but the cache does not show the launcher yet.
    job = mpijob(workers=2, run_policy={"suspend": True})
    actions = plan(snap(job))
    first = status_of(actions)
    assert first is not None and not first.get("startTime")
    assert [a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Job"]
    job = _bad_edit(job)
    job["status"] = first

    status = status_of(plan(snap(job)))

    assert status is not None and not cond_true(status, "Failed") and cond_true(status, "InvalidSpec")


def test_a_job_refused_at_its_first_plan_stays_failed_when_edited_again() -> None:
    job = _bad_edit(mpijob(workers=2))
    job["status"] = status_of(plan(snap(job)))
    job["spec"]["slotsPerWorker"] = -1

    status = status_of(plan(snap(job)))

    # Still the job that was refused: the new error goes into its Failed message, not an InvalidSpec edit.
    assert status is not None and cond_true(status, "Failed") and not cond_true(status, "InvalidSpec")
