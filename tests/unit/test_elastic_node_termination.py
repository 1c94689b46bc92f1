"""The node-termination reaction: workers on a node that is going away are scaled in, replaced or ignored."""

from __future__ import annotations

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj, OperatorConfig

from .builders import (
    NO_REGROW,
    SPOT_TAINT,
    config_data,
    created_names,
    deleted_pods,
    elastic,
    emits,
    existing_children,
    hosts_in,
    leaving,
    mpijob,
    node,
    patched_pods,
    requeue,
    running_elastic_job,
    snap,
    spec_patches,
    status_of,
    ts,
    worker,
)
from .world import World, is_leaving, is_terminating

GRACE = 30


def _pods(job: Obj, count: int = 4) -> list[Obj]:
    """Workers 0,1 on node-1; 2,3 on node-2 (and so on, two per node)."""
    return [worker(job, i, node=f"node-{i // 2 + 1}") for i in range(count)]


def _nodes(**node2: object) -> dict[str, Obj]:
    return {"node-1": node("node-1"), "node-2": node("node-2", **node2)}  # type: ignore[arg-type]


SIGNALS = {
    "spot taint": (_nodes(taints=[SPOT_TAINT]), f"taint {SPOT_TAINT}"),
    "karpenter taint": (_nodes(taints=["karpenter.sh/disrupted"]), "taint karpenter.sh/disrupted"),
    "out-of-service taint": (_nodes(taints=["node.kubernetes.io/out-of-service"]), "out-of-service"),
    "cordon": (_nodes(unschedulable=True), "cordoned"),
    "node deleted": ({"node-1": node("node-1")}, "deleted"),
}


@pytest.mark.parametrize("nodes,signal", SIGNALS.values(), ids=SIGNALS.keys())
def test_scale_in_writes_one_spec_patch_lowering_replicas_and_listing_the_workers(
    nodes: dict[str, Obj], signal: str
) -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)

    actions = plan(snap(job, _pods(job), node_map=nodes, **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {
        "spec": {
            "mpiReplicaSpecs": {"Worker": {"replicas": 2}},
            "elasticPolicy": {"workersToDelete": ["pi-worker-2", "pi-worker-3"]},
        }
    }
    assert spec.resource_version == "100"
    assert actions.index(spec) == 0, "the decision is recorded before anything else"
    [event] = emits(actions, "Normal", "NodeTerminating")
    assert "node-2" in event.message and signal in event.message
    assert "pi-worker-2" in event.message and "pi-worker-3" in event.message
    assert "pi-worker-0" not in event.message
    # The workers leave discovery in the same plan; no replacement.
    assert patched_pods(actions) == ["pi-worker-2", "pi-worker-3"]
    data = config_data(actions)
    assert data is not None and hosts_in(data[c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-0", "pi-worker-1"]
    assert created_names(actions, "Pod") == []


def test_workers_on_a_tainted_node_wait_for_the_grace_period() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))
    assert deleted_pods(actions) == []
    assert requeue(actions) == GRACE


def test_workers_on_a_deleted_node_are_deleted_at_once() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, **existing_children(job)))
    assert deleted_pods(actions) == ["pi-worker-2", "pi-worker-3"]


def test_scale_in_never_goes_below_min_replicas_and_replaces_the_rest() -> None:
    job = running_elastic_job(workers=4, min_replicas=3, grace=GRACE, regrow=NO_REGROW)

    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert spec.patch["spec"]["elasticPolicy"]["workersToDelete"] == ["pi-worker-2", "pi-worker-3"]
    assert created_names(actions, "Pod") == ["pi-worker-4"]
    [event] = emits(actions, "Normal", "NodeTerminating")
    assert "minReplicas 3" in event.message


def test_scale_in_at_the_floor_lists_without_lowering_and_replaces_all() -> None:
    job = running_elastic_job(workers=2, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-2")]

    actions = plan(snap(job, pods, node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": ["pi-worker-1"]}}}
    assert created_names(actions, "Pod") == ["pi-worker-2"]


def test_replace_lists_the_workers_without_lowering_replicas() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, policy="Replace", grace=GRACE, regrow=NO_REGROW)

    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": ["pi-worker-2", "pi-worker-3"]}}}
    assert created_names(actions, "Pod") == ["pi-worker-4", "pi-worker-5"]
    [event] = emits(actions, "Normal", "NodeTerminating")
    assert "node-2" in event.message and "replacing" in event.message


def test_ignore_does_nothing() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, policy="Ignore", grace=GRACE, regrow=NO_REGROW)
    kids = existing_children(job)

    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **kids))

    assert spec_patches(actions) == []
    assert patched_pods(actions) == []
    assert deleted_pods(actions) == []
    assert not emits(actions, reason="NodeTerminating")


def test_taints_outside_the_configured_list_are_not_a_signal() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=["example.com/other"]), **existing_children(job)))
    assert spec_patches(actions) == []


def test_the_taint_list_is_configurable() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    config = OperatorConfig(termination_taints=("example.com/going-away",))
    nodes = _nodes(taints=["example.com/going-away"])

    actions = plan(snap(job, _pods(job), node_map=nodes, config=config, **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_cordon_is_not_a_signal_when_so_configured() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    config = OperatorConfig(cordon_is_termination=False)
    actions = plan(snap(job, _pods(job), node_map=_nodes(unschedulable=True), config=config, **existing_children(job)))
    assert spec_patches(actions) == []


def test_the_reaction_is_not_repeated_once_recorded() -> None:
    job = running_elastic_job(
        workers=2, min_replicas=2, grace=GRACE, to_delete=["pi-worker-2", "pi-worker-3"], regrow=NO_REGROW
    )
    pods = _pods(job)
    for p in pods[2:]:
        p["metadata"]["annotations"] = leaving(ts(-5), grace=GRACE)

    actions = plan(snap(job, pods, node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))

    assert spec_patches(actions) == []
    assert not emits(actions, reason="NodeTerminating")
    assert patched_pods(actions) == []


def test_suspended_job_does_not_react_to_node_termination() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    job["spec"]["runPolicy"] = {"suspend": True}
    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))
    assert spec_patches(actions) == []


def test_listed_names_are_kept_when_a_node_adds_more() -> None:
    job = running_elastic_job(workers=3, min_replicas=2, grace=GRACE, to_delete=["pi-worker-0"], regrow=NO_REGROW)

    actions = plan(snap(job, _pods(job), node_map=_nodes(taints=[SPOT_TAINT]), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["elasticPolicy"]["workersToDelete"] == ["pi-worker-0", "pi-worker-2", "pi-worker-3"]
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


# -- workers removed by someone else -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["evicted", "deleted"])
def test_externally_removed_worker_in_a_scale_in_job_lowers_replicas_and_is_not_recreated(how: str) -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    pods = _pods(job)
    pods[1] = (
        worker(job, 1, phase="Failed", reason="Evicted")
        if how == "evicted"
        else worker(job, 1, node="node-1", terminating=True)
    )

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}, "elasticPolicy": {"workersToDelete": ["pi-worker-1"]}}
    }
    assert created_names(actions, "Pod") == []
    assert emits(actions, "Normal", "WorkerLost")


def test_externally_removed_worker_at_the_floor_is_replaced() -> None:
    job = running_elastic_job(workers=2, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    pods = [worker(job, 0), worker(job, 1, phase="Failed", reason="Evicted")]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert "mpiReplicaSpecs" not in spec.patch["spec"]
    assert created_names(actions, "Pod") == ["pi-worker-2"]


def test_evicted_worker_in_a_replace_job_is_deleted_and_replaced() -> None:
    job = running_elastic_job(workers=2, policy="Replace", grace=GRACE, regrow=NO_REGROW)
    pods = [worker(job, 0), worker(job, 1, phase="Failed", reason="Evicted")]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    assert spec_patches(actions) == []
    assert deleted_pods(actions) == ["pi-worker-1"]
    assert created_names(actions, "Pod") == ["pi-worker-2"]


def test_evicted_worker_does_not_fail_an_elastic_job() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 4, grace=0, regrow=NO_REGROW)))
    world.settle("pi")
    world.kubelet_evict("pi-worker-1")

    world.settle("pi")

    assert world.replicas("pi") == 2
    assert world.worker_names("pi") == ["pi-worker-0", "pi-worker-2"]
    assert "Failed" not in [c["type"] for c in world.job("pi")["status"]["conditions"] if c["status"] == "True"]


# -- the seed's story, end to end in the world ---------------------------------------------------------------


def test_spot_taint_on_node_2_sheds_exactly_its_workers_and_keeps_node_1s() -> None:
    world = World(placement=["node-1", "node-1", "node-2", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 8, grace=GRACE, regrow=NO_REGROW)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-worker-3"]
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")}
    world.placement = ["node-1"]
    since = len(world.applied)

    world.taint("node-2", SPOT_TAINT)
    world.reconcile("pi")
    # Out of discovery at once, pods still alive.
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-1"]
    assert not any(is_terminating(world.pod(n)) for n in ("pi-worker-2", "pi-worker-3"))
    assert all(is_leaving(world.pod(n)) for n in ("pi-worker-2", "pi-worker-3"))
    assert world.replicas("pi") == 2
    world.settle("pi")

    assert world.worker_names("pi") == ["pi-worker-0", "pi-worker-1"]
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in world.workers("pi")} == {
        n: uids[n] for n in ("pi-worker-0", "pi-worker-1")
    }
    assert world.replicas("pi") == 2
    assert world.workers_to_delete("pi") == []
    assert not [p for p in world.pods() if p["status"]["phase"] == "Pending"]
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-1"]
    # They left discovery (ConfigMap written) before their pods were deleted.
    after = world.applied[since:]
    first_cm = next(i for i, a in enumerate(after) if isinstance(a, Patch) and a.kind == "ConfigMap")
    first_delete = next(i for i, a in enumerate(after) if isinstance(a, Delete))
    assert first_cm < first_delete
    running = [c for c in world.job("pi")["status"]["conditions"] if c["type"] == "Running"]
    assert running and running[0]["status"] == "True"
    assert world.errors == []
    node_events = [e for e in world.events if e.reason == "NodeTerminating"]
    assert len(node_events) == 1


def test_cordon_then_node_deletion_in_the_world_converges_without_pending_replacements() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2", "node-3")
    world.add(mpijob(workers=4, elastic_policy=elastic(2, 8, grace=GRACE, regrow=NO_REGROW)))
    world.settle("pi")
    world.placement = ["node-3"]
    world.cordon("node-1")
    world.reconcile("pi")
    world.remove_node("node-2")

    world.settle("pi")

    assert world.replicas("pi") == 2
    assert len(world.kept_workers("pi")) == 2
    assert all(world.pod(n)["spec"]["nodeName"] == "node-3" for n in world.kept_workers("pi"))
    assert world.errors == []


def test_node_being_deleted_counts_as_gone() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW)
    nodes = _nodes()
    nodes["node-2"]["metadata"]["deletionTimestamp"] = ts(-1)

    actions = plan(snap(job, _pods(job), node_map=nodes, **existing_children(job)))

    [event] = emits(actions, "Normal", "NodeTerminating")
    assert "deleted" in event.message
    assert deleted_pods(actions) == ["pi-worker-2", "pi-worker-3"]


# -- a worker that vanished while the operator was not looking ------------------------------------------------


def _discovered(job: Obj, names: list[str], leaving_names: list[str] | None = None) -> Obj:
    job["status"]["discoveredHosts"] = names
    job["status"]["leavingWorkers"] = leaving_names or []
    return job


def test_worker_gone_while_the_operator_was_down_lowers_replicas_once_and_is_not_recreated() -> None:
    names = [f"pi-worker-{i}" for i in range(4)]
    job = _discovered(running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW), names)
    pods = [p for p in _pods(job) if p["metadata"]["name"] != "pi-worker-1"]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}, "elasticPolicy": {"workersToDelete": ["pi-worker-1"]}}
    }
    assert created_names(actions, "Pod") == []
    assert emits(actions, "Normal", "WorkerLost")
    status = status_of(actions)
    assert status is not None and "pi-worker-1" not in status["discoveredHosts"]
    assert "pi-worker-1" in status["leavingWorkers"]


def test_a_crash_after_recording_a_vanished_worker_does_not_lower_replicas_again() -> None:
    # The spec patch landed (replicas 3, name listed) but the status write did not: discovery still names it.
    names = [f"pi-worker-{i}" for i in range(4)]
    job = _discovered(
        running_elastic_job(workers=3, min_replicas=2, grace=GRACE, to_delete=["pi-worker-1"], regrow=NO_REGROW), names
    )
    pods = [p for p in _pods(job) if p["metadata"]["name"] != "pi-worker-1"]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    assert spec_patches(actions) == []  # still listed, replicas untouched
    assert created_names(actions, "Pod") == []
    status = status_of(actions)
    assert status is not None and "pi-worker-1" not in status["discoveredHosts"]


def test_a_recorded_vanished_worker_is_dropped_from_the_list_once_out_of_discovery() -> None:
    job = _discovered(
        running_elastic_job(workers=3, min_replicas=2, grace=GRACE, to_delete=["pi-worker-1"], regrow=NO_REGROW),
        ["pi-worker-0", "pi-worker-2", "pi-worker-3"],
        leaving_names=["pi-worker-1"],
    )
    pods = [p for p in _pods(job) if p["metadata"]["name"] != "pi-worker-1"]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": []}}}
    assert emits(actions, "Normal", "WorkerRemoved")
    assert not emits(actions, "Warning")
    assert created_names(actions, "Pod") == []


def test_worker_gone_while_the_operator_was_down_is_recreated_in_a_replace_job() -> None:
    names = [f"pi-worker-{i}" for i in range(4)]
    job = _discovered(
        running_elastic_job(workers=4, min_replicas=2, policy="Replace", grace=GRACE, regrow=NO_REGROW), names
    )
    pods = [p for p in _pods(job) if p["metadata"]["name"] != "pi-worker-1"]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    assert spec_patches(actions) == []
    assert created_names(actions, "Pod") == ["pi-worker-1"]


def test_a_worker_terminating_for_a_while_after_someone_deleted_it_lowers_replicas_only_once() -> None:
    world = World()
    world.add_nodes("node-1", "node-2")
    world.add(running_elastic_job(workers=4, grace=GRACE, regrow=NO_REGROW))
    world.settle("pi")
    pod = world.pod("pi-worker-1")
    pod["metadata"]["deletionTimestamp"] = ts(0)  # a graceful delete by someone else: it lingers, terminating
    world.next_rv()

    for _ in range(6):  # several reconciles while the pod is still terminating
        world.reconcile("pi")

    assert world.replicas("pi") == 3
    assert world.workers_to_delete("pi") == []
    world.finish_deletions()
    world.settle("pi")
    assert world.replicas("pi") == 3
    assert "pi-worker-1" not in world.worker_names("pi")
