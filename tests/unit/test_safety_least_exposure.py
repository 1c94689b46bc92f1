"""Issue 8, rule 12: least exposure.

The operator may not list or watch Secrets (it cannot enumerate them). It creates each job's SSH Secret; on
AlreadyExists it reads that one Secret by name and adopts it only when this job is its controller (an
operator killed before recording the uid made it); otherwise it is someone else's Secret: no worker or launcher is
created (they would mount a key pair another party knows), ResourceConflict says why, and the create is
retried until the name is free. Which Secret is ours follows from the job's status (`sshSecretUID`, and
the status write that follows a successful create in the same batch). Foreign objects are cached without
annotations; the private key is 0600 at any mount path (test_creation.py); RBAC grants no unused verb.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.kube.client import ApiError
from mpijob.planner.actions import Create, Delete, Emit, Patch, RequeueAfter
from mpijob.planner.child_writes import SECRET_RETRY_SECONDS
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import kinds, slim
from mpijob.runtime.controller import Controller

from .builders import cond, mpijob, patches, secret, snap, status_of
from .fakes import RecordingClient
from .world import World

ROOT = Path(__file__).resolve().parents[2]
OTHER = mpijob(name="other", uid="uid-other")


def _world_with(job: dict[str, Any], *objs: dict[str, Any]) -> World:
    world = World()
    world.add_nodes("node-1")
    world.add(job)
    for obj in objs:
        world.add(obj)
    return world


def test_a_fresh_jobs_ssh_secret_is_created_exclusively_right_before_the_status_write() -> None:
    actions = plan(snap(mpijob(workers=2)))

    [create] = [a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Secret"]
    assert create.exclusive and create.generate_ssh_keys
    writes = [a for a in actions if not isinstance(a, Emit | RequeueAfter)]
    at = writes.index(create)
    # Right before the status write: a status with conditions then always follows a create that succeeded.
    nxt = writes[at + 1]
    assert isinstance(nxt, Patch) and nxt.subresource == "status"
    # Every pod and the launcher come after it: none is created if the name is taken.
    assert all(not (isinstance(a, Create) and a.obj["kind"] in ("Pod", "Job")) for a in writes[:at])


def test_a_secret_the_operator_did_not_create_blocks_workers_and_launcher_and_the_create_is_retried() -> None:
    job = mpijob(workers=2)
    foreign = secret(job, owner=OTHER)
    world = _world_with(job, foreign)

    world.reconcile("pi")

    assert world.worker_names("pi") == []
    assert world.get("Job", c.launcher_name("pi")) is None
    assert (
        world.get("Secret", c.secret_name("pi"))["metadata"]["uid"]
        == world.objects[("Secret", "pi-ssh")]["metadata"]["uid"]
    )
    status = world.job("pi")["status"]
    conflict = cond(status, "ResourceConflict")
    assert conflict is not None and conflict["status"] == "True"
    assert "Secret pi-ssh" in conflict["message"] and "No worker or launcher is created" in conflict["message"]
    assert status["sshSecretUID"] == ""
    assert any(e.reason == "ResourceConflict" and e.type == "Warning" for e in world.events)
    assert RequeueAfter(SECRET_RETRY_SECONDS) in world.plans[-1]

    # Still someone else's a minute later: tried again, still blocked, nothing adopted.
    world.advance(SECRET_RETRY_SECONDS)
    world.reconcile("pi")
    assert world.worker_names("pi") == []
    assert world.job("pi")["status"]["sshSecretUID"] == ""
    assert world.objects[("Secret", "pi-ssh")]["metadata"]["ownerReferences"][0]["uid"] == "uid-other"

    # Its owner removes it: the retry creates ours, records its uid, and the job starts.
    del world.objects[("Secret", "pi-ssh")]
    world.advance(SECRET_RETRY_SECONDS)
    world.settle("pi")
    ours = world.get("Secret", "pi-ssh")
    assert ours is not None and ours["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    status = world.job("pi")["status"]
    assert status["sshSecretUID"] == ours["metadata"]["uid"]
    assert cond(status, "ResourceConflict")["status"] == "False"
    assert len(world.kept_workers("pi")) == 2


def test_a_fresh_jobs_secret_uid_is_recorded_and_a_steady_job_creates_nothing_more() -> None:
    world = _world_with(mpijob(workers=2))

    world.settle("pi")

    ours = world.get("Secret", "pi-ssh")
    assert ours is not None
    assert world.job("pi")["status"]["sshSecretUID"] == ours["metadata"]["uid"]
    assert world.tolerated == [] and world.errors == []
    assert [a for a in world.reconcile("pi") if isinstance(a, Create | Patch)] == []


def test_the_status_write_after_the_secret_create_records_its_uid_so_no_second_write_follows() -> None:
    # The planner cannot know the uid; the executor puts it into the status write that follows the create
    # in the same batch. Before, the next reconcile wrote the status once more only to record it.
    world = _world_with(mpijob(workers=2))

    first = world.reconcile("pi")

    ours = world.get("Secret", "pi-ssh")
    assert ours is not None
    assert world.job("pi")["status"]["sshSecretUID"] == ours["metadata"]["uid"]
    assert len(patches(first, "MPIJob")) == 1
    assert [a for a in world.reconcile("pi") if isinstance(a, Create | Patch | Delete)] == []
    assert world.tolerated == [] and world.errors == []


def test_a_restart_between_the_secret_create_and_recording_its_uid_does_not_call_our_secret_foreign() -> None:
    world = _world_with(mpijob(workers=2))
    world.reconcile("pi")  # creates the Secret, then writes the status (conditions, the uid) and the pods
    # As an operator before the uid went into that first status write left it: conditions, no uid.
    del world.job("pi")["status"]["sshSecretUID"]

    world.created.clear()  # the operator restarts: the uid it remembered is gone
    world.settle("pi")

    status = world.job("pi")["status"]
    assert cond(status, "ResourceConflict") is None
    assert len(world.kept_workers("pi")) == 2
    assert world.tolerated == []  # no second create was even tried


def test_a_killed_operators_own_secret_found_by_the_next_create_is_adopted_not_called_foreign() -> None:
    # Killed between the Secret's create and the status write: a fresh-looking job (no conditions, no uid)
    # whose Secret already exists. The create answers AlreadyExists; one read by name shows this job is its
    # controller, so its uid is recorded and the job runs (before: ResourceConflict until a person acted).
    job = mpijob(workers=2)
    ours = secret(job)
    world = _world_with(job, ours)
    uid = world.objects[("Secret", "pi-ssh")]["metadata"]["uid"]

    world.settle("pi")

    status = world.job("pi")["status"]
    assert cond(status, "ResourceConflict") is None, status
    assert status["sshSecretUID"] == uid
    assert len(world.kept_workers("pi")) == 2
    assert world.objects[("Secret", "pi-ssh")]["metadata"]["uid"] == uid  # the same Secret, not made again


def test_a_secret_an_older_operator_reported_as_foreign_is_not_adopted() -> None:
    job = mpijob(workers=2)
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True"},
            {
                "type": "ResourceConflict",
                "status": "True",
                "message": "Secret pi-ssh: exists and is not owned by this MPIJob; it is left untouched.",
            },
        ]
    }
    world = _world_with(job, secret(job, owner=OTHER))

    world.reconcile("pi")

    assert world.worker_names("pi") == []
    assert world.job("pi")["status"]["sshSecretUID"] == ""


def test_an_older_operators_running_job_keeps_its_secret_without_a_create() -> None:
    job = mpijob(workers=2)
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}], "startTime": "2026-01-01T00:00:00Z"}

    actions = plan(snap(job))

    assert [a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Secret"] == []
    assert len([a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Pod"]) == 2
    assert "sshSecretUID" not in (status_of(actions) or {})


class _TakenNameClient(RecordingClient):
    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        self.writes.append(("POST", path))
        if obj["kind"] == "Secret":
            raise ApiError(409, "AlreadyExists", "secrets pi-ssh already exists")
        return {**obj, "metadata": {**obj["metadata"], "uid": "new-uid"}}


def test_the_executor_stops_a_batch_at_an_exclusive_create_that_finds_the_name_taken() -> None:
    client = _TakenNameClient()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]
    job = mpijob()
    sec = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pi-ssh"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pi-worker-0"}}

    outcome = asyncio.run(executor.apply(job, [Create(sec, generate_ssh_keys=True, exclusive=True), Create(pod)]))

    assert client.writes == [("POST", "/api/v1/namespaces/team-a/secrets")]
    assert outcome.created == {("Secret", "pi-ssh"): None}
    assert outcome.conflict is not None


def test_the_executor_reports_the_uid_of_an_exclusive_create_and_goes_on() -> None:
    client = _TakenNameClient()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pi-worker-0"}}

    outcome = asyncio.run(executor.apply(mpijob(), [Create(cm, exclusive=True), Create(pod)]))

    assert outcome.created == {("ConfigMap", "pi-config"): "new-uid"}
    assert len(client.writes) == 2 and outcome.conflict is None


def test_the_operator_neither_watches_nor_relists_secrets() -> None:
    for gang in ("", "volcano", "scheduler-plugins-scheduler"):
        config = OperatorConfig(gang_scheduler=gang)
        controller = Controller(Executor(RecordingClient()), config)  # type: ignore[arg-type]
        # Every list and watch the informers make goes to one of these paths.
        paths = [p for w in controller.kinds for p in (*w.paths([]), *w.paths(["ns"]))]
        assert any(p.endswith("/pods") for p in paths) and any(p.endswith("/configmaps") for p in paths)
        assert not any("secrets" in p for p in paths), paths
        assert "Secret" not in controller.by_kind
    assert "Secret" not in kinds.BY_KIND


def _rules() -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d and d["kind"] == "ClusterRole")
    return list(role["rules"])


def _verbs(group: str, resource: str) -> set[str]:
    return {v for r in _rules() if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}


def test_the_shipped_rbac_can_create_secrets_and_get_one_by_name_but_never_list_or_watch_them() -> None:
    assert _verbs("", "secrets") == {"create", "get"}


def test_the_shipped_rbac_has_no_unused_verbs() -> None:
    assert _verbs("kubeflow.org", "mpijobs") == {"get", "list", "watch", "patch", "delete"}
    assert _verbs("kubeflow.org", "mpijobs/status") == {"patch"}
    assert _verbs("", "events") == {"create"}
    assert not any("events.k8s.io" in r["apiGroups"] for r in _rules())


def test_foreign_objects_are_cached_without_annotations() -> None:
    big = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 10_000}
    foreign_pod = {"metadata": {"name": "web", "annotations": big, "labels": {"app": "web"}}, "spec": {}}
    our_pod = {
        "metadata": {
            "name": "pi-worker-0",
            "annotations": {c.ANNOTATION_LEAVING_SINCE: "2026-01-01T00:00:00Z"},
            "labels": {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME},
        },
        "spec": {},
    }
    foreign_cm = {"metadata": {"name": "pi-config", "annotations": big}, "data": {"a": "b"}}
    node = {"metadata": {"name": "n1", "annotations": big}, "spec": {}}
    foreign_job = {"metadata": {"name": "x"}, "spec": {"template": {"metadata": {"annotations": big}}}}

    assert "annotations" not in slim.pod(foreign_pod)["metadata"]
    assert slim.pod(our_pod)["metadata"]["annotations"] == our_pod["metadata"]["annotations"]
    assert "annotations" not in slim.owned_object(foreign_cm, "ConfigMap")["metadata"]
    assert "data" not in slim.owned_object(foreign_cm, "ConfigMap")
    assert "annotations" not in slim.node(node)["metadata"]
    assert slim.batch_job(foreign_job)["spec"]["template"]["metadata"] == {}


def test_a_restart_right_after_a_retried_create_does_not_call_our_secret_foreign() -> None:
    job = mpijob(workers=2)
    world = _world_with(job, secret(job, owner=OTHER))
    world.reconcile("pi")
    assert world.job("pi")["status"]["sshSecretUID"] == ""
    del world.objects[("Secret", "pi-ssh")]
    world.advance(SECRET_RETRY_SECONDS)
    world.reconcile("pi")  # the retry creates ours; the status write right after it clears the marker

    world.created.clear()  # restart before the uid was recorded
    world.settle("pi")

    assert cond(world.job("pi")["status"], "ResourceConflict")["status"] == "False"
    assert len(world.kept_workers("pi")) == 2
