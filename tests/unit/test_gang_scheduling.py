"""Gang scheduling: the job's PodGroup (Volcano or scheduler-plugins) and its pods' scheduler and group."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Create, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.podgroups import format_quantity, parse_quantity
from mpijob.planner.snapshot import Obj, OperatorConfig

from .builders import (
    NO_REGROW,
    SPOT_TAINT,
    creates,
    deletes,
    elastic,
    mpijob,
    owner_ref,
    patches,
    snap,
    status_of,
    template,
    writes,
)
from .world import World

COSCHEDULING = OperatorConfig(gang_scheduler="scheduler-plugins-scheduler")
VOLCANO = OperatorConfig(gang_scheduler="volcano")


def _world(config: OperatorConfig, *nodes: str) -> World:
    world = World(config=config, placement=list(nodes) or ["node-1"])
    world.add_nodes(*(nodes or ("node-1",)))
    return world


def _launched(world: World, job: Obj) -> World:
    """`job` in `world`, settled with its launcher started."""
    world.add(job)
    world.settle("pi")
    world.start_launcher("pi")
    return world


def _resources(cpu: str, memory: str) -> Obj:
    return {"requests": {"cpu": cpu, "memory": memory}}


def _job_with_requests(workers: int = 3, **kw: object) -> Obj:
    return mpijob(
        workers=None,
        launcher={"replicas": 1, "template": _with_container_resources("1", "1Gi")},
        worker={"replicas": workers, "template": _with_container_resources("2", "4Gi")},
        **kw,  # type: ignore[arg-type]
    )


def _with_container_resources(cpu: str, memory: str) -> Obj:
    return {"spec": {"containers": [{"name": "mpi", "image": "x", "resources": _resources(cpu, memory)}]}}


# -- creation ---------------------------------------------------------------------------------------------------


def test_no_pod_group_and_default_scheduler_without_the_flag() -> None:
    actions = plan(snap(mpijob(workers=2)))

    assert creates(actions, "PodGroup") == []
    for pod in creates(actions, "Pod"):
        assert "schedulerName" not in pod["spec"]


def test_coscheduling_pod_group_has_min_member_workers_plus_launcher_and_summed_requests() -> None:
    actions = plan(snap(_job_with_requests(workers=3), config=COSCHEDULING))

    [group] = creates(actions, "PodGroup")
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["metadata"]["name"] == "pi"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-pi"
    assert group["spec"]["minMember"] == 4
    # launcher 1 cpu/1Gi + 3 workers x 2 cpu/4Gi
    assert group["spec"]["minResources"] == {"cpu": "7", "memory": "13Gi"}
    # Unset: the plugin's own permit timeout applies (0 would mean "do not wait").
    assert "scheduleTimeoutSeconds" not in group["spec"]


def test_pod_group_is_created_before_any_pod() -> None:
    actions = plan(snap(mpijob(workers=2), config=COSCHEDULING))

    kinds = [a.obj["kind"] for a in actions if isinstance(a, Create)]
    assert kinds.index("PodGroup") < kinds.index("Pod")
    assert kinds.index("PodGroup") < kinds.index("Job")


def test_coscheduling_pods_and_launcher_carry_scheduler_name_and_group_label() -> None:
    job = mpijob(workers=2, worker={"replicas": 2, "template": template(schedulerName="someone-else")})
    actions = plan(snap(job, config=COSCHEDULING))

    for pod in creates(actions, "Pod"):
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"
    [launcher] = creates(actions, "Job")
    tmpl = launcher["spec"]["template"]
    assert tmpl["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert tmpl["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"


def test_volcano_pod_group_takes_queue_priority_class_and_pods_get_the_group_annotation() -> None:
    job = mpijob(
        workers=2,
        run_policy={"schedulingPolicy": {"queue": "research", "priorityClass": "high", "minAvailable": 2}},
    )
    actions = plan(snap(job, config=VOLCANO))

    [group] = creates(actions, "PodGroup")
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"]["minMember"] == 2
    assert group["spec"]["queue"] == "research"
    assert group["spec"]["priorityClassName"] == "high"
    for pod in creates(actions, "Pod"):
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "pi"
        assert "scheduling.x-k8s.io/pod-group" not in pod["metadata"]["labels"]


def test_volcano_queue_falls_back_to_the_job_annotation_and_priority_to_the_launcher_template() -> None:
    job = mpijob(workers=1, launcher={"replicas": 1, "template": template(priorityClassName="batch-low")})
    job["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "default-q"}

    [group] = creates(plan(snap(job, config=VOLCANO)), "PodGroup")

    assert group["spec"]["queue"] == "default-q"
    assert group["spec"]["priorityClassName"] == "batch-low"


def test_explicit_min_resources_and_timeout_are_used_as_given() -> None:
    job = mpijob(
        workers=2,
        run_policy={"schedulingPolicy": {"minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 60}},
    )

    [group] = creates(plan(snap(job, config=COSCHEDULING)), "PodGroup")

    assert group["spec"]["minResources"] == {"cpu": "3"}
    assert group["spec"]["scheduleTimeoutSeconds"] == 60


def test_min_available_below_the_job_size_counts_launcher_and_fewer_workers_in_min_resources() -> None:
    job = _job_with_requests(workers=4, run_policy={"schedulingPolicy": {"minAvailable": 3}})

    [group] = creates(plan(snap(job, config=COSCHEDULING)), "PodGroup")

    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minResources"] == {"cpu": "5", "memory": "9Gi"}  # launcher + 2 workers


# -- steady state, updates, ownership ---------------------------------------------------------------------------


def test_a_settled_gang_job_writes_nothing() -> None:
    world = _launched(_world(COSCHEDULING), _job_with_requests(workers=2))
    world.settle("pi")

    assert writes(world.reconcile("pi")) == []
    assert world.get("PodGroup", "pi") is not None


def test_an_equal_quantity_in_another_notation_is_not_rewritten() -> None:
    world = _world(COSCHEDULING)
    world.add(_job_with_requests(workers=2))
    world.settle("pi")
    group = world.get("PodGroup", "pi")
    assert group is not None
    group["spec"]["minResources"]["memory"] = "9216Mi"  # == 9Gi

    assert patches(world.reconcile("pi"), "PodGroup") == []


def test_changed_scheduling_policy_patches_the_pod_group_and_nulls_dropped_resources() -> None:
    world = _world(COSCHEDULING)
    world.add(mpijob(workers=2, run_policy={"schedulingPolicy": {"minResources": {"cpu": "2", "gpu": "1"}}}))
    world.settle("pi")
    job = world.job("pi")
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minResources": {"cpu": "4"}, "minAvailable": 2}
    job["metadata"]["resourceVersion"] = world.next_rv()

    [patch] = patches(world.reconcile("pi"), "PodGroup")

    assert patch.patch["spec"]["minMember"] == 2
    assert patch.patch["spec"]["minResources"] == {"cpu": "4", "gpu": None}
    group = world.get("PodGroup", "pi")
    assert group is not None and group["spec"]["minResources"] == {"cpu": "4"}


def test_a_foreign_pod_group_is_never_touched_and_is_reported() -> None:
    job = mpijob(workers=2)
    foreign = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pi", "namespace": "team-a", "uid": "other", "resourceVersion": "5"},
        "spec": {"minMember": 99},
    }
    actions = plan(snap(job, config=COSCHEDULING, pod_group=foreign))

    assert [a for a in actions if getattr(a, "kind", None) == "PodGroup"] == []
    assert creates(actions, "PodGroup") == []
    status = status_of(actions)
    assert status is not None
    conflict = next(x for x in status["conditions"] if x["type"] == "ResourceConflict")
    assert conflict["status"] == "True" and "PodGroup pi" in conflict["message"]


def test_a_pod_group_owned_by_another_job_is_a_conflict_too() -> None:
    other = mpijob("other")
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pi", "namespace": "team-a", "uid": "g", "ownerReferences": [owner_ref(other)]},
        "spec": {"minMember": 1},
    }

    actions = plan(snap(mpijob(workers=1), config=VOLCANO, pod_group=group))

    assert deletes(actions, "PodGroup") == [] and patches(actions, "PodGroup") == []


# -- suspend, finish ------------------------------------------------------------------------------------------------


def test_suspending_deletes_the_pod_group_and_resuming_recreates_it_keeping_the_launcher_group_label() -> None:
    world = _world(COSCHEDULING)
    world.add(mpijob(workers=2))
    world.settle("pi")
    group = world.get("PodGroup", "pi")
    assert group is not None
    job = world.job("pi")
    job["spec"]["runPolicy"] = {"suspend": True}
    job["metadata"]["resourceVersion"] = world.next_rv()

    actions = world.reconcile("pi")

    [delete] = deletes(actions, "PodGroup")
    assert isinstance(delete, Delete) and delete.uid == group["metadata"]["uid"]
    world.settle("pi")
    assert world.get("PodGroup", "pi") is None

    job = world.job("pi")
    job["spec"]["runPolicy"] = {"suspend": False}
    job["metadata"]["resourceVersion"] = world.next_rv()
    world.settle("pi")

    assert world.get("PodGroup", "pi") is not None
    launcher = world.get("Job", "pi-launcher")
    assert launcher is not None and not launcher["spec"]["suspend"]
    assert launcher["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"


def test_a_finished_job_loses_its_pod_group() -> None:
    world = _launched(_world(VOLCANO), mpijob(workers=1))
    world.finish_launcher("pi")

    world.settle("pi")

    assert world.get("PodGroup", "pi") is None


# -- elastic ---------------------------------------------------------------------------------------------------------


def test_elastic_min_member_is_min_replicas_plus_launcher() -> None:
    [group] = creates(plan(snap(mpijob(workers=4, elastic_policy=elastic(2, 8)), config=COSCHEDULING)), "PodGroup")

    assert group["spec"]["minMember"] == 3


def test_min_available_above_the_current_size_is_capped_so_the_gang_stays_satisfiable() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 8), run_policy={"schedulingPolicy": {"minAvailable": 5}})

    [group] = creates(plan(snap(job, config=COSCHEDULING)), "PodGroup")

    assert group["spec"]["minMember"] == 3


def test_a_spot_scale_in_keeps_the_gang_satisfiable_by_the_workers_that_remain() -> None:
    job = mpijob(
        workers=4,
        elastic_policy=elastic(1, 8, grace=0, regrow=NO_REGROW),
        run_policy={"schedulingPolicy": {"minAvailable": 5}},
    )
    world = _launched(_world(COSCHEDULING, "node-1", "node-2"), job)
    world.settle("pi")
    group = world.get("PodGroup", "pi")
    assert group is not None and group["spec"]["minMember"] == 5

    world.taint("node-2", SPOT_TAINT)
    world.placement = ["node-1"]
    world.settle("pi")

    assert world.replicas("pi") == 2
    group = world.get("PodGroup", "pi")
    assert group is not None
    pods_in_gang = len(world.kept_workers("pi")) + 1
    assert group["spec"]["minMember"] == 3 <= pods_in_gang


def test_replacement_workers_join_the_same_gang() -> None:
    world = _world(COSCHEDULING, "node-1", "node-2")
    world.add(mpijob(workers=2, elastic_policy=elastic(2, 4, grace=0, node_termination_policy="Replace")))
    world.settle("pi")
    world.taint("node-1", SPOT_TAINT)
    world.placement = ["node-2"]

    world.settle("pi")

    assert world.replicas("pi") == 2
    for name in world.kept_workers("pi"):
        pod = world.pod(name)
        assert pod["spec"]["nodeName"] == "node-2"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


# -- quantities -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("2Gi", Decimal(2 * 1024**3)), ("1e3", Decimal(1000)), ("3", Decimal(3)), ("1k", 1000)],
)
def test_quantities_parse_exactly(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "abc", "-1", "1Zi", "1.2.3", "nan", "inf", "Gi"])
def test_malformed_quantities_are_rejected(text: str) -> None:
    assert parse_quantity(text) is None


@pytest.mark.parametrize(
    ("value", "text"), [(Decimal(7), "7"), (Decimal(13 * 1024**3), "13Gi"), (Decimal("1.5"), "1500m")]
)
def test_quantities_format_canonically(value: Decimal, text: str) -> None:
    assert format_quantity(value) == text
    assert parse_quantity(text) == value


def test_patches_on_a_pod_group_are_optimistic() -> None:
    world = _world(COSCHEDULING)
    world.add(mpijob(workers=2))
    world.settle("pi")
    job = world.job("pi")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
    job["metadata"]["resourceVersion"] = world.next_rv()

    [patch] = patches(world.reconcile("pi"), "PodGroup")

    assert isinstance(patch, Patch) and patch.resource_version is not None
    assert c.LABEL_JOB_NAME in patch.patch["metadata"]["labels"]


@pytest.mark.parametrize("example", ["gang-coscheduling.yaml", "kueue-elastic.yaml"])
def test_scheduling_examples_are_valid_mpijobs(example: str) -> None:
    import pathlib

    import yaml

    from mpijob.planner.plan import validate

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / example
    jobs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "MPIJob"]
    assert jobs
    for job in jobs:
        job["metadata"].setdefault("namespace", "default")
        spec, errors = validate(job)
        assert spec is not None and errors == []
