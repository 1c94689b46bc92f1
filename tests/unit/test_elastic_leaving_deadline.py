"""Issue 19 item 3: a leaving worker, and the launcher, can read when the worker's pod will be deleted, without
API access. The worker's own annotation `leaving-deadline` (RFC 3339 UTC) is written with its leaving mark (no
extra write) and projected into every elastic worker by a downwardAPI volume (/etc/mpi-leaving/deadline and
reason); the launcher pod's `leaving-workers` annotation (a JSON object, name -> deadline) goes in the same
write as its discovery list and is projected as /etc/mpi-discovery/leaving. A steady job writes nothing."""

from __future__ import annotations

import json

from mpijob.api import constants as c
from mpijob.api.models import MPIJobSpec
from mpijob.planner import children, worker_writes
from mpijob.planner.actions import Action, Create, Delete, Patch
from mpijob.planner.plan import validate
from mpijob.planner.snapshot import Obj

from .builders import at, elastic, leaving, mpijob, ts
from .world import World, is_terminating

GRACE = 30


def _world(workers: int = 3, grace: int = GRACE) -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=workers, elastic_policy=elastic(1, 8, grace=grace)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    return world


def _annotations(world: World, name: str) -> dict[str, str]:
    return dict(world.pod(name)["metadata"].get("annotations") or {})


def _launcher(world: World) -> Obj:
    (pod,) = [p for p in world.pods() if p["metadata"]["name"].startswith("pi-launcher-")]
    return pod


def _launcher_leaving(world: World) -> dict[str, str] | None:
    value = (_launcher(world)["metadata"].get("annotations") or {}).get(c.ANNOTATION_LEAVING_WORKERS)
    return None if value is None else dict(json.loads(value))


def _writes(actions: list[Action]) -> list[Action]:
    return [a for a in actions if isinstance(a, Create | Patch | Delete)]


def _scale_in(world: World, victim: str, replicas: int) -> None:
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = [victim]
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas


def test_elastic_workers_get_the_projected_deadline_and_reason_files_and_static_workers_do_not() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4))
    pod = children.worker_pod(job, _spec(job), 0, "")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "mpi-job-leaving")
    files = {i["path"]: i["fieldRef"]["fieldPath"] for i in volume["downwardAPI"]["items"]}
    assert files == {
        "deadline": f"metadata.annotations['{c.ANNOTATION_LEAVING_DEADLINE}']",
        "reason": f"metadata.annotations['{c.ANNOTATION_LEAVING_REASON}']",
    }
    mount = {"name": "mpi-job-leaving", "mountPath": "/etc/mpi-leaving", "readOnly": True}
    assert all(mount in container["volumeMounts"] for container in pod["spec"]["containers"])

    static = mpijob(workers=2)
    static_pod = children.worker_pod(static, _spec(static), 0, "")
    # As the reference makes them: only the SSH volume and its mount.
    assert [v["name"] for v in static_pod["spec"]["volumes"]] == ["ssh-auth"]
    assert [m["name"] for m in static_pod["spec"]["containers"][0]["volumeMounts"]] == ["ssh-auth"]


def _spec(job: Obj) -> MPIJobSpec:
    spec, errors = validate(job)
    assert spec is not None and not errors, errors
    return spec


def test_a_leaving_worker_and_the_launcher_learn_the_deletion_time_in_the_writes_that_take_it_out() -> None:
    world = _world()
    world.advance(5)
    marked_at = world.now.replace(microsecond=0)
    _scale_in(world, "pi-worker-1", 2)

    actions = world.reconcile("pi")

    deadline = ts((marked_at - at(0)).total_seconds() + GRACE)
    marks = _annotations(world, "pi-worker-1")
    assert marks[c.ANNOTATION_LEAVING_DEADLINE] == deadline
    assert marks[c.ANNOTATION_LEAVING_REASON] == "workersToDelete"
    # The deadline rides on the leaving mark: one patch for the worker, one for the launcher (with its list).
    worker_patches = [a for a in actions if isinstance(a, Patch) and a.name == "pi-worker-1"]
    assert len(worker_patches) == 1
    assert set(worker_patches[0].patch["metadata"]["annotations"]) == {
        c.ANNOTATION_LEAVING_SINCE,
        c.ANNOTATION_LEAVING_REASON,
        c.ANNOTATION_LEAVING_DEADLINE,
    }
    launcher_name = _launcher(world)["metadata"]["name"]
    (launcher_patch,) = [a for a in actions if isinstance(a, Patch) and a.name == launcher_name]
    assert set(launcher_patch.patch["metadata"]["annotations"]) == {
        c.ANNOTATION_DISCOVERED_HOSTS,
        c.ANNOTATION_LEAVING_WORKERS,
    }
    assert _launcher_leaving(world) == {"pi-worker-1": deadline}
    # Deleted at that time, not before.
    world.advance(GRACE - 1)
    assert not any(isinstance(a, Delete) for a in world.reconcile("pi"))
    world.advance(1)
    assert [a.name for a in world.reconcile("pi") if isinstance(a, Delete)] == ["pi-worker-1"]


def test_while_a_worker_waits_out_its_grace_period_nothing_is_written() -> None:
    world = _world()
    _scale_in(world, "pi-worker-1", 2)
    world.reconcile("pi")
    for _ in range(3):
        world.advance(5)
        assert _writes(world.reconcile("pi")) == []


def test_once_the_worker_is_being_deleted_the_launcher_no_longer_lists_it_and_then_nothing_is_written() -> None:
    world = _world()
    _scale_in(world, "pi-worker-1", 2)
    world.reconcile("pi")
    world.advance(GRACE)
    world.settle("pi")

    assert _launcher_leaving(world) is None
    assert "pi-worker-1" not in world.worker_names("pi")
    assert _writes(world.reconcile("pi")) == []


def test_a_worker_that_is_not_serving_is_deleted_at_once_and_its_deadline_says_now() -> None:
    world = _world()
    world.pod("pi-worker-2")["status"]["phase"] = "Failed"
    world.advance(3)

    actions = world.reconcile("pi")

    (mark,) = [a for a in actions if isinstance(a, Patch) and a.name == "pi-worker-2"]
    assert mark.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_DEADLINE] == ts(
        (world.now.replace(microsecond=0) - at(0)).total_seconds()
    )
    assert "pi-worker-2" in [a.name for a in actions if isinstance(a, Delete)]


def test_a_worker_marked_without_a_deadline_gets_the_one_its_leaving_time_gives_and_is_not_marked_again() -> None:
    world = _world()
    _scale_in(world, "pi-worker-1", 2)
    world.reconcile("pi")
    since = _annotations(world, "pi-worker-1")[c.ANNOTATION_LEAVING_SINCE]
    # As an operator version before the deadline left it.
    del world.pod("pi-worker-1")["metadata"]["annotations"][c.ANNOTATION_LEAVING_DEADLINE]
    world.advance(4)

    actions = world.reconcile("pi")

    (patch,) = [a for a in actions if isinstance(a, Patch) and a.name == "pi-worker-1"]
    assert patch.patch == {"metadata": {"annotations": {c.ANNOTATION_LEAVING_DEADLINE: _plus(since, GRACE)}}}
    assert _annotations(world, "pi-worker-1")[c.ANNOTATION_LEAVING_SINCE] == since


def _plus(since: str, seconds: int) -> str:
    return leaving(since, grace=seconds)[c.ANNOTATION_LEAVING_DEADLINE]


def test_an_edited_grace_period_moves_the_deadline_for_the_worker_and_the_launcher() -> None:
    world = _world()
    _scale_in(world, "pi-worker-1", 2)
    world.reconcile("pi")
    since = _annotations(world, "pi-worker-1")[c.ANNOTATION_LEAVING_SINCE]
    world.job("pi")["spec"]["elasticPolicy"]["scaleInGracePeriodSeconds"] = 300
    world.advance(2)

    world.reconcile("pi")

    assert _annotations(world, "pi-worker-1")[c.ANNOTATION_LEAVING_DEADLINE] == _plus(since, 300)
    assert _launcher_leaving(world) == {"pi-worker-1": _plus(since, 300)}
    world.advance(2)
    assert _writes(world.reconcile("pi")) == []


def test_the_launcher_lists_the_soonest_leavers_within_a_bound() -> None:
    deadlines = {f"pi-worker-{i}": ts(i) for i in range(worker_writes.MAX_LEAVING_LISTED + 5)}

    listed = json.loads(worker_writes.launcher_leaving(deadlines) or "{}")

    assert len(listed) == worker_writes.MAX_LEAVING_LISTED
    assert set(listed) == {f"pi-worker-{i}" for i in range(worker_writes.MAX_LEAVING_LISTED)}
    assert worker_writes.launcher_leaving({}) is None


def test_a_disrupted_worker_that_is_already_being_deleted_gets_no_deadline() -> None:
    world = _world()
    world.disrupt("pi-worker-1", "EvictionByEvictionAPI")
    world.settle("pi", kubelet=False)

    # The Eviction API deleted it: its SIGTERM (or preStop hook) is under way, its deletionTimestamp the kill.
    pod = world.pod("pi-worker-1")
    assert is_terminating(pod)
    assert c.ANNOTATION_LEAVING_DEADLINE not in (pod["metadata"].get("annotations") or {})
    assert "pi-worker-1" not in world.discovered("pi")
    assert _launcher_leaving(world) is None


def test_a_worker_deleted_in_this_plan_is_not_given_a_deadline_first() -> None:
    world = _world()
    _scale_in(world, "pi-worker-1", 2)
    world.reconcile("pi")
    del world.pod("pi-worker-1")["metadata"]["annotations"][c.ANNOTATION_LEAVING_DEADLINE]
    world.advance(GRACE)

    actions = world.reconcile("pi")

    assert [a.name for a in actions if isinstance(a, Delete)] == ["pi-worker-1"]
    assert not [a for a in actions if isinstance(a, Patch) and a.name == "pi-worker-1"]
