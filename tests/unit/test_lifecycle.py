"""Lifecycle and run policy of a (non-elastic) MPIJob, as state transitions: snapshot in, actions out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Delete, Patch
from mpijob.planner.plan import SUSPENDED_SETTLE_SECONDS, plan
from mpijob.planner.snapshot import Obj

from .builders import (
    API,
    JOB_UID,
    NOW,
    at,
    cond,
    cond_true,
    config_map,
    created_names,
    creates,
    deleted_pods,
    deletes,
    emits,
    job_condition,
    launcher_job,
    launcher_pod,
    mpijob,
    patches,
    requeue,
    running_status,
    secret,
    service,
    snap,
    status_of,
    ts,
    worker,
    writes,
)
from .world import World


def _status(actions: list) -> Obj:  # type: ignore[type-arg]
    status = status_of(actions)
    assert status is not None, "expected a status write"
    return status


# -- Running -----------------------------------------------------------------------------------------------


def test_job_is_running_when_the_launcher_and_all_workers_run() -> None:
    job = mpijob(workers=2, status={"conditions": [], "startTime": ts(-60)})
    launcher = launcher_job(job)
    actions = plan(
        snap(job, [worker(job, 0), worker(job, 1)], launcher=launcher, launcher_pods=[launcher_pod(launcher)])
    )

    status = _status(actions)
    assert cond_true(status, "Running")
    assert status["state"] == "Running"
    assert status["replicaStatuses"]["Worker"]["active"] == 2
    assert status["replicaStatuses"]["Launcher"]["active"] == 1
    assert emits(actions, "Normal", "MPIJobRunning")


@pytest.mark.parametrize("case", ["worker pending", "launcher pending", "worker missing"])
def test_job_is_not_running_until_everything_runs(case: str) -> None:
    job = mpijob(workers=2)
    launcher = launcher_job(job)
    pods = [worker(job, 0), worker(job, 1, phase="Pending" if case == "worker pending" else "Running")]
    if case == "worker missing":
        pods = pods[:1]
    lpod = launcher_pod(launcher, phase="Pending" if case == "launcher pending" else "Running")

    status = _status(plan(snap(job, pods, launcher=launcher, launcher_pods=[lpod])))

    assert not cond_true(status, "Running")


# -- finishing ---------------------------------------------------------------------------------------------


def _running_job(**kw: object) -> Obj:
    return mpijob(workers=2, status=running_status(), **kw)  # type: ignore[arg-type]


def test_launcher_complete_marks_succeeded_with_completion_time_and_clears_running() -> None:
    job = _running_job()
    launcher = launcher_job(job, conditions=[job_condition("Complete")], status={"completionTime": ts(-5)})

    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], launcher=launcher))

    status = _status(actions)
    succeeded = cond(status, "Succeeded")
    assert succeeded is not None and succeeded["status"] == "True" and succeeded["reason"] == "MPIJobSucceeded"
    assert status["completionTime"] == ts(-5)
    running = cond(status, "Running")
    assert running is not None and running["status"] == "False"
    assert status["state"] == "Succeeded"
    assert emits(actions, "Normal", "MPIJobSucceeded")


def test_succeeded_job_that_never_ran_gets_running_false() -> None:
    job = mpijob(workers=1)
    launcher = launcher_job(job, conditions=[job_condition("Complete")], status={"completionTime": ts(-5)})

    status = _status(plan(snap(job, [worker(job, 0)], launcher=launcher)))

    running = cond(status, "Running")
    assert running is not None and running["status"] == "False"


def test_launcher_backoff_limit_exceeded_fails_with_the_last_failed_pod_reason() -> None:
    job = _running_job(run_policy={"backoffLimit": 1})
    launcher = launcher_job(
        job,
        conditions=[job_condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")],
        status={"failed": 2},
    )
    pods = [
        launcher_pod(launcher, "a", phase="Failed", reason="FailedReason1", message="first", created=ts(-200)),
        launcher_pod(launcher, "b", phase="Failed", reason="FailedReason2", message="second", created=ts(-100)),
    ]

    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], launcher=launcher, launcher_pods=pods))

    status = _status(actions)
    failed = cond(status, "Failed")
    assert failed is not None and failed["status"] == "True"
    assert failed["reason"] == "BackoffLimitExceeded/FailedReason2"
    assert failed["message"] == "Job has reached the specified backoff limit: second"
    assert status["completionTime"] == ts(0)
    assert not cond_true(status, "Running")
    assert status["replicaStatuses"]["Launcher"]["failed"] == 2
    assert emits(actions, "Warning", "BackoffLimitExceeded/FailedReason2")


def test_launcher_deadline_exceeded_fails_with_the_job_reason() -> None:
    job = _running_job(run_policy={"activeDeadlineSeconds": 10})
    launcher = launcher_job(job, conditions=[job_condition("Failed", "DeadlineExceeded", "too slow")])

    failed = cond(_status(plan(snap(job, launcher=launcher))), "Failed")

    assert failed is not None and failed["reason"] == "DeadlineExceeded" and failed["message"] == "too slow"


def _finished_pods(job: Obj) -> list[Obj]:
    return [
        worker(job, 0, phase="Running"),
        worker(job, 1, phase="Pending", node=None),
        worker(job, 2, phase="Succeeded"),
        worker(job, 3, phase="Failed"),
        worker(job, 4, phase="Running", terminating=True),
    ]


@pytest.mark.parametrize(
    "policy,deleted",
    [
        ("All", ["pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-worker-3"]),
        ("Running", ["pi-worker-0", "pi-worker-1"]),
        ("None", []),
        (None, []),
    ],
)
def test_clean_pod_policy_decides_which_workers_go_when_the_job_finishes(
    policy: str | None, deleted: list[str]
) -> None:
    run_policy = {"cleanPodPolicy": policy} if policy else {}
    job = mpijob(workers=5, status=running_status(), run_policy=run_policy)
    launcher = launcher_job(job, conditions=[job_condition("Complete")], status={"completionTime": ts(-1)})

    actions = plan(snap(job, _finished_pods(job), launcher=launcher))

    assert sorted(deleted_pods(actions)) == deleted
    # Deletes carry the uid precondition.
    for action in deletes(actions, "Pod"):
        assert action.uid == f"uid-{action.name}"


def test_job_whose_launcher_finished_creates_nothing_more() -> None:
    # A worker vanished while the launcher completed: the job is done, nothing is recreated for it.
    job = mpijob(workers=2, status=running_status(), launcher_creation_policy="WaitForWorkersReady")
    launcher = launcher_job(job, conditions=[job_condition("Complete")], status={"completionTime": ts(-1)})

    actions = plan(snap(job, [worker(job, 0)], launcher=launcher))

    assert creates(actions) == []
    assert cond_true(_status(actions), "Succeeded")


def test_clean_pod_policy_also_runs_on_later_reconciles_of_a_finished_job() -> None:
    job = mpijob(workers=2, run_policy={"cleanPodPolicy": "All"})
    job["status"] = {
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "done"}],
        "completionTime": ts(-60),
    }

    actions = plan(snap(job, [worker(job, 0), worker(job, 1, terminating=True)]))

    assert deleted_pods(actions) == ["pi-worker-0"]
    # A finished job creates nothing, not even the children it lacks.
    assert not creates(actions)


def _finished_job(completed: str, ttl: int | None) -> Obj:
    run_policy = {"ttlSecondsAfterFinished": ttl} if ttl is not None else {}
    job = mpijob(workers=1, run_policy=run_policy)
    job["status"] = {
        "conditions": [
            {"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "done"},
            {"type": "Running", "status": "False", "reason": "MPIJobFinished", "message": "finished"},
        ],
        "completionTime": completed,
        "state": "Succeeded",
        "replicaStatuses": {"Launcher": {}},
    }
    return job


def test_ttl_after_finished_requeues_until_it_expires() -> None:
    actions = plan(snap(_finished_job(ts(-20), ttl=60)))

    assert not deletes(actions)
    assert requeue(actions) == pytest.approx(40)
    assert writes(actions) == []


def test_ttl_after_finished_deletes_the_mpijob_once_expired() -> None:
    actions = plan(snap(_finished_job(ts(-60), ttl=60)))

    [delete] = deletes(actions)
    assert (delete.api_version, delete.kind, delete.name) == (API, "MPIJob", "pi")
    assert delete.uid == JOB_UID
    assert delete.propagation == "Background"
    assert emits(actions, "Normal", "MPIJobDeleted")


def test_finished_job_without_ttl_is_kept_and_not_requeued() -> None:
    actions = plan(snap(_finished_job(ts(-6000), ttl=None)))
    assert list(actions) == []


def test_ttl_deletion_in_the_world_removes_the_job_and_its_children() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, run_policy={"ttlSecondsAfterFinished": 30, "cleanPodPolicy": "Running"}))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    world.finish_launcher("pi")

    world.reconcile("pi")
    assert cond_true(world.job("pi")["status"], "Succeeded")
    world.settle("pi")

    assert world.get("MPIJob", "pi") is None
    assert world.get("Service", "pi") is None
    assert world.get("Job", "pi-launcher") is None


def test_ttl_zero_writes_the_final_status_and_event_before_deleting_the_job() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=1, run_policy={"ttlSecondsAfterFinished": 0}))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    world.finish_launcher("pi")

    actions = world.reconcile("pi")

    kinds = [(type(a).__name__, getattr(a, "kind", ""), getattr(a, "subresource", None)) for a in writes(actions)]
    assert kinds == [("Patch", "MPIJob", "status"), ("Delete", "MPIJob", None)]
    assert world.get("MPIJob", "pi") is None
    assert world.errors == []
    assert [e.reason for e in world.events][-2:] == ["MPIJobSucceeded", "MPIJobDeleted"]


def test_evicted_worker_fails_a_non_elastic_job_with_completion_time_and_cleanup() -> None:
    job = mpijob(workers=2, status=running_status(), run_policy={"cleanPodPolicy": "Running"})
    launcher = launcher_job(job)
    pods = [worker(job, 0), worker(job, 1, phase="Failed", reason="Evicted")]

    actions = plan(snap(job, pods, launcher=launcher, launcher_pods=[launcher_pod(launcher)]))

    status = _status(actions)
    failed = cond(status, "Failed")
    assert failed is not None and failed["status"] == "True"
    assert failed["reason"] == "MPIJobEvicted"
    assert failed["message"] == "1/2 workers are evicted"
    assert status["completionTime"] == ts(0)
    assert not cond_true(status, "Running")
    assert deleted_pods(actions) == ["pi-worker-0"]
    # The evicted worker is not replaced.
    assert created_names(actions, "Pod") == []


def test_evicted_failed_job_with_clean_pod_policy_all_removes_every_worker() -> None:
    job = mpijob(workers=2, status=running_status(), run_policy={"cleanPodPolicy": "All"})
    pods = [worker(job, 0), worker(job, 1, phase="Failed", reason="Evicted")]

    assert sorted(deleted_pods(plan(snap(job, pods, launcher=launcher_job(job))))) == ["pi-worker-0", "pi-worker-1"]


def test_failed_worker_that_was_not_evicted_does_not_fail_the_job() -> None:
    job = mpijob(workers=2, status=running_status())
    pods = [worker(job, 0), worker(job, 1, phase="Failed", reason="Error")]

    status = _status(plan(snap(job, pods, launcher=launcher_job(job))))

    assert not cond_true(status, "Failed")
    assert status["replicaStatuses"]["Worker"]["failed"] == 1


# -- suspend and resume ------------------------------------------------------------------------------------


def test_suspend_deletes_workers_and_suspends_the_launcher() -> None:
    job = mpijob(workers=2, status=running_status(), run_policy={"suspend": True})
    launcher = launcher_job(job)

    actions = plan(
        snap(job, [worker(job, 0), worker(job, 1)], launcher=launcher, launcher_pods=[launcher_pod(launcher)])
    )

    assert sorted(deleted_pods(actions)) == ["pi-worker-0", "pi-worker-1"]
    assert created_names(actions, "Pod") == []
    [suspend] = patches(actions, "Job", "pi-launcher")
    assert suspend.patch == {"spec": {"suspend": True}}
    status = _status(actions)
    assert cond_true(status, "Suspended")
    assert not cond_true(status, "Running")
    assert status["state"] == "Suspended"


def test_job_created_suspended_gets_a_suspended_launcher_and_no_workers() -> None:
    actions = plan(snap(mpijob(workers=2, run_policy={"suspend": True})))

    assert created_names(actions, "Pod") == []
    [launcher] = creates(actions, "Job")
    assert launcher["spec"]["suspend"] is True
    status = _status(actions)
    assert cond_true(status, "Suspended")
    assert "startTime" not in status


def test_a_job_created_suspended_is_left_alone_for_a_second_after_it_is_first_seen() -> None:
    # Its first status write would change the resourceVersion a client's create returned, and the update
    # that client may send next (the reference's e2e suite resumes the job so) would meet a 409.
    job = mpijob(workers=2, run_policy={"suspend": True})

    early = plan(replace(snap(job), seen_for=0.3))
    assert writes(early) == []
    assert requeue(early) == pytest.approx(0.7)

    later = plan(replace(snap(job), seen_for=SUSPENDED_SETTLE_SECONDS))
    assert cond_true(_status(later), "Suspended")
    assert creates(later, "Job")[0]["spec"]["suspend"] is True


def test_a_job_created_running_is_planned_the_moment_it_is_first_seen() -> None:
    actions = plan(replace(snap(mpijob(workers=2)), seen_for=0.0))

    assert created_names(actions, "Pod") == ["pi-worker-0", "pi-worker-1"]


def test_suspending_a_known_job_is_acted_on_the_moment_it_is_first_seen() -> None:
    # After a restart every job is first seen anew: a suspension Kueue wrote meanwhile (preemption) still
    # deletes the workers at once, since the job's status shows it was created before.
    job = mpijob(workers=2, status=running_status(), run_policy={"suspend": True})

    actions = plan(replace(snap(job, [worker(job, 0), worker(job, 1)]), seen_for=0.0))

    assert sorted(deleted_pods(actions)) == ["pi-worker-0", "pi-worker-1"]


def test_resume_clears_launcher_start_time_then_unsuspends_with_synced_scheduling() -> None:
    job = mpijob(workers=2)
    kueue_template = {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}, "annotations": {"kueue/flavor": "spot"}},
        "spec": {
            "containers": [{"name": "mpi", "image": "x"}],
            "nodeSelector": {"pool": "spot"},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
        },
    }
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = kueue_template
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "m"},
            {"type": "Suspended", "status": "True", "reason": "MPIJobSuspended", "message": "MPIJob suspended"},
        ],
        "startTime": ts(-3600),
    }
    launcher = launcher_job(
        job,
        suspended=True,
        status={"startTime": ts(-3600)},
        template_metadata={
            "labels": {c.LABEL_JOB_NAME: "pi", c.LABEL_JOB_ROLE: "launcher", "old": "label"},
            "annotations": {"old": "annotation"},
        },
        template_spec={"containers": [], "nodeSelector": {"pool": "on-demand", "zone": "a"}},
    )

    actions = plan(snap(job, launcher=launcher))

    launcher_patches = patches(actions, "Job", "pi-launcher")
    assert [p.subresource for p in launcher_patches] == ["status", None]
    clear, resume = launcher_patches
    assert clear.patch == {"status": {"startTime": None}}
    assert resume.patch["spec"]["suspend"] is False
    tmpl = resume.patch["spec"]["template"]
    assert tmpl["spec"]["nodeSelector"] == {"pool": "spot", "zone": None}  # the earlier flavor's key goes
    assert tmpl["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert tmpl["metadata"]["labels"] == {
        "old": None,
        "kueue.x-k8s.io/queue-name": "q",
        c.LABEL_JOB_NAME: "pi",
        c.LABEL_JOB_ROLE: "launcher",
    }
    assert tmpl["metadata"]["annotations"] == {"old": None, "kueue/flavor": "spot"}
    assert created_names(actions, "Pod") == ["pi-worker-0", "pi-worker-1"]
    status = _status(actions)
    suspended = cond(status, "Suspended")
    assert suspended is not None and suspended["status"] == "False" and suspended["reason"] == "MPIJobResumed"
    assert status["startTime"] == ts(0)
    assert emits(actions, "Normal", "MPIJobResumed")


def test_resume_of_a_launcher_that_never_started_only_unsuspends() -> None:
    job = mpijob(workers=1)
    job["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "MPIJobSuspended"}]}

    actions = plan(snap(job, launcher=launcher_job(job, suspended=True)))

    [resume] = patches(actions, "Job", "pi-launcher")
    assert resume.subresource is None and resume.patch["spec"]["suspend"] is False


def test_suspend_then_resume_in_the_world_recreates_the_workers() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2))
    world.settle("pi")
    world.job("pi")["spec"]["runPolicy"] = {"suspend": True}

    world.settle("pi")
    assert world.worker_names("pi") == []
    launcher = world.get("Job", "pi-launcher")
    assert launcher is not None and launcher["spec"]["suspend"] is True

    world.job("pi")["spec"]["runPolicy"] = {"suspend": False}
    world.settle("pi")
    assert world.kept_workers("pi") == ["pi-worker-0", "pi-worker-1"]
    launcher = world.get("Job", "pi-launcher")
    assert launcher is not None and launcher["spec"]["suspend"] is False
    assert world.errors == []


# -- who reconciles the job --------------------------------------------------------------------------------


@pytest.mark.parametrize("managed_by", ["kueue.x-k8s.io/multikueue", "example.com/other"])
def test_job_managed_by_another_controller_is_left_alone(managed_by: str) -> None:
    job = mpijob(workers=2, run_policy={"managedBy": managed_by})
    assert list(plan(snap(job))) == []
    assert list(plan(snap(job, [worker(job, 0)], launcher=launcher_job(job)))) == []


def test_job_managed_by_this_operator_is_reconciled() -> None:
    job = mpijob(workers=1, run_policy={"managedBy": "kubeflow.org/mpi-operator"})
    assert created_names(plan(snap(job)), "Pod") == ["pi-worker-0"]


def test_job_being_deleted_is_left_alone() -> None:
    job = mpijob(workers=2)
    job["metadata"]["deletionTimestamp"] = ts(-1)
    assert list(plan(snap(job))) == []


# -- workers of a non-elastic job --------------------------------------------------------------------------


def test_worker_deleted_by_someone_else_is_recreated_at_the_same_index() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3))
    world.settle("pi")
    old_uid = world.pod("pi-worker-1")["metadata"]["uid"]

    world.delete_pod("pi-worker-1")
    actions = world.reconcile("pi")
    assert created_names(actions, "Pod") == []  # the name is still held while the pod terminates

    world.finish_deletions()
    actions = world.reconcile("pi")
    assert created_names(actions, "Pod") == ["pi-worker-1"]
    assert world.pod("pi-worker-1")["metadata"]["uid"] != old_uid
    assert world.hostfile_hosts("pi") == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]


def test_scale_down_of_a_non_elastic_job_deletes_the_highest_indexes() -> None:
    job = mpijob(workers=2, status=running_status())
    pods = [worker(job, i) for i in range(4)]

    actions = plan(snap(job, pods, launcher=launcher_job(job)))

    assert sorted(deleted_pods(actions)) == ["pi-worker-2", "pi-worker-3"]
    cm = creates(actions, "ConfigMap")[0]
    assert cm["data"][c.HOSTFILE_KEY] == "pi-worker-0.pi.team-a.svc slots=1\npi-worker-1.pi.team-a.svc slots=1\n"


def test_scale_up_of_a_non_elastic_job_creates_the_missing_indexes() -> None:
    job = mpijob(workers=4, status=running_status())
    pods = [worker(job, 0), worker(job, 2)]

    assert created_names(plan(snap(job, pods, launcher=launcher_job(job))), "Pod") == ["pi-worker-1", "pi-worker-3"]


def test_worker_without_an_index_style_name_does_not_stall_scale_down() -> None:
    job = mpijob(workers=2, status=running_status())
    odd = worker(job, 9, name="pi-worker-abc", labels={c.LABEL_JOB_NAME: "pi", c.LABEL_JOB_ROLE: c.ROLE_WORKER})
    pods = [worker(job, i) for i in range(3)] + [odd]

    actions = plan(snap(job, pods, launcher=launcher_job(job)))

    assert sorted(deleted_pods(actions)) == ["pi-worker-2", "pi-worker-abc"]
    assert created_names(actions, "Pod") == []


def test_worker_without_labels_is_still_known_by_its_name() -> None:
    job = mpijob(workers=3, status=running_status())
    pods = [worker(job, 0), worker(job, 1, labels={}), worker(job, 2), worker(job, 3, labels={})]

    actions = plan(snap(job, pods, launcher=launcher_job(job)))

    assert deleted_pods(actions) == ["pi-worker-3"]
    assert created_names(actions, "Pod") == []


def test_failed_worker_of_a_non_elastic_job_is_not_replaced() -> None:
    job = mpijob(workers=2, status=running_status())
    pods = [worker(job, 0), worker(job, 1, phase="Failed")]
    actions = plan(snap(job, pods, launcher=launcher_job(job)))
    assert created_names(actions, "Pod") == []
    assert deleted_pods(actions) == []


# -- objects the job does not own --------------------------------------------------------------------------

OTHER = mpijob(name="other", uid="uid-other")


def _foreign_children_snapshot(job: Obj, **extra: object):  # type: ignore[no-untyped-def]
    return snap(
        job,
        [worker(job, 0), worker(OTHER, 1, name="pi-worker-1", owner=OTHER)],
        service_obj=service(job, owner=OTHER),
        config_map_obj=config_map(job, {"hostfile": "x"}, owner=OTHER),
        secret_obj=secret(job, owner=OTHER),
        launcher=launcher_job(job, owner=OTHER, conditions=[job_condition("Complete")]),
        **extra,  # type: ignore[arg-type]
    )


def test_foreign_objects_with_child_names_are_never_touched_and_give_a_resource_conflict() -> None:
    job = mpijob(workers=2, status=running_status())

    actions = plan(_foreign_children_snapshot(job))

    for action in writes(actions):
        if isinstance(action, Patch | Delete):
            assert action.kind == "MPIJob", action
    assert creates(actions) == []
    status = _status(actions)
    conflict = cond(status, "ResourceConflict")
    assert conflict is not None and conflict["status"] == "True"
    for what in ("Service pi", "ConfigMap pi-config", "Secret pi-ssh", "Job pi-launcher", "Pod pi-worker-1"):
        assert what in conflict["message"]
    assert emits(actions, "Warning", "ResourceConflict")
    # A Job someone else owns does not finish this MPIJob.
    assert not cond_true(status, "Succeeded")


def test_resource_conflict_is_reported_once_and_cleared_when_resolved() -> None:
    job = mpijob(workers=1, status=running_status())
    first = _status(plan(snap(job, [worker(job, 0)], service_obj=service(job, owner=OTHER))))
    job["status"] = first

    again = plan(snap(job, [worker(job, 0)], service_obj=service(job, owner=OTHER)))
    assert not emits(again, "Warning", "ResourceConflict")

    resolved = _status(plan(snap(job, [worker(job, 0)], service_obj=service(job))))
    conflict = cond(resolved, "ResourceConflict")
    assert conflict is not None and conflict["status"] == "False"


def test_service_with_a_changed_selector_is_patched_back() -> None:
    job = mpijob(workers=1, status=running_status())
    svc = service(job)
    svc["spec"]["selector"] = {"app": "x"}

    [patch] = patches(plan(snap(job, [worker(job, 0)], service_obj=svc)), "Service")

    # The foreign key is removed (null in the merge patch), ours are set.
    assert patch.patch["spec"]["selector"] == {
        "app": None,
        c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
        c.LABEL_JOB_NAME: "pi",
    }


def test_times_are_the_snapshot_time() -> None:
    status = _status(plan(snap(mpijob(), now=at(42))))
    assert status["startTime"] == ts(42)
    assert NOW.tzinfo is not None


def test_extra_keys_added_to_the_config_map_or_service_selector_are_removed_and_the_job_converges() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2))
    world.settle("pi")
    cm = world.get("ConfigMap", c.config_map_name("pi"))
    svc = world.get("Service", "pi")
    assert cm is not None and svc is not None
    cm["data"]["someone-elses-key"] = "x"
    svc["spec"]["selector"]["app"] = "x"

    world.reconcile("pi")
    world.settle("pi")

    cm, svc = world.get("ConfigMap", c.config_map_name("pi")), world.get("Service", "pi")
    assert cm is not None and "someone-elses-key" not in cm["data"]
    assert svc is not None and "app" not in svc["spec"]["selector"]
    assert writes(world.reconcile("pi")) == []
