"""The launcher's discovery channel: the list in the ConfigMap, the launcher's least-privilege access to it,
the annotation nudge that keeps the launcher's file fresh, and the urgent-first order after a node taint."""

from __future__ import annotations

import copy
import json

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Create, Defer, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj, OperatorConfig

from .builders import (
    SPOT_TAINT,
    cond,
    config_map,
    creates,
    elastic,
    emits,
    existing_children,
    hosts_in,
    is_nudge,
    launcher_access,
    leaving_nudges,
    mpijob,
    node,
    nudges,
    owner_ref,
    running_status,
    snap,
    status_of,
    template,
    writes,
)
from .world import World, running_world

RBAC = "rbac.authorization.k8s.io/v1"
ACCESS_KINDS = {"ServiceAccount", "Role", "RoleBinding"}


def _elastic_job(**policy: object) -> Obj:
    ep = elastic(1, 8)
    ep.update(policy)
    return mpijob(workers=2, elastic_policy=ep)


def _launcher_pod_spec(actions: list[object]) -> Obj:
    launcher = creates(actions, "Job")  # type: ignore[arg-type]
    assert len(launcher) == 1
    spec: Obj = launcher[0]["spec"]["template"]["spec"]
    return spec


def _foreign(kind: str, name: str, api_version: str = "v1", **body: object) -> Obj:
    other = mpijob("other", uid="uid-other")
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-foreign-{kind}",
            "resourceVersion": "3",
            "ownerReferences": [owner_ref(other)],
        },
        **body,
    }


# -- the access a new elastic job gets --------------------------------------------------------------------


def test_new_elastic_job_gets_its_own_account_that_can_get_only_its_config_map() -> None:
    actions = plan(snap(_elastic_job()))

    kinds = [a.obj["kind"] if isinstance(a, Create) else "Defer" for a in actions if isinstance(a, Create | Defer)]
    # The launcher runs as its account: created before it. The grant comes in a pass of its own (Plan.settle):
    # until it exists discover_hosts.sh reads the projected files.
    assert kinds.index("ServiceAccount") < kinds.index("Job") < kinds.index("Defer")
    assert kinds[kinds.index("Defer") :] == ["Defer", "PodDisruptionBudget", "Role", "RoleBinding"]
    (account,) = creates(actions, "ServiceAccount")
    (role,) = creates(actions, "Role")
    (binding,) = creates(actions, "RoleBinding")
    for obj in (account, role, binding):
        assert obj["metadata"]["name"] == "pi-launcher"
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == "uid-pi" and ref["controller"] is True
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["pi-config"], "verbs": ["get"]}
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pi-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pi-launcher", "namespace": "team-a"}]
    pod_spec = _launcher_pod_spec(actions)
    assert pod_spec["serviceAccountName"] == "pi-launcher"


def test_launcher_gets_the_projected_discovery_and_leaving_files_and_the_list_in_its_config_volume() -> None:
    pod_spec = _launcher_pod_spec(plan(snap(_elastic_job())))

    volume = next(v for v in pod_spec["volumes"] if v["name"] == "mpi-job-discovery")
    files = {i["path"]: i["fieldRef"]["fieldPath"] for i in volume["downwardAPI"]["items"]}
    assert files == {
        "hosts": f"metadata.annotations['{c.ANNOTATION_DISCOVERED_HOSTS}']",
        "leaving": f"metadata.annotations['{c.ANNOTATION_LEAVING_WORKERS}']",
    }
    mounts = pod_spec["containers"][0]["volumeMounts"]
    assert {"name": "mpi-job-discovery", "mountPath": "/etc/mpi-discovery", "readOnly": True} in mounts
    config = next(v for v in pod_spec["volumes"] if v["name"] == "mpi-job-config")
    assert c.DISCOVERED_HOSTS_KEY in {i["key"] for i in config["configMap"]["items"]}


def test_user_service_account_is_bound_and_kept_and_no_account_is_made() -> None:
    job = _elastic_job()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = template(serviceAccountName="trainer")

    actions = plan(snap(job))

    assert creates(actions, "ServiceAccount") == []
    (binding,) = creates(actions, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": "team-a"}]
    assert _launcher_pod_spec(actions)["serviceAccountName"] == "trainer"


def test_binding_follows_a_changed_user_service_account() -> None:
    job = _elastic_job()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = template(serviceAccountName="trainer")
    children = existing_children(job)

    actions = plan(snap(job, **children))

    (patch,) = [a for a in actions if isinstance(a, Patch) and a.kind == "RoleBinding"]
    assert patch.patch == {"subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": "team-a"}]}


def test_static_job_gets_no_discovery_access() -> None:
    actions = plan(snap(mpijob(workers=2)))

    assert {a.obj["kind"] for a in actions if isinstance(a, Create)}.isdisjoint(
        {"ServiceAccount", "Role", "RoleBinding"}
    )
    assert "serviceAccountName" not in _launcher_pod_spec(actions)


@pytest.mark.parametrize(
    "job,config",
    [
        (_elastic_job(hostDiscovery="File"), OperatorConfig()),
        (_elastic_job(), OperatorConfig(api_discovery=False)),
    ],
    ids=["per job", "operator-wide"],
)
def test_file_only_makes_no_access_and_a_script_that_never_calls_the_api(job: Obj, config: OperatorConfig) -> None:
    actions = plan(snap(job, config=config))

    assert {a.obj["kind"] for a in actions if isinstance(a, Create)}.isdisjoint(
        {"ServiceAccount", "Role", "RoleBinding"}
    )
    assert "serviceAccountName" not in _launcher_pod_spec(actions)
    (cm,) = creates(actions, "ConfigMap")
    assert "USE_API = False" in cm["data"][c.DISCOVER_HOSTS_KEY]


def test_turning_the_api_off_removes_the_grant_but_keeps_the_account() -> None:
    job = _elastic_job(hostDiscovery="File")

    actions = plan(snap(job, **existing_children(job)))

    gone = {(a.kind, a.name, a.uid) for a in actions if isinstance(a, Delete)}
    assert gone == {("Role", "pi-launcher", "uid-pi-launcher"), ("RoleBinding", "pi-launcher", "uid-pi-launcher")}


# -- foreign objects are never used ------------------------------------------------------------------------


def test_foreign_service_account_holds_the_launcher_back_with_a_conflict() -> None:
    job = _elastic_job()

    actions = plan(snap(job, service_account_obj=_foreign("ServiceAccount", "pi-launcher")))

    assert creates(actions, "Job") == []
    assert creates(actions, "ServiceAccount") == []
    status = status_of(actions)
    assert status is not None
    conflict = cond(status, "ResourceConflict")
    assert conflict is not None and "ServiceAccount pi-launcher" in conflict["message"]
    assert emits(actions, "Warning", "ResourceConflict")


def test_foreign_role_is_never_bound_and_our_binding_to_it_goes() -> None:
    job = _elastic_job()
    children = existing_children(job)
    children["role_obj"] = _foreign("Role", "pi-launcher", RBAC, rules=[{"verbs": ["*"]}])

    actions = plan(snap(job, **children))

    assert [(a.kind, a.name) for a in actions if isinstance(a, Delete)] == [("RoleBinding", "pi-launcher")]
    assert not [a for a in actions if isinstance(a, Patch) and a.kind == "Role"]
    status = status_of(actions)
    assert status is not None
    conflict = cond(status, "ResourceConflict")
    assert conflict is not None and "Role pi-launcher" in conflict["message"]


def test_foreign_role_binding_is_left_alone_with_a_conflict() -> None:
    job = _elastic_job()
    children = existing_children(job)
    children["role_binding_obj"] = _foreign("RoleBinding", "pi-launcher", RBAC, subjects=[])

    actions = plan(snap(job, **children))

    assert not [a for a in actions if getattr(a, "kind", None) == "RoleBinding"]
    assert creates(actions, "RoleBinding") == []
    status = status_of(actions)
    assert status is not None and "RoleBinding pi-launcher" in (cond(status, "ResourceConflict") or {})["message"]


def test_our_role_with_edited_rules_is_put_back() -> None:
    job = _elastic_job()
    children = existing_children(job)
    children["role_obj"]["rules"] = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]

    actions = plan(snap(job, **children))

    (patch,) = [a for a in actions if isinstance(a, Patch) and a.kind == "Role"]
    assert patch.patch["rules"] == launcher_access(job)["role_obj"]["rules"]


def test_binding_with_another_role_ref_is_replaced() -> None:
    job = _elastic_job()
    children = existing_children(job)
    children["role_binding_obj"]["roleRef"] = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "x",
    }

    actions = plan(snap(job, **children))

    assert [(a.kind, a.uid) for a in actions if isinstance(a, Delete)] == [("RoleBinding", "uid-pi-launcher")]


# -- the list and the nudge ---------------------------------------------------------------------------------


def _launcher_annotation(world: World) -> str | None:
    (pod,) = [p for p in world.pods() if p["metadata"]["name"].startswith("pi-launcher-")]
    value = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_DISCOVERED_HOSTS)
    return None if value is None else str(value)


def test_launcher_pod_carries_the_same_list_as_the_config_map() -> None:
    world = running_world()

    listed = world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]
    assert hosts_in(listed) == ["pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-worker-3"]
    assert listed.startswith("# mpijob discovery of team-a/pi, changed ")
    assert _launcher_annotation(world) == listed


def test_discovery_change_nudges_the_launcher_once_and_a_steady_job_not_at_all() -> None:
    world = running_world()
    world.advance(5)
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-1"]
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3

    world.reconcile("pi")

    listed = world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]
    assert hosts_in(listed) == ["pi-worker-0", "pi-worker-2", "pi-worker-3"]
    assert _launcher_annotation(world) == listed
    for _ in range(2):
        assert nudges(world.reconcile("pi")) == {}


def test_unchanged_hosts_keep_the_list_and_its_changed_time() -> None:
    world = running_world()
    before = world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]
    world.advance(60)
    # A change the list does not depend on (a worker's deletion cost).
    world.pod("pi-worker-0")["metadata"].setdefault("annotations", {})[c.ANNOTATION_DELETION_COST] = "5"

    world.reconcile("pi")

    assert world.config_data("pi")[c.DISCOVERED_HOSTS_KEY] == before


def test_finished_or_terminating_launcher_pods_are_not_nudged() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 8), status=running_status())
    children = existing_children(job, data={})  # no list yet: the live launcher pod is nudged
    done = copy.deepcopy(children["launcher_pods"][0])
    done["metadata"]["name"] = "pi-launcher-done"
    done["status"]["phase"] = "Failed"
    going = copy.deepcopy(children["launcher_pods"][0])
    going["metadata"]["name"] = "pi-launcher-going"
    going["metadata"]["deletionTimestamp"] = "2026-03-01T11:59:00Z"
    children["launcher_pods"] += [done, going]

    assert set(nudges(plan(snap(job, **children)))) == {"pi-launcher-abcde"}


def test_a_list_that_is_not_ours_in_the_annotation_is_replaced() -> None:
    world = running_world()
    (pod,) = [p for p in world.pods() if p["metadata"]["name"].startswith("pi-launcher-")]
    pod["metadata"]["annotations"][c.ANNOTATION_DISCOVERED_HOSTS] = "evil.example.com:8\n"

    world.reconcile("pi")

    assert _launcher_annotation(world) == world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]


# -- after a node taint: discovery first, then everything else ---------------------------------------------


def test_node_taint_writes_discovery_first_then_defers_the_rest() -> None:
    world = running_world()
    world.taint("node-2", SPOT_TAINT)

    actions = plan(world.snapshot("pi"))

    assert isinstance(actions[0], Patch) and actions[0].kind == "ConfigMap"
    assert isinstance(actions[1], Defer)
    assert hosts_in(actions[0].patch["data"][c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-0", "pi-worker-2"]
    assert actions[0].resource_version == world.get("ConfigMap", "pi-config")["metadata"]["resourceVersion"]  # type: ignore[index]


def test_after_the_deferred_discovery_write_the_nudge_goes_first_behind_the_marks_it_tells() -> None:
    """The launcher's file fallback (the nudge) goes first again, ahead of everything else, but with the
    decision's record and the leaving marks just before it: it tells the launcher the leaving workers'
    deadlines, and those must be on the pods by then (a Defer between them would let the next pass mark the
    workers with deadlines of its own clock)."""
    world = running_world()
    world.taint("node-2", SPOT_TAINT)
    world.apply(plan(world.snapshot("pi")))
    assert [p["metadata"]["name"] for p in world.pods() if "leaving-since" in str(p["metadata"])] == []

    actions = plan(world.snapshot("pi"))
    launchers = {p["metadata"]["name"] for p in world.pods() if "launcher" in p["metadata"]["name"]}
    defer = next(i for i, a in enumerate(actions) if isinstance(a, Defer))
    urgent = writes(actions[:defer])
    assert (urgent[0].kind, urgent[0].name) == ("MPIJob", "pi")  # the decision is recorded first
    marks = [a for a in urgent if isinstance(a, Patch) and a.name in ("pi-worker-1", "pi-worker-3")]
    recorded = {m.name: m.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_DEADLINE] for m in marks}
    assert sorted(recorded) == ["pi-worker-1", "pi-worker-3"]
    assert set(nudges(urgent)) == launchers and urgent[-len(launchers) :] == [a for a in urgent if is_nudge(a)]
    assert {json.dumps(recorded, separators=(",", ":"))} == set(leaving_nudges(urgent).values())
    terminating = emits(actions, reason="NodeTerminating")
    assert len(terminating) == 1 and "pi-worker-1, pi-worker-3" in terminating[0].message
    # Announced by the write that records the decision: posted when it succeeds, whatever follows it.
    assert terminating[0] in urgent[0].announce
    world.apply(actions)

    actions = plan(world.snapshot("pi"))

    assert not any(isinstance(a, Defer) for a in actions)
    assert not [a for a in actions if isinstance(a, Patch) and a.kind in ("ConfigMap", "MPIJob") and not a.subresource]
    assert nudges(actions) == {} and leaving_nudges(actions) == {}
    assert emits(actions, reason="WorkersLeaving") == [] and emits(actions, reason="NodeTerminating") == []


@pytest.mark.parametrize("urgent_first", [False, True])
def test_the_defer_after_the_config_map_says_the_launcher_nudges_are_still_to_go(urgent_first: bool) -> None:
    """The first pass after a taint writes only the ConfigMap; its Defer says the nudges it cut are urgent
    too (`Plan.urgent_rest`: the controller queues that pass at DISCOVERY, ahead of every job's ordinary rest).
    The plan after the nudges says nothing is left that a launcher reads."""
    world = running_world()
    world.taint("node-2", SPOT_TAINT)

    first = plan(world.snapshot("pi"), urgent_first=urgent_first)
    assert [a for a in first if isinstance(a, Defer)] == [Defer()]
    assert first.urgent_rest
    world.apply(first)
    second = plan(world.snapshot("pi"), urgent_first=urgent_first)

    assert nudges(second)
    assert [a for a in second if isinstance(a, Defer)] == [Defer()] and not second.urgent_rest


def test_node_taint_converges_to_the_same_end_state_through_the_deferral() -> None:
    world = running_world()
    world.taint("node-2", SPOT_TAINT)

    world.settle("pi")

    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-2"]
    assert world.replicas("pi") == 2
    assert world.errors == []
    listed = world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]
    assert _launcher_annotation(world) == listed


def test_a_plan_that_only_adds_hosts_does_not_defer() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 8), status=running_status())
    data = {c.DISCOVERED_HOSTS_KEY: "# mpijob discovery of team-a/pi, changed 2026-03-01T11:00:00Z\n"}
    world_children = existing_children(job, data=data)
    from .builders import worker

    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-1")]
    actions = plan(snap(job, pods, **world_children))

    assert not any(isinstance(a, Defer) for a in actions)


def test_foreign_config_map_is_not_read_for_discovery_decisions() -> None:
    job = _elastic_job()
    foreign = config_map(job, {c.DISCOVERED_HOSTS_KEY: "# mpijob discovery\nx.y:1\n"}, owner=mpijob("o", uid="u-o"))
    actions = plan(snap(job, config_map_obj=foreign, node_map={"node-1": node("node-1")}))
    assert not [a for a in actions if isinstance(a, Patch) and a.kind == "ConfigMap"]
    assert not any(isinstance(a, Defer) and not a.settle for a in actions)


def test_a_config_map_change_that_keeps_every_host_does_not_defer() -> None:
    world = running_world(workers=2)
    # One more worker: the hostfile changes at once, discovery only once it runs; nobody leaves.
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3

    actions = plan(world.snapshot("pi"))

    (patch,) = [a for a in actions if isinstance(a, Patch) and a.kind == "ConfigMap"]
    assert c.DISCOVERED_HOSTS_KEY not in patch.patch["data"]
    assert not any(isinstance(a, Defer) for a in actions)


def test_a_node_termination_is_announced_once_even_when_a_mark_after_its_record_meets_a_409() -> None:
    """Seen on real nodes: the kubelet updated a worker between the plan and its leaving mark, so the mark
    (optimistic on the pod's resourceVersion) got a 409 after the spec patch had recorded the decision. The
    next plan reads the names as listed in workersToDelete; the NodeTerminating Event was never posted."""
    world = running_world()
    world.taint("node-2", SPOT_TAINT)
    actions = plan(world.snapshot("pi"))
    while writes(actions)[0].kind != "MPIJob":  # type: ignore[union-attr]
        world.apply(actions)  # the ConfigMap's pass first
        actions = plan(world.snapshot("pi"))
    marks = [a for a in actions if isinstance(a, Patch) and a.kind == "Pod" and "worker" in a.name]
    assert marks
    world.objects[("Pod", marks[0].name)]["metadata"]["resourceVersion"] = world.next_rv()  # the kubelet's write

    err = world.apply(actions)
    world.settle("pi")

    assert err is not None and err.code == 409
    assert world.replicas("pi") == 2
    said = [e.message for e in world.events if e.reason == "NodeTerminating"]
    assert len(said) == 1 and "node node-2 " in said[0] and "pi-worker-1, pi-worker-3" in said[0], said
