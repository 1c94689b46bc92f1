"""Kueue-managed elastic jobs keep the Worker count Kueue admitted: Kueue suspends a running job whose pod
counts no longer match its Workload, so a scale-in must never lower replicas there."""

from __future__ import annotations

from mpijob.api import constants as c
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj

from .builders import SPOT_TAINT, emits, node, running_elastic_job, snap, spec_patches, worker
from .world import World


def _kueue(job: Obj, queue: str = "team-queue") -> Obj:
    job["metadata"].setdefault("labels", {})[c.LABEL_KUEUE_QUEUE_NAME] = queue
    return job


def test_spot_taint_on_a_kueue_job_lists_the_workers_but_keeps_replicas() -> None:
    job = _kueue(running_elastic_job(workers=4, grace=0))
    pods = [worker(job, i, node=f"node-{i // 2 + 1}") for i in range(4)]
    nodes = {"node-1": node("node-1"), "node-2": node("node-2", taints=[SPOT_TAINT])}

    actions = plan(snap(job, pods, node_map=nodes))

    [patch] = spec_patches(actions)
    assert patch.patch["spec"]["elasticPolicy"]["workersToDelete"] == ["pi-worker-2", "pi-worker-3"]
    assert "mpiReplicaSpecs" not in patch.patch["spec"]
    [event] = emits(actions, reason="NodeTerminating")
    assert "Kueue-managed" in event.message


def test_the_same_job_without_kueue_scales_in() -> None:
    job = running_elastic_job(workers=4, grace=0)
    pods = [worker(job, i, node=f"node-{i // 2 + 1}") for i in range(4)]
    nodes = {"node-1": node("node-1"), "node-2": node("node-2", taints=[SPOT_TAINT])}

    [patch] = spec_patches(plan(snap(job, pods, node_map=nodes)))

    assert patch.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_kueue_job_runs_smaller_with_replacements_pending_until_room_appears() -> None:
    world = World(placement=["node-1", "node-1", "node-2", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(_kueue(running_elastic_job(workers=4, grace=0)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")

    world.taint("node-2", SPOT_TAINT)
    world.placement = []  # no room anywhere: replacements stay unscheduled
    world.settle("pi")

    assert world.replicas("pi") == 4  # as admitted: Kueue sees the same pod sets
    job = world.job("pi")
    assert job["spec"].get("runPolicy", {}).get("suspend") is not True
    pending = [n for n in world.kept_workers("pi") if not world.pod(n)["spec"].get("nodeName")]
    assert len(pending) == 2
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-1"]  # training goes on with the rest
    running = next(x for x in job["status"]["conditions"] if x["type"] == "Running")
    assert running["status"] == "True"  # minReplicas 1 still met


def test_a_worker_deleted_by_someone_else_in_a_kueue_job_is_replaced_not_scaled_in() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(_kueue(running_elastic_job(workers=3, grace=0)))
    world.settle("pi")
    world.delete_pod("pi-worker-1")

    world.settle("pi")

    assert world.replicas("pi") == 3
    assert len(world.kept_workers("pi")) == 3


def test_ignore_stays_ignore_on_a_kueue_job() -> None:
    job = _kueue(running_elastic_job(workers=4, policy="Ignore", grace=0))
    pods = [worker(job, i, node="node-2") for i in range(4)]

    actions = plan(snap(job, pods, node_map={"node-2": node("node-2", taints=[SPOT_TAINT])}))

    assert spec_patches(actions) == []
