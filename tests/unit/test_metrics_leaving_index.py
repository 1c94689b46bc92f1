"""The metrics' leaving workers are kept in their job's record (runtime/record.py): each applied batch reads
its own job's (no scan of every leaving worker, no second index to keep in step), and a worker that went away
without us deleting it is forgotten at its job's next batch (bounded memory)."""

from __future__ import annotations

from mpijob.api import constants as c
from mpijob.app.metrics import Metrics
from mpijob.planner.actions import LEAVING, Patch, Tag
from mpijob.runtime.cache import Cache

from .builders import mpijob


def _cache(*names: str) -> Cache:
    cache = Cache()
    for index in Cache.INDEXES:
        cache.indexes[index] = {}
    for name in names:
        pod = {"metadata": {"name": name, "namespace": "ns"}, "status": {"phase": "Running"}}
        cache.indexes["pods"][("ns", name)] = pod
    return cache


def _leave(pod: str) -> Patch:
    annotations = {c.ANNOTATION_LEAVING_SINCE: "t", c.ANNOTATION_LEAVING_REASON: "scale-down"}
    return Patch("v1", "Pod", pod, {"metadata": {"annotations": annotations}}, tags=(Tag(LEAVING, "scale-down"),))


def test_leaving_workers_are_kept_by_job_and_forgotten_once_gone() -> None:
    m = Metrics()
    cache = _cache("a-worker-1", "b-worker-1")
    m.applied(cache, mpijob("a", namespace="ns"), [_leave("a-worker-1")])
    m.applied(cache, mpijob("b", namespace="ns"), [_leave("b-worker-1")])
    assert set(m.records.of(("ns", "a")).stamps.leaving) == {"a-worker-1"}
    assert set(m.records.of(("ns", "b")).stamps.leaving) == {"b-worker-1"}
    del cache.indexes["pods"][("ns", "a-worker-1")]
    m.applied(cache, mpijob("a", namespace="ns"), [])
    assert m.records.of(("ns", "a")).stamps.leaving == {}
    assert set(m.records.of(("ns", "b")).stamps.leaving) == {"b-worker-1"}, "another job's batch reads only its own"
