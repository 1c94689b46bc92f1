"""The priority a watch event gives its jobs (runtime/signals.py): SIGNAL for what can change who is in a
launcher's discovery, NORMAL for the rest; read from the event alone, so the same event always gets the same."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.planner.actions import Patch
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller
from mpijob.runtime.kinds import BY_KIND
from mpijob.runtime.record import JobRecord
from mpijob.runtime.signals import event_priority
from mpijob.runtime.workqueue import NORMAL, SIGNAL

from .builders import mpijob, worker
from .fakes import RecordingClient

MPIJOBS = BY_KIND["MPIJob"]

Obj = dict[str, Any]


def _running() -> Obj:
    pod = worker(mpijob(workers=2), 0, rv="11")
    pod["spec"]["nodeName"] = "node-1"
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def _changed(obj: Obj, where: str, name: str, value: Any) -> Obj:
    made = copy.deepcopy(obj)
    made.setdefault(where, {})[name] = value
    return made


@pytest.mark.parametrize(
    "where,name,value",
    [
        ("metadata", "deletionTimestamp", "2026-03-01T12:00:00Z"),
        ("status", "phase", "Failed"),
        ("status", "phase", "Succeeded"),
        ("status", "conditions", [{"type": "Ready", "status": "False"}]),
        ("status", "conditions", [{"type": "Ready", "status": "True"}, {"type": "DisruptionTarget", "status": "True"}]),
    ],
)
def test_a_pod_going_is_a_signal(where: str, name: str, value: Any) -> None:
    pod = _running()
    assert event_priority("Pod", "MODIFIED", pod, _changed(pod, where, name, value)) == SIGNAL


def test_a_pod_deleted_is_a_signal_unless_it_was_terminating_already() -> None:
    pod = _running()
    terminating = _changed(pod, "metadata", "deletionTimestamp", "2026-03-01T12:00:00Z")
    assert event_priority("Pod", "DELETED", pod, pod) == SIGNAL
    assert event_priority("Pod", "DELETED", terminating, terminating) == NORMAL


def test_a_worker_marked_leaving_is_out_of_discovery_so_its_going_is_no_signal() -> None:
    pod = _running()
    pod["metadata"].setdefault("annotations", {})[c.ANNOTATION_LEAVING_SINCE] = "2026-03-01T12:00:00Z"
    assert event_priority("Pod", "MODIFIED", pod, _changed(pod, "metadata", "deletionTimestamp", "x")) == NORMAL
    assert event_priority("Pod", "DELETED", pod, pod) == NORMAL


def test_pod_progress_labels_and_new_pods_are_normal() -> None:
    pod = _running()
    pending = _changed(pod, "status", "phase", "Pending")
    assert event_priority("Pod", "MODIFIED", pending, pod) == NORMAL
    assert event_priority("Pod", "ADDED", None, pod) == NORMAL
    assert event_priority("Pod", "MODIFIED", pod, _changed(pod, "metadata", "resourceVersion", "12")) == NORMAL


def test_every_node_event_that_reaches_the_queue_is_a_signal() -> None:
    node = {"metadata": {"name": "node-1"}, "spec": {}}
    assert event_priority("Node", "MODIFIED", node, _changed(node, "spec", "taints", [{"key": "k"}])) == SIGNAL
    assert event_priority("Node", "DELETED", node, node) == SIGNAL


def test_an_edit_of_the_mpijob_is_a_signal_and_a_status_write_is_not() -> None:
    job = mpijob(workers=2)
    fewer = copy.deepcopy(job)
    fewer["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    annotated = _changed(job, "metadata", "annotations", {"a": "b"})
    status = _changed(job, "status", "conditions", [{"type": "Running", "status": "True"}])
    assert event_priority("MPIJob", "MODIFIED", job, fewer) == SIGNAL
    assert event_priority("MPIJob", "MODIFIED", job, annotated) == SIGNAL
    assert event_priority("MPIJob", "MODIFIED", job, status) == NORMAL
    assert event_priority("MPIJob", "ADDED", None, job) == NORMAL


def test_children_are_normal() -> None:
    cm = {"metadata": {"name": "pi-config"}, "data": {"a": "1"}}
    assert event_priority("ConfigMap", "MODIFIED", cm, _changed(cm, "data", "a", "2")) == NORMAL


# -- the echo of our own write of the MPIJob, through the controller ------------------------------------------


def _controller() -> Controller:
    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    controller.cache.ready = True
    return controller


def _queued_at(controller: Controller, old: Obj, new: Obj) -> int | None:
    controller.observed(MPIJOBS, "ADDED", MPIJOBS.slim(old))
    controller.queue.take_pending()
    controller.observed(MPIJOBS, "MODIFIED", MPIJOBS.slim(new))
    taken = controller.queue.get_nowait()
    if taken is None:
        return None
    controller.queue.done(taken[0])
    return taken[1]


def _edited(job: Obj, rv: str) -> Obj:
    made = copy.deepcopy(job)
    made["metadata"]["resourceVersion"] = rv
    made["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    return made


def test_a_users_edit_of_the_mpijob_is_a_signal_and_our_own_record_is_not() -> None:
    job = mpijob(workers=2)
    job["metadata"]["resourceVersion"] = "10"
    key = (job["metadata"]["namespace"], job["metadata"]["name"])

    users = _controller()
    assert _queued_at(users, job, _edited(job, "11")) == SIGNAL

    ours = _controller()
    ours.records.of(key).job_rv = 11  # our record's patch answered with version 11
    assert _queued_at(ours, job, _edited(job, "11")) == NORMAL
    later = _edited(job, "12")
    later["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    assert _queued_at(ours, _edited(job, "11"), later) == SIGNAL, "an edit after our write is news"


def test_an_edit_that_comes_while_we_write_the_job_is_read_as_our_echo() -> None:
    """The watch event of our write can come before the write's answer: while a write of the job is in flight,
    its events are ours (a user's edit in that instant waits at NORMAL: later, never lost)."""
    job = mpijob(workers=2)
    job["metadata"]["resourceVersion"] = "10"
    controller = _controller()
    controller.records.of((job["metadata"]["namespace"], job["metadata"]["name"])).job_writing = 1
    assert _queued_at(controller, job, _edited(job, "11")) == NORMAL


def test_the_executor_counts_a_job_write_in_flight_and_keeps_the_version_it_made() -> None:
    seen: list[int] = []
    executor = Executor(RecordingClient(), post_events=False)  # type: ignore[arg-type]
    job = mpijob(workers=2)
    job["metadata"]["resourceVersion"] = "10"
    kept = JobRecord()
    original = executor.client.merge_patch

    async def patch(path: str, body: Any, **kw: Any) -> Any:
        seen.append(kept.job_writing)
        await original(path, body, **kw)
        return {"metadata": {"resourceVersion": "42"}}

    executor.client.merge_patch = patch  # type: ignore[method-assign]
    record = Patch("kubeflow.org/v2beta1", "MPIJob", job["metadata"]["name"], {"spec": {}}, resource_version="10")
    asyncio.run(executor.apply(job, [record], kept))

    assert seen == [1] and kept.job_writing == 0
    assert kept.job_rv == 42
    assert kept.echo("42") and not kept.echo("43")
