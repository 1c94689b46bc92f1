"""The priority a watch event gives its jobs (runtime/signals.py): SIGNAL for what can change who is in a
launcher's discovery, NORMAL for the rest; read from the event alone, so the same event always gets the same."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mpijob.api import constants as c
from mpijob.runtime.signals import event_priority
from mpijob.runtime.workqueue import NORMAL, SIGNAL

from .builders import mpijob, worker

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
