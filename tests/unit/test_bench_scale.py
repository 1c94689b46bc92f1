"""bench/scale.py: the figures it reports come from what the API and the operator's metrics show."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale

from mpijob.api import constants as c
from mpijob.planner.discovery import payload


def _cm(job: str, *pods: str) -> dict[str, object]:
    # The list as the operator writes it: hosts are `<pod>.<service>...` names
    hosts = [f"{p}.{job}.ns.svc" for p in pods]
    text = payload("ns", job, hosts, 1, "2026-12-01T00:00:00Z")
    return {"kind": "ConfigMap", "metadata": {"name": f"{job}-config"}, "data": {c.DISCOVERED_HOSTS_KEY: text}}


def test_p99_of_a_hundred_values_is_the_ninety_ninth_not_the_last() -> None:
    values = [float(i) for i in range(1, 101)]
    assert scale.percentile(values, 0.99) == 99.0
    assert scale.percentile(values, 0.50) == 50.0
    assert scale.percentile([3.0], 0.99) == 3.0


def test_a_job_counts_once_from_its_first_matching_list_after_the_start() -> None:
    events = [
        (9.0, "MODIFIED", _cm("j", "j-worker-0")),  # before the start: ignored
        (10.5, "MODIFIED", _cm("j", "j-worker-0", "j-worker-1")),
        (11.0, "MODIFIED", _cm("j", "j-worker-0")),
        (12.0, "MODIFIED", _cm("j", "j-worker-0")),
        (13.0, "MODIFIED", _cm("k", "k-worker-0")),
    ]
    wanted = {"j": {"j-worker-0"}}
    assert scale.first_times(events, 10.0, lambda job, listed: wanted.get(job) == listed) == {"j": 1.0}


def test_an_empty_list_is_not_a_list_without_the_victims() -> None:
    events = [(1.0, "MODIFIED", _cm("j")), (2.0, "MODIFIED", _cm("j", "j-worker-1"))]
    victims = {"j": {"j-worker-0"}}

    def clean(job: str, listed: set[str]) -> bool:
        return bool(listed) and not listed & victims[job]

    assert scale.first_times(events, 0.0, clean) == {"j": 2.0}


def test_changes_are_counted_per_job_across_kinds_from_the_restart_on() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "a-worker-3", "labels": {c.LABEL_JOB_NAME: "a"}}}
    job = {"kind": "MPIJob", "metadata": {"name": "a"}}
    event = {"kind": "Event", "metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "b-worker-1"}}
    job_event = {"kind": "Event", "metadata": {"name": "f"}, "involvedObject": {"kind": "MPIJob", "name": "a"}}
    events = [(0.5, "MODIFIED", job), (1.0, "MODIFIED", pod), (2.0, "MODIFIED", job), (3.0, "ADDED", event)]
    events.append((4.0, "ADDED", job_event))
    events.append((5.0, "MODIFIED", _cm("c", "c-worker-0")))
    assert scale.changed_jobs(events, 1.0) == {"a": 3, "b": 1, "c": 1}


def test_a_pod_is_deleted_from_its_first_event_with_a_deletion_timestamp() -> None:
    alive = {"metadata": {"name": "p"}}
    dying = {"metadata": {"name": "p", "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    gone = scale.deletions([(1.0, "MODIFIED", alive), (2.0, "MODIFIED", dying), (3.0, "DELETED", dying)])
    assert list(gone) == ["p"] and gone["p"][0] == 2.0


def test_writes_and_sums_are_read_from_the_metrics_exposition() -> None:
    text = (
        "# HELP mpijob_api_writes_total API writes\n# TYPE mpijob_api_writes_total counter\n"
        'mpijob_api_writes_total{verb="delete",resource="pods",code="200"} 4.0\n'
        'mpijob_api_writes_total{verb="patch",resource="mpijobs",code="200"} 0.0\n'
        "# HELP mpi_operator_job_info info\n# TYPE mpi_operator_job_info gauge\n"
        'mpi_operator_job_info{launcher="a-launcher",namespace="n"} 1.0\n'
        'mpi_operator_job_info{launcher="b-launcher",namespace="n"} 1.0\n'
    )
    assert scale.writes_by_resource(text) == {"delete pods 200": 4}
    assert len(scale.metric_samples(text, "mpi_operator_job_info")) == 2
    assert scale.metric_sum(text, "mpijob_api_writes_total") == 4.0


def _audit(verb: str, resource: str, name: str, received: str, done: str, agent: str, sub: str = "") -> bytes:
    ref = {"resource": resource, "name": name, "namespace": "bench", **({"subresource": sub} if sub else {})}
    at = "2026-12-07T01:00:"
    event = {"stage": "ResponseComplete", "verb": verb, "objectRef": ref, "userAgent": agent,
             "requestReceivedTimestamp": f"{at}{received}Z", "stageTimestamp": f"{at}{done}Z"}  # fmt: skip
    return json.dumps(event).encode()


def test_the_scale_in_trace_times_each_jobs_first_operator_write_after_its_patch() -> None:
    bench, operator = f"{scale.BENCH_AGENT}/1", "OpenAPI-Generator/operator"
    lines = [
        _audit("patch", "configmaps", "scale-1-config", "00.000000", "00.010000", operator),  # before the patch
        _audit("patch", "mpijobs", "scale-1", "01.000000", "01.100000", bench),
        _audit("patch", "mpijobs", "scale-1", "01.200000", "01.300000", operator, sub="status"),
        _audit("patch", "configmaps", "scale-1-config", "01.600000", "01.650000", operator),
        _audit("patch", "configmaps", "scale-1-config", "03.000000", "03.010000", operator),  # a later one
        _audit("patch", "mpijobs", "scale-2", "01.000000", "01.200000", bench),
        _audit("patch", "configmaps", "taint-3-config", "01.500000", "01.510000", operator),  # not scaled in
    ]
    trace = scale.scale_in_trace(lines, {"scale-1", "scale-2"})
    assert trace["_scale_in_patch_to_operator_write_s"] == [pytest.approx(0.5)]
    assert trace["scale_in_operator_write_took_max_s"] == pytest.approx(0.05)
    assert trace["scale_in_jobs_without_operator_write"] == 1  # scale-2: no write seen
