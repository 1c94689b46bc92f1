"""elasticPolicy.workersToDelete: exactly the listed workers leave, gracefully; bad names are refused."""

from __future__ import annotations

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj

from .builders import (
    at,
    config_data,
    created_names,
    deleted_pods,
    deletes,
    elastic,
    emits,
    existing_children,
    foreign_pod,
    hosts_in,
    launcher_job,
    launcher_pod,
    leaving,
    mpijob,
    patched_pods,
    patches,
    requeue,
    running_elastic_job,
    snap,
    spec_patches,
    status_of,
    ts,
    worker,
    writes,
)
from .world import World, is_leaving

GRACE = 30


def _four(job: Obj) -> list[Obj]:
    return [worker(job, i, node="node-1" if i < 2 else "node-2") for i in range(4)]


# -- replicas lowered by k, k names listed ------------------------------------------------------------------


def test_listed_workers_leave_discovery_first_and_are_not_deleted_yet() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-1", "pi-worker-3"])

    actions = plan(snap(job, _four(job), **existing_children(job)))

    annotated = patches(actions, "Pod")
    assert [p.name for p in annotated] == ["pi-worker-1", "pi-worker-3"]
    for p in annotated:
        assert p.patch == {"metadata": {"annotations": leaving(ts(0), grace=GRACE)}}
        assert p.resource_version == "10"
    data = config_data(actions)
    assert data is not None
    assert hosts_in(data[c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-0", "pi-worker-2"]
    assert hosts_in(data[c.HOSTFILE_KEY]) == ["pi-worker-0", "pi-worker-2"]
    # Recorded first, then taken out of discovery.
    kinds = [a.kind for a in actions if isinstance(a, Patch)]
    assert kinds.index("ConfigMap") > kinds.index("Pod")
    assert deletes(actions) == []
    assert created_names(actions, "Pod") == []
    assert requeue(actions) == GRACE
    status = status_of(actions)
    assert status is not None
    assert status["leavingWorkers"] == ["pi-worker-1", "pi-worker-3"]
    assert status["discoveredHosts"] == ["pi-worker-0", "pi-worker-2"]
    assert emits(actions, "Normal", "WorkersLeaving")


def test_listed_workers_are_deleted_after_the_grace_period_and_not_before() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-1", "pi-worker-3"])
    pods = _four(job)
    for p in pods[1::2]:
        p["metadata"]["annotations"] = leaving(ts(0), grace=GRACE)

    halfway = plan(snap(job, pods, **existing_children(job), now=at(GRACE - 10)))
    assert deleted_pods(halfway) == []
    assert patched_pods(halfway) == []
    assert requeue(halfway) == pytest.approx(10)

    due = plan(snap(job, pods, **existing_children(job), now=at(GRACE)))
    assert deleted_pods(due) == ["pi-worker-1", "pi-worker-3"]
    assert [d.uid for d in deletes(due, "Pod")] == ["uid-pi-worker-1", "uid-pi-worker-3"]
    assert created_names(due, "Pod") == []


def test_scale_in_by_workers_to_delete_converges_to_exactly_the_unlisted_workers() -> None:
    world = World(placement=["node-1", "node-1", "node-2", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 8, grace=GRACE)))
    world.settle("pi")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")}
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    job["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-0", "pi-worker-3"]
    created_before = len(world.plans)

    world.reconcile("pi")
    assert world.discovered("pi") == ["pi-worker-1", "pi-worker-2"]
    assert all(is_leaving(world.pod(n)) for n in ("pi-worker-0", "pi-worker-3"))
    world.settle("pi")

    assert world.worker_names("pi") == ["pi-worker-1", "pi-worker-2"]
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")} == {
        n: uids[n] for n in ("pi-worker-1", "pi-worker-2")
    }
    assert world.replicas("pi") == 2
    assert world.workers_to_delete("pi") == []  # names dropped once the workers were gone
    assert not any(created_names(p, "Pod") for p in world.plans[created_before:])
    assert world.errors == []
    assert world.job("pi")["status"]["leavingWorkers"] == []


# -- replicas unchanged: drain and replace -----------------------------------------------------------------


def test_listed_workers_with_unchanged_replicas_are_removed_and_replaced() -> None:
    job = running_elastic_job(workers=4, grace=GRACE, to_delete=["pi-worker-1"])

    actions = plan(snap(job, _four(job), **existing_children(job)))

    assert patched_pods(actions) == ["pi-worker-1"]
    assert created_names(actions, "Pod") == ["pi-worker-4"]
    data = config_data(actions)
    assert data is not None
    assert hosts_in(data[c.HOSTFILE_KEY]) == ["pi-worker-0", "pi-worker-2", "pi-worker-3", "pi-worker-4"]
    assert spec_patches(actions) == []


def test_drain_and_replace_converges_to_replicas_without_the_listed_worker() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 8, grace=GRACE)))
    world.settle("pi")
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-1"]

    world.settle("pi")

    assert world.replicas("pi") == 3
    assert world.kept_workers("pi") == ["pi-worker-0", "pi-worker-2", "pi-worker-3"]
    assert world.workers_to_delete("pi") == []
    assert world.errors == []


# -- bad names -------------------------------------------------------------------------------------------

OTHER = mpijob(name="other", uid="uid-other")


def _bad_name_world(job: Obj) -> dict[str, object]:
    kids = existing_children(job)
    launcher = launcher_job(job)
    kids["launcher_pods"] = [launcher_pod(launcher, "abcde")]
    return kids


@pytest.mark.parametrize(
    "name,why",
    [
        ("pi-launcher-abcde", "is the launcher"),
        ("other-worker-0", "is not a pod of this job"),
        ("pi-worker-7", "is not a pod of this job"),
        ("pi-worker-9", "no such pod"),
    ],
)
def test_bad_name_in_workers_to_delete_is_warned_about_dropped_and_never_touched(name: str, why: str) -> None:
    job = running_elastic_job(workers=4, grace=GRACE, to_delete=[name, "pi-worker-2"])
    foreign = [
        worker(OTHER, 0, owner=OTHER),
        foreign_pod("pi-worker-7", labels={c.LABEL_JOB_NAME: "pi", c.LABEL_JOB_ROLE: c.ROLE_WORKER}),
    ]

    actions = plan(snap(job, _four(job), foreign=foreign, **_bad_name_world(job)))  # type: ignore[arg-type]

    [warning] = emits(actions, "Warning", "InvalidWorkerToDelete")
    assert "spec.elasticPolicy.workersToDelete" in warning.message
    assert repr(name) in warning.message and why in warning.message
    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": ["pi-worker-2"]}}}
    assert spec.resource_version == "100"
    assert name not in patched_pods(actions) + deleted_pods(actions)
    # The valid name in the same list is handled as usual.
    assert patched_pods(actions) == ["pi-worker-2"]


def test_dropping_a_bad_name_does_not_change_replicas() -> None:
    job = running_elastic_job(workers=3, grace=GRACE, to_delete=["nope"])
    actions = plan(snap(job, _four(job)[:3], **existing_children(job)))
    [spec] = spec_patches(actions)
    assert "mpiReplicaSpecs" not in spec.patch["spec"]


def test_pod_of_another_job_listed_is_never_deleted_even_over_many_reconciles() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, grace=0)))
    world.add(mpijob(name="other", workers=1))
    world.settle("pi")
    world.settle("other")
    other_uid = world.pod("other-worker-0")["metadata"]["uid"]
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = ["other-worker-0"]

    world.settle("pi")

    assert world.pod("other-worker-0")["metadata"]["uid"] == other_uid
    assert not is_leaving(world.pod("other-worker-0"))
    assert world.workers_to_delete("pi") == []
    assert [e.reason for e in world.events if e.type == "Warning"] == ["InvalidWorkerToDelete"]


# -- names are dropped once the worker is terminating or gone ----------------------------------------------


def test_name_is_dropped_once_the_listed_worker_is_terminating() -> None:
    job = running_elastic_job(workers=3, grace=GRACE, to_delete=["pi-worker-3"])
    pods = _four(job)
    pods[3] = worker(job, 3, node="node-2", annotations=leaving(ts(-GRACE)), terminating=True)

    actions = plan(snap(job, pods, **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": []}}}
    assert emits(actions, "Normal", "WorkerRemoved")
    assert not emits(actions, "Warning")
    assert deleted_pods(actions) == []
    assert created_names(actions, "Pod") == []


def test_name_of_a_leaving_worker_that_is_gone_is_dropped_without_a_warning() -> None:
    job = running_elastic_job(workers=3, grace=GRACE, to_delete=["pi-worker-3"])
    job["status"]["leavingWorkers"] = ["pi-worker-3"]

    actions = plan(snap(job, _four(job)[:3], **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": []}}}
    assert not emits(actions, "Warning")
    assert created_names(actions, "Pod") == []


def test_a_later_worker_reusing_a_dropped_name_is_safe() -> None:
    # After pi-worker-1 left and its name was dropped, FillGaps may reuse index 1; the new pod stays.
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 8, grace=0)))
    world.settle("pi")
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    job["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-1"]
    world.settle("pi")
    assert world.worker_names("pi") == ["pi-worker-0", "pi-worker-2"]

    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    world.settle("pi")

    assert world.kept_workers("pi") == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    assert writes(world.reconcile("pi")) == []
