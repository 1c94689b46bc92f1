"""Issue 19: a worker whose pod carries the condition DisruptionTarget=True is being killed, whatever the job
does (a graceful node shutdown, a drain's eviction, a preemption, a NoExecute taint). It leaves discovery in
the plan that first sees the condition, before its process is gone, and then follows the job's
nodeTerminationPolicy like a worker on a node with a hard signal: ScaleIn lowers replicas (never below
minReplicas) and lists it, Replace lists and replaces it, Ignore only keeps it out of discovery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from mpijob.api import constants as c
from mpijob.planner import discovery
from mpijob.planner.actions import Action, Defer
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj

from .builders import (
    NO_REGROW,
    NS,
    config_data,
    created_names,
    deleted_pods,
    disruption_target,
    elastic,
    emits,
    existing_children,
    hosts_in,
    mpijob,
    node,
    patched_pods,
    patches,
    requeue,
    running_elastic_job,
    snap,
    spec_patches,
    status_of,
    worker,
)
from .world import World, is_leaving, is_terminating

GRACE = 30
REASONS = ["TerminationByKubelet", "EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager"]


def _pods(job: Obj, count: int = 4, *, disrupted: int = 2, reason: str = "TerminationByKubelet") -> list[Obj]:
    """Workers 0..count-1 on node-1 and node-2 (two each), Running; worker `disrupted` is being killed."""
    return [
        worker(job, i, node=f"node-{i // 2 + 1}", disruption=reason if i == disrupted else None) for i in range(count)
    ]


def _nodes() -> dict[str, Obj]:
    return {"node-1": node("node-1"), "node-2": node("node-2")}


def _serving(job: Obj, count: int = 4) -> dict[str, Any]:
    """snap() keyword arguments: the job's children, its discovery list naming workers 0..count-1."""
    hosts = [f"pi-worker-{i}.pi.{NS}.svc" for i in range(count)]
    return existing_children(job, data={c.DISCOVERED_HOSTS_KEY: discovery.payload(NS, "pi", hosts, 1, "earlier")})


def _discovered(actions: Sequence[Action]) -> list[str]:
    data = config_data(actions)
    assert data is not None, "the discovery list is written"
    return hosts_in(data[c.DISCOVERED_HOSTS_KEY])


@pytest.mark.parametrize("reason", REASONS)
def test_a_disruption_target_leaves_discovery_in_the_plan_that_first_sees_it_and_scale_in_lists_it(
    reason: str,
) -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)

    actions = plan(snap(job, _pods(job, reason=reason), node_map=_nodes(), **_serving(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {
        "spec": {
            "mpiReplicaSpecs": {"Worker": {"replicas": 3}},
            "elasticPolicy": {"workersToDelete": ["pi-worker-2"]},
        }
    }
    # Out of discovery first (the urgent phase), while its pod still runs: deleted after the grace period.
    assert _discovered(actions.leave_discovery) == ["pi-worker-0", "pi-worker-1", "pi-worker-3"]
    assert deleted_pods(actions) == []
    assert requeue(actions) == GRACE
    [mark] = patches(actions, "Pod", "pi-worker-2")
    assert mark.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_REASON] == "disruption-target"
    [event] = emits(actions, "Normal", "WorkerLost")
    assert f"pi-worker-2 (DisruptionTarget {reason})" in event.message
    assert "Worker replicas 4 -> 3" in event.message
    assert not emits(actions, reason="WorkersDisrupted"), "ScaleIn says WorkerLost, as for a delete"
    assert not emits(actions, reason="NodeTerminating"), "its node has no signal"
    assert not emits(actions, reason="WorkersLeaving"), "announced once, by its own Event"
    assert created_names(actions, "Pod") == []
    status = status_of(actions)
    assert status is not None and "pi-worker-2" not in status["discoveredHosts"]
    assert "pi-worker-2" in status["leavingWorkers"]


def test_a_disruption_target_with_status_false_is_no_signal() -> None:
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)
    pods = _pods(job, disrupted=-1)
    pods[2]["status"]["conditions"].append(disruption_target("EvictionByEvictionAPI", status="False"))

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    assert spec_patches(actions) == []
    assert patched_pods(actions) == []
    assert not emits(actions, reason="WorkersDisrupted")


def test_scale_in_for_a_disruption_target_never_goes_below_min_replicas_and_replaces_the_rest() -> None:
    job = running_elastic_job(workers=2, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)
    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-2", disruption="EvictionByEvictionAPI")]

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": ["pi-worker-1"]}}}
    assert created_names(actions, "Pod") == ["pi-worker-2"]
    [event] = emits(actions, "Normal", "WorkerLost")
    assert "minReplicas 2" in event.message


def test_replace_lists_a_disruption_target_without_lowering_replicas_and_replaces_it() -> None:
    job = running_elastic_job(
        workers=4, min_replicas=2, policy="Replace", grace=GRACE, regrow=NO_REGROW, discovered=True
    )

    actions = plan(snap(job, _pods(job, reason="PreemptionByScheduler"), node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": ["pi-worker-2"]}}}
    assert created_names(actions, "Pod") == ["pi-worker-4"]
    assert _discovered(actions) == ["pi-worker-0", "pi-worker-1", "pi-worker-3"]
    [event] = emits(actions, "Normal", "WorkersDisrupted")
    assert "replacing" in event.message


def test_ignore_only_takes_a_disruption_target_out_of_discovery_and_says_so_once() -> None:
    job = running_elastic_job(
        workers=4, min_replicas=2, policy="Ignore", grace=GRACE, regrow=NO_REGROW, discovered=True
    )
    kids = _serving(job)

    actions = plan(snap(job, _pods(job), node_map=_nodes(), **kids))

    # No decision: not listed, not marked, not deleted, not replaced (it still counts until it is gone).
    assert spec_patches(actions) == []
    assert patched_pods(actions) == []
    assert deleted_pods(actions) == []
    assert created_names(actions, "Pod") == []
    assert _discovered(actions) == ["pi-worker-0", "pi-worker-1", "pi-worker-3"]
    [event] = emits(actions, "Normal", "WorkersDisrupted")
    assert "pi-worker-2" in event.message and "Ignore" in event.message
    status = status_of(actions)
    assert status is not None and status["discoveredHosts"] == ["pi-worker-0", "pi-worker-1", "pi-worker-3"]

    # The next plan (the status says it is out of discovery already) says nothing more.
    again = {**job, "status": {**job["status"], "discoveredHosts": status["discoveredHosts"]}}
    assert not emits(plan(snap(again, _pods(again), node_map=_nodes(), **kids)), reason="WorkersDisrupted")


def test_ignore_replaces_a_disruption_target_once_it_is_gone() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, node_termination_policy="Ignore", grace=0)))
    world.settle("pi")

    world.disrupt("pi-worker-1", "TerminationByKubelet")
    world.settle("pi")
    assert world.discovered("pi") == ["pi-worker-0"]
    assert world.kept_workers("pi") == ["pi-worker-0", "pi-worker-1"], "no decision under Ignore"

    world.shut_down("pi-worker-1")
    world.settle("pi")
    assert world.replicas("pi") == 2
    assert len(world.kept_workers("pi")) == 2 and "pi-worker-1" not in world.discovered("pi")
    assert world.errors == []


def test_a_disruption_target_on_a_cordoned_node_at_the_floor_is_not_held() -> None:
    # A cordon alone is held at the floor (rule 8); a pod that is being killed is not: holding it would keep
    # a dying host in discovery.
    job = running_elastic_job(workers=2, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)
    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-2", disruption="EvictionByEvictionAPI")]
    nodes = {"node-1": node("node-1"), "node-2": node("node-2", unschedulable=True)}

    actions = plan(snap(job, pods, node_map=nodes, **existing_children(job)))

    assert _discovered(actions) == ["pi-worker-0"]
    assert not emits(actions, reason="FloorHeld")
    assert created_names(actions, "Pod") == ["pi-worker-2"]


def test_a_worker_evicted_through_the_eviction_api_is_named_with_its_signal_when_replicas_follow() -> None:
    # The Eviction API sets the condition and deletes the pod: it is terminating before the operator acts.
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)
    pods = _pods(job, disrupted=-1)
    pods[1] = worker(job, 1, node="node-1", terminating=True, disruption="EvictionByEvictionAPI")

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    [event] = emits(actions, "Normal", "WorkerLost")
    assert "pi-worker-1 (DisruptionTarget EvictionByEvictionAPI)" in event.message
    assert _discovered(actions) == ["pi-worker-0", "pi-worker-2", "pi-worker-3"]


def test_a_pod_the_kubelet_stopped_for_a_node_shutdown_without_the_condition_is_a_disruption_too() -> None:
    # Kubelets before 1.26 set no condition: status.reason Terminated and the node-shutdown message say it.
    job = running_elastic_job(
        workers=4, min_replicas=2, policy="Replace", grace=GRACE, regrow=NO_REGROW, discovered=True
    )
    pods = _pods(job, disrupted=-1)
    pods[2] = worker(
        job,
        2,
        node="node-2",
        phase="Failed",
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
    )

    actions = plan(snap(job, pods, node_map=_nodes(), **existing_children(job)))

    [mark] = patches(actions, "Pod", "pi-worker-2")
    assert mark.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_REASON] == "disruption-target"
    assert deleted_pods(actions) == ["pi-worker-2"], "not Running: deleted at once"
    assert created_names(actions, "Pod") == ["pi-worker-4"]


def test_world_a_graceful_node_shutdown_takes_the_worker_out_of_discovery_before_its_process_stops() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, node_termination_policy="Replace", grace=GRACE)))
    world.settle("pi")
    world.placement = ["node-1"]

    world.disrupt("pi-worker-1", "TerminationByKubelet")
    world.reconcile("pi")

    # Out of discovery at once, the pod still running (the kubelet has not stopped it yet), a replacement made.
    assert world.discovered("pi") == ["pi-worker-0"]
    pod = world.pod("pi-worker-1")
    assert pod["status"]["phase"] == "Running" and not is_terminating(pod) and is_leaving(pod)
    assert world.workers_to_delete("pi") == ["pi-worker-1"]
    world.shut_down("pi-worker-1")
    world.settle("pi")
    assert world.worker_names("pi") == ["pi-worker-0", "pi-worker-2"]
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-2"]
    assert world.workers_to_delete("pi") == []
    assert world.errors == []


def test_world_a_disruption_is_announced_once_even_when_the_mark_after_its_record_meets_a_409() -> None:
    """The kubelet updates the pod it is about to stop: a leaving mark planned before that update gets a 409,
    after the spec patch recorded the decision. The WorkerLost Event rides on that patch; it used to be
    lost (the next plan reads the name as listed)."""
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(2, 8, grace=GRACE, regrow=NO_REGROW)))
    world.settle("pi")
    world.disrupt("pi-worker-1", "TerminationByKubelet")
    actions = plan(world.snapshot("pi"))
    while any(isinstance(a, Defer) for a in actions):
        world.apply(actions)
        actions = plan(world.snapshot("pi"))
    assert [p for p in patched_pods(actions) if p == "pi-worker-1"], actions
    world.objects[("Pod", "pi-worker-1")]["metadata"]["resourceVersion"] = world.next_rv()  # the kubelet's write

    err = world.apply(actions)
    world.settle("pi")

    assert err is not None and err.code == 409
    said = [e.message for e in world.events if e.reason == "WorkerLost"]
    assert len(said) == 1 and "pi-worker-1" in said[0] and "TerminationByKubelet" in said[0], said


@pytest.mark.parametrize("seen", ["the DisruptionTarget condition", "the delete after it", "the pod gone"])
def test_an_eviction_gives_one_worker_lost_event_whichever_of_its_writes_the_plan_sees(seen: str) -> None:
    """The Eviction API writes twice (the DisruptionTarget condition, then the delete) and the pod then goes:
    a plan may see any of the three. The same fact gives the same Event and the same decision; a plan that
    saw the condition used to say WorkersDisrupted, one that saw the delete WorkerLost (issue 31)."""
    job = running_elastic_job(workers=4, min_replicas=2, grace=GRACE, regrow=NO_REGROW, discovered=True)
    pods = _pods(job, reason="EvictionByEvictionAPI")
    if seen == "the delete after it":
        pods[2]["metadata"]["deletionTimestamp"] = pods[2]["metadata"]["creationTimestamp"]
    elif seen == "the pod gone":
        del pods[2]

    actions = plan(snap(job, pods, node_map=_nodes(), **_serving(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"] == {"Worker": {"replicas": 3}}
    assert spec.patch["spec"]["elasticPolicy"] == {"workersToDelete": ["pi-worker-2"]}
    [event] = emits(actions, "Normal", "WorkerLost")
    assert "pi-worker-2" in event.message and "Worker replicas 4 -> 3" in event.message
    if seen != "the pod gone":
        assert "(DisruptionTarget EvictionByEvictionAPI)" in event.message
    assert [e.reason for e in emits(actions) if "pi-worker-2" in e.message] == ["WorkerLost"]
    assert created_names(actions, "Pod") == []
