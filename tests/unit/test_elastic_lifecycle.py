"""Elastic jobs: PDB, Running with minReplicas, graceful timing, restart safety, scale-down, suspend."""

from __future__ import annotations

import pytest

from mpijob.api import constants as c
from mpijob.planner.discovery import listed_hosts
from mpijob.planner.plan import plan

from .builders import (
    at,
    cond_true,
    config_data,
    created_names,
    creates,
    deleted_pods,
    deletes,
    elastic,
    existing_children,
    hosts_in,
    launcher_job,
    launcher_pod,
    leaving,
    mpijob,
    node,
    patched_pods,
    patches,
    pdb,
    requeue,
    running_elastic_job,
    running_status,
    snap,
    spec_patches,
    status_of,
    ts,
    worker,
    writes,
)
from .world import World, is_leaving

GRACE = 30


# -- PodDisruptionBudget ---------------------------------------------------------------------------------


def test_elastic_job_gets_a_pdb_with_min_available_equal_to_min_replicas() -> None:
    job = mpijob(workers=4, elastic_policy=elastic(3, 8))

    [budget] = creates(plan(snap(job)), "PodDisruptionBudget")

    assert budget["metadata"]["name"] == "pi-workers"
    assert budget["spec"]["minAvailable"] == 3
    assert budget["spec"]["selector"] == {
        "matchLabels": {
            c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
            c.LABEL_JOB_NAME: "pi",
            c.LABEL_JOB_ROLE: c.ROLE_WORKER,
        }
    }
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "uid-pi"


def test_pdb_follows_a_changed_min_replicas() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE)
    kids = existing_children(job)
    kids["pdb_obj"] = pdb(job, 1)

    [patch] = patches(plan(snap(job, [worker(job, i) for i in range(4)], **kids)), "PodDisruptionBudget")

    assert patch.patch == {"spec": {"minAvailable": 2}}


def test_non_elastic_job_has_no_pdb_and_drops_an_owned_one() -> None:
    job = mpijob(workers=1, status=running_status())
    assert creates(plan(snap(job)), "PodDisruptionBudget") == []
    kids = existing_children(job)
    kids["pdb_obj"] = pdb(job, 1)

    [delete] = deletes(plan(snap(job, [worker(job, 0)], **kids)), "PodDisruptionBudget")

    assert delete.name == "pi-workers" and delete.uid == "uid-pi-workers"


def test_foreign_pdb_is_never_touched() -> None:
    job = running_elastic_job(workers=2, grace=GRACE)
    kids = existing_children(job)
    kids["pdb_obj"] = pdb(job, 7, owner=mpijob(name="other", uid="uid-other"))

    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], **kids))

    assert patches(actions, "PodDisruptionBudget") == [] and deletes(actions, "PodDisruptionBudget") == []
    status = status_of(actions)
    assert status is not None and cond_true(status, "ResourceConflict")


# -- Running ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("running,expected", [(2, True), (3, True), (1, False)])
def test_elastic_job_runs_with_at_least_min_replicas_running_workers(running: int, expected: bool) -> None:
    job = mpijob(workers=3, elastic_policy=elastic(2, 4), status={"conditions": [], "startTime": ts(-60)})
    pods = [worker(job, i, phase="Running" if i < running else "Pending") for i in range(3)]
    launcher = launcher_job(job)

    status = status_of(plan(snap(job, pods, launcher=launcher, launcher_pods=[launcher_pod(launcher)])))

    assert status is not None
    assert cond_true(status, "Running") is expected


# -- timing of deletion ------------------------------------------------------------------------------------


def test_listed_worker_already_terminating_is_not_waited_for() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-2"])
    pods = [worker(job, 0), worker(job, 1), worker(job, 2, terminating=True)]

    actions = plan(snap(job, pods, **existing_children(job)))

    assert deleted_pods(actions) == []
    assert requeue(actions) is None
    data = config_data(actions)
    assert data is not None and "pi-worker-2" not in data[c.DISCOVERED_HOSTS_KEY]


def test_listed_worker_whose_node_is_gone_is_deleted_at_once() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-2"])
    pods = [worker(job, 0), worker(job, 1), worker(job, 2, node="node-gone")]

    actions = plan(snap(job, pods, node_map={"node-1": node("node-1")}, **existing_children(job)))

    assert patched_pods(actions) == ["pi-worker-2"]
    assert deleted_pods(actions) == ["pi-worker-2"]
    assert actions.index(patches(actions, "Pod")[0]) < actions.index(deletes(actions, "Pod")[0])


def test_listed_worker_that_is_not_running_is_deleted_at_once() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-2"])
    pods = [worker(job, 0), worker(job, 1), worker(job, 2, phase="Pending", node=None)]

    assert deleted_pods(plan(snap(job, pods, **existing_children(job)))) == ["pi-worker-2"]


def test_zero_grace_deletes_in_the_same_plan_after_leaving_discovery() -> None:
    job = mpijob(workers=1, elastic_policy=elastic(1, 4, workers_to_delete=["pi-worker-1"], grace=0))
    job["status"] = running_status()
    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], **existing_children(job)))

    kinds = [(type(a).__name__, getattr(a, "kind", "")) for a in writes(actions)]
    assert kinds.index(("Patch", "ConfigMap")) < kinds.index(("Delete", "Pod"))


# -- restart safety: the decision lives in the API ----------------------------------------------------------


def test_after_a_restart_leaving_workers_are_deleted_at_since_plus_grace_and_not_reannotated() -> None:
    job = running_elastic_job(workers=2, grace=GRACE, to_delete=["pi-worker-2", "pi-worker-3"])
    job["status"].pop("leavingWorkers", None)  # as if nothing else survived but the pods' annotations
    since = ts(-20)
    pods = [worker(job, 0), worker(job, 1)] + [worker(job, i, annotations=leaving(since, grace=GRACE)) for i in (2, 3)]

    early = plan(snap(job, pods, **existing_children(job)))
    assert patched_pods(early) == []
    assert deleted_pods(early) == []
    assert requeue(early) == pytest.approx(GRACE - 20)

    on_time = plan(snap(job, pods, **existing_children(job), now=at(GRACE - 20)))
    assert deleted_pods(on_time) == ["pi-worker-2", "pi-worker-3"]
    assert patched_pods(on_time) == []


def test_restart_with_a_scale_down_already_decided_keeps_the_same_victims() -> None:
    # replicas 2, four workers, 0 and 3 already leaving (chosen before the restart): nobody else is chosen.
    job = running_elastic_job(workers=2, grace=GRACE)
    pods = [worker(job, 0, annotations=leaving(ts(-5), "scale-down", grace=GRACE)), worker(job, 1), worker(job, 2)]
    pods.append(worker(job, 3, annotations=leaving(ts(-5), "scale-down", grace=GRACE)))

    actions = plan(snap(job, pods, **existing_children(job)))

    assert patched_pods(actions) == []
    assert deleted_pods(actions) == []
    assert created_names(actions, "Pod") == []
    data = config_data(actions)
    assert data is not None and hosts_in(data[c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-1", "pi-worker-2"]


def test_operator_restart_between_leaving_and_deletion_in_the_world() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 4, grace=GRACE)))
    world.settle("pi")
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    job["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-1"]
    world.reconcile("pi")
    assert is_leaving(world.pod("pi-worker-1"))
    since = world.pod("pi-worker-1")["metadata"]["annotations"][c.ANNOTATION_LEAVING_SINCE]
    # "Restart": a fresh planner sees only the API. Its status is wiped too.
    world.job("pi")["status"]["leavingWorkers"] = []
    world.advance(GRACE / 2)
    world.reconcile("pi")
    assert world.pod("pi-worker-1")["metadata"]["annotations"][c.ANNOTATION_LEAVING_SINCE] == since
    assert "deletionTimestamp" not in world.pod("pi-worker-1")["metadata"]

    world.advance(GRACE / 2)
    world.reconcile("pi")

    assert "deletionTimestamp" in world.pod("pi-worker-1")["metadata"]


# -- scale-down without names and scale-up ------------------------------------------------------------------


def test_lowering_replicas_alone_marks_ranked_victims_as_leaving_scale_down() -> None:
    job = running_elastic_job(workers=2, grace=GRACE)
    pods = [worker(job, i) for i in range(4)]

    actions = plan(snap(job, pods, **existing_children(job)))

    reasons = {p.name: p.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_REASON] for p in patches(actions, "Pod")}
    assert reasons == {"pi-worker-2": "scale-down", "pi-worker-3": "scale-down"}
    assert spec_patches(actions) == []
    status = status_of(actions)
    assert status is not None and status["leavingWorkers"] == ["pi-worker-2", "pi-worker-3"]


def test_raising_replicas_creates_workers_up_to_the_new_count() -> None:
    job = running_elastic_job(workers=4, grace=GRACE)
    assert created_names(plan(snap(job, [worker(job, 0), worker(job, 1)], **existing_children(job))), "Pod") == [
        "pi-worker-2",
        "pi-worker-3",
    ]


def test_scale_subresource_change_converges_in_the_world() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 6, grace=5)))
    world.settle("pi")
    for replicas in (5, 3, 6, 1):
        world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
        world.settle("pi")
        assert len(world.kept_workers("pi")) == replicas
        assert len(world.worker_names("pi")) == replicas
        assert world.job("pi")["status"]["replicaStatuses"]["Worker"]["active"] == replicas
    assert world.errors == []


# -- suspend ------------------------------------------------------------------------------------------------


def test_suspending_an_elastic_job_removes_all_workers_at_once() -> None:
    job = running_elastic_job(workers=3, grace=GRACE)
    job["spec"]["runPolicy"] = {"suspend": True}
    pods = [worker(job, i) for i in range(3)]

    actions = plan(snap(job, pods, **existing_children(job)))

    assert sorted(deleted_pods(actions)) == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    assert created_names(actions, "Pod") == []
    assert spec_patches(actions) == []
    assert [p.patch for p in patches(actions, "Job")] == [{"spec": {"suspend": True}}]


def test_failed_worker_in_a_replace_job_leaves_at_once_and_is_replaced() -> None:
    job = running_elastic_job(workers=2, policy="Replace", grace=GRACE)
    pods = [worker(job, 0), worker(job, 1, phase="Failed")]

    actions = plan(snap(job, pods, **existing_children(job)))

    assert patched_pods(actions) == ["pi-worker-1"]
    assert deleted_pods(actions) == ["pi-worker-1"]
    assert created_names(actions, "Pod") == ["pi-worker-2"]
    status = status_of(actions)
    assert status is not None and status["replicaStatuses"]["Worker"]["failed"] == 1


def test_elastic_suspend_and_resume_in_the_world() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(2, 4, index_policy="Append")))
    world.settle("pi")
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}

    world.settle("pi")
    assert world.worker_names("pi") == []
    assert world.job("pi")["status"]["state"] == "Suspended"
    assert world.replicas("pi") == 3  # suspending is not a scale-in

    world.job("pi")["spec"]["runPolicy"] = {"suspend": False}
    world.settle("pi")
    assert world.kept_workers("pi") == ["pi-worker-3", "pi-worker-4", "pi-worker-5"]
    assert world.discovered("pi") == ["pi-worker-3", "pi-worker-4", "pi-worker-5"]
    assert world.errors == []


def test_elastic_job_that_succeeds_cleans_up_running_workers() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4), run_policy={"cleanPodPolicy": "Running"}))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    world.finish_launcher("pi")

    world.settle("pi")

    assert world.worker_names("pi") == []
    status = world.job("pi")["status"]
    assert status["state"] == "Succeeded"
    assert not cond_true(status, "Running")
    assert writes(world.reconcile("pi")) == []


def test_a_worker_marked_before_a_crash_but_still_in_discovery_gets_its_full_grace_period_again() -> None:
    # The annotation landed, the discovery change did not: the worker never left discovery, so
    # deleting it at since+grace would give Horovod no warning at all. It is marked again, from now.
    job = running_elastic_job(workers=3, grace=GRACE, to_delete=["pi-worker-2"])
    script = "#!/bin/sh\n" + "".join(f"echo pi-worker-{i}.pi.team-a.svc:1\n" for i in range(3))
    pods = [worker(job, 0), worker(job, 1), worker(job, 2, annotations=leaving(ts(-(GRACE + 5))))]

    actions = plan(snap(job, pods, **existing_children(job, data={c.DISCOVER_HOSTS_KEY: script, c.HOSTFILE_KEY: ""})))

    assert deleted_pods(actions) == []
    assert patched_pods(actions) == ["pi-worker-2"]
    assert requeue(actions) == pytest.approx(GRACE)
    data = config_data(actions)
    assert data is not None and "pi-worker-2" not in " ".join(hosts_in(data[c.DISCOVERED_HOSTS_KEY]))


def test_a_config_map_without_the_discovery_list_is_an_unknown_listing_not_parsed_from_the_script() -> None:
    # Written by an operator version before the list existed: its script's echo lines are not read back.
    # Nothing is assumed about what the launcher was served, so a leaving worker whose grace period is over
    # is marked again from now (not deleted), and the ConfigMap write that adds the list goes first.
    job = running_elastic_job(workers=3, grace=GRACE, to_delete=["pi-worker-2"])
    script = "#!/bin/sh\n" + "".join(f"echo pi-worker-{i}.pi.team-a.svc:1\n" for i in range(2))
    assert listed_hosts({c.DISCOVER_HOSTS_KEY: script}) is None
    pods = [worker(job, 0), worker(job, 1), worker(job, 2, annotations=leaving(ts(-(GRACE + 5))))]

    made = plan(snap(job, pods, **existing_children(job, data={c.DISCOVER_HOSTS_KEY: script, c.HOSTFILE_KEY: ""})))

    assert deleted_pods(list(made)) == []
    assert patched_pods(list(made)) == ["pi-worker-2"]
    assert [a.kind for a in made.leave_discovery] == ["ConfigMap"]
    data = config_data(list(made))
    assert data is not None and listed_hosts(data) == ["pi-worker-0.pi.team-a.svc", "pi-worker-1.pi.team-a.svc"]
