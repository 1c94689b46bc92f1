"""Metrics are read off what the executor applied: the reference's counters and the elastic decisions count the
planner's tags on the writes that landed (planner/actions.py:Tag), the elastic timings read which were made."""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import generate_latest

from mpijob.api import constants as c
from mpijob.app.metrics import Metrics, _CacheCollector, _JobStateCollector, resource_of, signal_label
from mpijob.planner.actions import LEAVING, Create, Delete, Emit, Patch, Tag
from mpijob.planner.draft import status_write
from mpijob.planner.status import read_status
from mpijob.runtime.cache import Cache

from .builders import SPOT_TAINT, elastic, mpijob
from .world import World


def _cache(pods: list[dict[str, Any]], jobs: tuple[tuple[str, str], ...] = ()) -> Cache:
    cache = Cache()
    for name in Cache.INDEXES:
        cache.indexes[name] = {}
    for pod in pods:
        cache.indexes["pods"][("ns", pod["metadata"]["name"])] = pod
    for key in jobs:
        cache.indexes["mpijobs"][key] = {}
    return cache


def _pod(name: str, node: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": node}, "status": {"phase": phase}}


def _bare_job(**status: Any) -> dict[str, Any]:
    """Only the fields the metrics read of a job, not an MPIJob as the API returns it (builders.mpijob)."""
    return {"metadata": {"name": "j", "namespace": "ns", "generation": 3}, "spec": {}, "status": status}


def _value(m: Metrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_request_paths_map_to_resources_and_subresources() -> None:
    assert resource_of("/api/v1/namespaces/a/pods/p") == "pods"
    assert resource_of("/api/v1/namespaces/a/pods") == "pods"
    assert resource_of("/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j/status") == "mpijobs/status"
    assert resource_of("/apis/policy/v1/namespaces/a/poddisruptionbudgets/x") == "poddisruptionbudgets"
    assert resource_of("/api/v1/nodes/n1") == "nodes"
    assert signal_label("taint karpenter.sh/disrupted") == "taint:karpenter.sh/disrupted"
    assert signal_label("deleted") == "node-deleted"


def _status_write(before: list[dict[str, str]], after: list[dict[str, str]]) -> Patch:
    """The planner's status write from a job with conditions `before` to `after` (draft.status_write tags the
    conditions it turns True)."""
    job = _bare_job(conditions=before)
    patch = status_write(job, job["status"], read_status({"conditions": after}), "t")
    assert patch is not None
    return patch


def _leave(pod: str, reason: str) -> Patch:
    """A leaving mark as worker_writes.mark_leaving writes it, tagged with why."""
    annotations = {c.ANNOTATION_LEAVING_SINCE: "t", c.ANNOTATION_LEAVING_REASON: reason}
    return Patch("v1", "Pod", pod, {"metadata": {"annotations": annotations}}, tags=(Tag(LEAVING, reason),))


def test_reference_counters_count_condition_flips_not_status_writes() -> None:
    m = Metrics()
    created = [_condition("Created")]
    m.applied(_cache([]), _bare_job(), [_status_write([], created)])
    # A later status write that still says Created is not a new job.
    later = _status_write(created, [*created, _condition("Running")])
    m.applied(_cache([]), _bare_job(conditions=created), [later])
    assert _value(m, "mpi_operator_jobs_created_total") == 1
    done = _status_write(created, [*created, _condition("Failed")])
    m.applied(_cache([]), _bare_job(conditions=created), [done])
    assert _value(m, "mpi_operator_jobs_failed_total") == 1
    assert _value(m, "mpi_operator_jobs_successful_total") == 0


def test_node_signal_timings_run_from_first_seen_taint_to_discovery_to_delete() -> None:
    m = Metrics()
    clock = Clock()
    m.clock = clock
    m.stamps.nodes["n2"] = (100.0, "taint:aws-node-termination-handler/spot-itn")
    cache = _cache([_pod("j-worker-0", "n2"), _pod("j-worker-1", "n1")])
    leave = _leave("j-worker-0", "workersToDelete")
    cm = Patch("v1", "ConfigMap", "j-config", {"data": {}})
    clock.now = 100.25
    m.applied(cache, _bare_job(), [leave, cm, Emit("Normal", "WorkersLeaving", "x")])
    sig = "taint:aws-node-termination-handler/spot-itn"
    assert _value(m, "mpijob_elastic_scale_in_decisions_total", signal=sig) == 1
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_sum", signal=sig) == 0.25
    clock.now = 110.25
    m.applied(cache, _bare_job(), [Delete("v1", "Pod", "j-worker-0", uid="u")])
    assert _value(m, "mpijob_elastic_workers_removed_total", signal=sig) == 1
    assert _value(m, "mpijob_elastic_discovery_to_deleted_seconds_sum", signal=sig) == 10.0
    assert _value(m, "mpijob_elastic_signal_to_deleted_seconds_sum", signal=sig) == 10.25


def test_a_worker_whose_deletion_reached_the_cache_before_its_batch_was_reported_keeps_its_signal() -> None:
    """Seen in a CI run: four leaving workers deleted in one batch, one DELETED event in the cache before the
    metrics heard of the batch; its removal was counted under signal "unknown"."""
    m = Metrics()
    sig = "taint:aws-node-termination-handler/spot-itn"
    m.stamps.nodes["n2"] = (100.0, sig)
    cache = _cache([_pod("j-worker-0", "n2"), _pod("j-worker-1", "n2")])
    m.applied(cache, _bare_job(), [_leave("j-worker-0", "workersToDelete"), _leave("j-worker-1", "workersToDelete")])
    gone = _cache([_pod("j-worker-1", "n2")])  # j-worker-0's DELETED event came first
    m.applied(
        gone, _bare_job(), [Delete("v1", "Pod", "j-worker-0", uid="u0"), Delete("v1", "Pod", "j-worker-1", uid="u1")]
    )
    assert _value(m, "mpijob_elastic_workers_removed_total", signal=sig) == 2
    assert _value(m, "mpijob_elastic_workers_removed_total", signal="unknown") == 0


def test_a_disrupted_worker_is_labelled_disruption_target_and_timed_from_the_plan_that_saw_it() -> None:
    # Not from the job's last spec change (hours ago, maybe): the condition has no watch stamp of its own.
    m = Metrics()
    clock = Clock()
    m.clock = clock
    m.records.of(("ns", "j")).stamps.generation = (3, 5.0)
    cache = _cache([_pod("j-worker-2", "n1")])
    cm = Patch("v1", "ConfigMap", "j-config", {"data": {}})
    leave = _leave("j-worker-2", "disruption-target")
    m.applied(cache, _bare_job(), [cm, leave])  # the discovery write goes first (urgent)
    assert _value(m, "mpijob_elastic_scale_in_decisions_total", signal="disruption-target") == 1
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_count", signal="disruption-target") == 1
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_sum", signal="disruption-target") == 0.0
    clock.now = 130.0
    m.applied(cache, _bare_job(), [Delete("v1", "Pod", "j-worker-2", uid="u")])
    assert _value(m, "mpijob_elastic_workers_removed_total", signal="disruption-target") == 1
    assert _value(m, "mpijob_elastic_signal_to_deleted_seconds_sum", signal="disruption-target") == 30.0


def test_a_worker_is_out_of_discovery_only_once_the_config_map_is_written() -> None:
    m = Metrics()
    clock = Clock()
    m.clock = clock
    cache = _cache([_pod("j-worker-3", "n1")])
    leave = _leave("j-worker-3", "scale-down")
    m.applied(cache, _bare_job(), [leave])  # stopped (409) before the ConfigMap write
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_count", signal="scale-down") == 0
    clock.now = 101.0
    m.applied(cache, _bare_job(), [Create({"kind": "ConfigMap", "metadata": {"name": "j-config"}})])
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_count", signal="scale-down") == 1
    assert _value(m, "mpijob_elastic_signal_to_discovery_seconds_sum", signal="scale-down") == 1.0


def test_api_writes_are_counted_by_verb_resource_and_code_and_reads_are_not() -> None:
    m = Metrics()
    m.api_response("PATCH", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j", 409)
    m.api_response("POST", "/api/v1/namespaces/a/pods", 201)
    m.api_response("GET", "/api/v1/namespaces/a/pods", 200)
    assert _value(m, "mpijob_api_conflicts_total", verb="patch", resource="mpijobs") == 1
    assert _value(m, "mpijob_api_writes_total", verb="create", resource="pods", code="201") == 1
    assert b'verb="get"' not in generate_latest(m.registry)


def _condition(kind: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": "r", "message": "m"}


def test_jobs_by_state_and_jobs_below_min_replicas_are_read_from_the_cache_at_scrape_time() -> None:
    worker = _pod("running-below-worker-0", "n1") | {"metadata": {"name": "w0", "labels": {c.LABEL_JOB_ROLE: "worker"}}}
    pending = {"metadata": {"name": "w1", "labels": {c.LABEL_JOB_ROLE: "worker"}}, "status": {}}
    launcher = _pod("running-below-launcher", "n1") | {
        "metadata": {"name": "l", "labels": {c.LABEL_JOB_ROLE: "launcher"}}
    }
    cache = _cache([worker, pending, launcher])
    jobs = {
        "running-below": [_condition("Created"), _condition("Running"), _condition("BelowMinReplicas")],
        "running-held": [_condition("Created"), _condition("Running"), _condition("BelowMinReplicas", "False")],
        "done": [_condition("Created"), _condition("Running", "False"), _condition("Succeeded")],
        "new": [],
    }
    for name, conditions in jobs.items():
        cache.indexes["mpijobs"][("ns", name)] = {"metadata": {"name": name}, "status": {"conditions": conditions}}
    m = Metrics()
    m.registry.register(_JobStateCollector(cache))

    assert _value(m, "mpijob_elastic_jobs_below_min_replicas") == 1
    assert _value(m, "mpijob_jobs", state="Running") == 2
    assert _value(m, "mpijob_jobs", state="Succeeded") == 1
    assert _value(m, "mpijob_jobs", state="Pending") == 1
    assert _value(m, "mpijob_worker_pods", phase="Running") == 1  # the launcher is no worker
    assert _value(m, "mpijob_worker_pods", phase="Pending") == 1
    assert m.registry.get_sample_value("mpijob_jobs", {"state": "Failed"}) == 0  # present at 0, not absent

    # At scrape time: the floor held again is seen by the next scrape, with no hook in between.
    cache.indexes["mpijobs"][("ns", "running-below")]["status"]["conditions"][2]["status"] = "False"
    assert _value(m, "mpijob_elastic_jobs_below_min_replicas") == 0


def test_an_unready_cache_reports_zero_jobs_rather_than_a_partial_count() -> None:
    cache = Cache()
    cache.ready = False  # not every informer has listed yet
    cache.indexes["mpijobs"][("ns", "half-listed")] = {"metadata": {"name": "half-listed"}, "status": {}}
    m = Metrics()
    m.registry.register(_JobStateCollector(cache))
    assert m.registry.get_sample_value("mpijob_elastic_jobs_below_min_replicas") == 0
    assert m.registry.get_sample_value("mpijob_jobs", {"state": "Running"}) == 0


def test_conflicts_of_preconditioned_writes_are_reported_at_zero_before_the_first_one() -> None:
    m = Metrics()
    for resource in ("mpijobs", "mpijobs/status", "pods", "configmaps"):
        assert m.registry.get_sample_value("mpijob_api_conflicts_total", {"verb": "patch", "resource": resource}) == 0
    m.api_response("PATCH", "/api/v1/namespaces/ns/pods/p", 409)
    assert _value(m, "mpijob_api_conflicts_total", verb="patch", resource="pods") == 1


def test_regrow_probes_are_counted_created_timed_out_and_bound_and_the_gauges_read_the_cache() -> None:
    m = Metrics()
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    regrow = {"maxProbes": 2, "probeTimeoutSeconds": 60, "backoffSeconds": 20, "maxBackoffSeconds": 100}
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 8, grace=0, regrow=regrow)))
    world.settle("pi")
    cache = _cache([])

    def step(seconds: float) -> None:
        before = copy.deepcopy(world.job("pi"))
        m.applied(cache, before, world.reconcile("pi"))
        world.bind_pending()
        world.kubelet()
        world.advance(seconds)

    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    for _ in range(4):
        step(0)
    assert _value(m, "mpijob_elastic_regrow_probes_total", result="created") == 2
    world.advance(61)
    step(0)
    assert _value(m, "mpijob_elastic_regrow_probes_total", result="timed-out") == 2
    # The gauges read the job as the cache holds it: below its target, waiting in backoff.
    job = copy.deepcopy(world.job("pi"))
    cache.indexes["mpijobs"][("ns", "pi")] = job
    cache.indexes["mpijobs"][("ns", "other")] = {"metadata": {}, "spec": {}}
    job["status"]["regrow"]["nextAttemptTime"] = "2999-01-01T00:00:00Z"  # the scrape runs on the real clock
    m.registry.register(_CacheCollector(cache))  # what attach() registers
    text = generate_latest(m.registry).decode()
    assert "mpijob_elastic_jobs_below_target 1.0" in text
    assert "mpijob_elastic_jobs_regrow_backoff 1.0" in text

    world.add_nodes("node-3")
    world.placement = ["node-3"]
    for _ in range(12):
        step(30)
    assert world.replicas("pi") == 4
    assert _value(m, "mpijob_elastic_regrow_probes_total", result="bound") == 2


def test_the_regrow_probe_counters_exist_at_zero_before_the_first_probe() -> None:
    metrics = Metrics()
    for result in ("created", "bound", "timed-out"):
        assert metrics.registry.get_sample_value("mpijob_elastic_regrow_probes_total", {"result": result}) == 0


def _tags(actions: list[Any]) -> list[tuple[str, str, str]]:
    return [(type(a).__name__, t.name, t.label) for a in actions for t in getattr(a, "tags", ())]


def test_the_planner_tags_what_it_decided_and_the_metrics_count_the_tags() -> None:
    m = Metrics()
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, grace=0)))
    first = world.reconcile("pi")
    assert ("Patch", "became-true", "Created") in _tags(first), "the first status write turns Created True"
    m.applied(_cache([]), _bare_job(), first)
    assert _value(m, "mpi_operator_jobs_created_total") == 1
    world.settle("pi")
    world.taint("node-2", SPOT_TAINT)
    before = copy.deepcopy(world.job("pi"))
    cache = _cache([copy.deepcopy(p) for p in world.pods()])
    batch = world.reconcile("pi")
    assert ("Patch", "leaving", "workersToDelete") in _tags(batch), "the node's worker is marked leaving"
    m.applied(cache, before, batch)
    assert _value(m, "mpijob_elastic_scale_in_decisions_total", signal="workersToDelete") == 1
