"""`mpijob history`: the elastic history read back from what the operator really wrote (the Events the
planner emits in a simulated spot interruption, the BelowMinReplicas condition, the leaving annotations)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mpijob.api import constants as c
from mpijob.cli.history import history, signal_of, table, workers_named

from .builders import SPOT_TAINT, elastic, mpijob
from .world import World


def _as_events(world: World, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The world's Events as the API server would list them, one second apart in the order they were posted."""
    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    return [
        {
            "involvedObject": {"kind": "MPIJob", "name": job["metadata"]["name"], "uid": job["metadata"].get("uid")},
            "reason": e.reason,
            "message": e.message,
            "type": e.type,
            "lastTimestamp": (start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "metadata": {"resourceVersion": str(100 + i)},
        }
        for i, e in enumerate(world.events)
    ]


def test_a_spot_interruption_shows_as_a_shrink_by_that_taint_naming_exactly_the_workers_on_the_node() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(2, 4, grace=0)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    on_node_2 = sorted(n for n in world.worker_names("pi") if world.pod(n)["spec"]["nodeName"] == "node-2")
    assert len(on_node_2) == 2

    world.taint("node-2", SPOT_TAINT)
    world.settle("pi")
    job = world.job("pi")
    entries = history(job, _as_events(world, job), world.pods())

    # (With regrow, issue 19, more follows: probes, their own shrink on the still-tainted node, Regrown.)
    first_grow = next(e for e in entries if e.kind == "grow")
    assert sorted(first_grow.workers) == sorted(f"pi-worker-{i}" for i in range(4))
    shrink = next(e for e in entries if e.kind == "shrink")
    assert shrink.reason == "NodeTerminating"
    assert shrink.signal == f"taint {SPOT_TAINT}"
    assert sorted(shrink.workers) == on_node_2
    deleted = next(e for e in entries if e.reason == "SuccessfulDeletePod")
    assert (sorted(deleted.workers), deleted.signal) == (on_node_2, "leaving the job")
    removed = next(e for e in entries if e.reason == "WorkerRemoved")
    assert sorted(removed.workers) == on_node_2
    assert [e.time for e in entries] == sorted(e.time for e in entries)
    text = table(entries)
    assert text.splitlines()[0].split() == ["TIME", "WHAT", "SIGNAL", "WORKERS"]
    assert f"taint {SPOT_TAINT}" in text and ",".join(shrink.workers) in text


def test_the_floor_lost_and_held_again_are_read_from_the_condition_transitions() -> None:
    job = {
        "metadata": {"name": "pi", "uid": "u1"},
        "status": {
            "conditions": [
                {"type": "Running", "status": "True", "lastTransitionTime": "2026-12-01T12:00:00Z"},
                {
                    "type": "BelowMinReplicas",
                    "status": "True",
                    "message": "0 of minReplicas 2 workers are running",
                    "lastTransitionTime": "2026-12-01T12:05:00Z",
                },
            ]
        },
    }
    [entry] = history(job, [], [])
    assert (entry.kind, entry.time, entry.reason) == ("below-min", "2026-12-01T12:05:00Z", "BelowMinReplicas=True")
    assert "0 of minReplicas 2" in entry.message


def test_a_worker_in_its_grace_period_shows_as_leaving_with_its_recorded_reason() -> None:
    pod = {
        "metadata": {
            "name": "pi-worker-3",
            "annotations": {
                c.ANNOTATION_LEAVING_SINCE: "2026-12-01T12:01:00Z",
                c.ANNOTATION_LEAVING_REASON: "scale-down",
            },
        }
    }
    [entry] = history({"metadata": {"name": "pi"}}, [], [pod])
    assert (entry.kind, entry.signal, entry.workers) == ("leaving", "scale-down", ("pi-worker-3",))


def test_events_of_another_job_an_earlier_job_of_the_same_name_and_the_launcher_are_left_out() -> None:
    job = {"metadata": {"name": "pi", "uid": "new"}}
    base = {"reason": "SuccessfulCreatePod", "lastTimestamp": "2026-12-01T12:00:00Z"}
    events = [
        base | {"involvedObject": {"kind": "MPIJob", "name": "pi", "uid": "old"}, "message": "Created Pod pi-worker-0"},
        base | {"involvedObject": {"kind": "MPIJob", "name": "pi2", "uid": "x"}, "message": "Created Pod pi2-worker-0"},
        base | {"involvedObject": {"kind": "MPIJob", "name": "pi", "uid": "new"}, "message": "Created Pod pi-launcher"},
        base | {"involvedObject": {"kind": "MPIJob", "name": "pi", "uid": "new"}, "message": "Created Pod pi-worker-1"},
    ]
    [entry] = history(job, events, [])
    assert entry.workers == ("pi-worker-1",)


def test_worker_names_and_signals_are_read_from_the_messages_the_planner_writes() -> None:
    assert workers_named("pi", "workers pi-worker-2, pi-worker-10 and pi2-worker-1, pi-worker-2") == (
        "pi-worker-2",
        "pi-worker-10",
    )
    assert signal_of("WorkersLeaving", "workers pi-worker-3 left discovery (scale-down)") == "scale-down"
    two = "Deleted pod pi-worker-1: leaving the job; Deleted pod pi-worker-3: leaving the job"
    assert signal_of("SuccessfulDeletePod", two) == "leaving the job"
    assert signal_of("WorkerLost", "workers pi-worker-1 were removed by someone else; ...") == "worker-lost"


def test_events_of_one_second_are_shown_in_the_order_they_were_written() -> None:
    job = {"metadata": {"name": "pi", "uid": "u"}}
    involved = {"kind": "MPIJob", "name": "pi", "uid": "u"}
    same = "2026-12-01T12:00:00Z"
    events = [  # as the API lists them: by name, a random suffix, not by time
        {"involvedObject": involved, "reason": "WorkerRemoved", "message": "workers pi-worker-1 are gone",
         "lastTimestamp": same, "metadata": {"resourceVersion": "30"}},
        {"involvedObject": involved, "reason": "NodeTerminating", "message": "node n is terminating (taint k): "
         "workers pi-worker-1: scaling in", "lastTimestamp": same, "metadata": {"resourceVersion": "12"}},
    ]  # fmt: skip
    assert [e.reason for e in history(job, events, [])] == ["NodeTerminating", "WorkerRemoved"]


def test_a_new_jobs_workers_are_read_from_its_mpijobcreated_event_and_a_bare_one_is_left_out() -> None:
    job = {"metadata": {"name": "pi", "uid": "u"}}
    involved = {"kind": "MPIJob", "name": "pi", "uid": "u"}
    created = "MPIJob default/pi is created. Created Service pi; Created Pod pi-worker-0, pi-worker-1"
    events = [
        {"involvedObject": involved, "reason": "MPIJobCreated", "message": created, "lastTimestamp": "t1"},
        {"involvedObject": involved, "reason": "MPIJobCreated", "message": "MPIJob default/pi is created."},
    ]
    [entry] = history(job, events, [])
    assert (entry.kind, entry.workers) == ("grow", ("pi-worker-0", "pi-worker-1"))


def test_a_restart_mode_jobs_restarts_show_with_the_workers_that_left() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    policy = {**elastic(2, 4, grace=0), "mode": "Restart"}
    job = mpijob(workers=4, elastic_policy=policy)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] = ["mpirun"]
    world.add(job)
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    on_node_2 = sorted(n for n in world.worker_names("pi") if world.pod(n)["spec"]["nodeName"] == "node-2")
    world.placement = ["node-1"]
    world.taint("node-2", SPOT_TAINT)
    world.settle("pi", follow_requeue=False)
    job = world.job("pi")
    [restart] = [e for e in history(job, _as_events(world, job), world.pods()) if e.kind == "restart"]
    assert restart.reason == "Restarted" and sorted(restart.workers) == on_node_2
    assert restart.message.startswith("scale-in: the MPI run restarts on 2 workers")
