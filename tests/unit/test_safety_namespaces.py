"""Issue 8, rule 10: namespaces are walls.

An owner reference is namespace-local: a pod in another namespace that names this job's uid as its
controller (copied by hand, or by a tool) is not this job's worker, neither in the cache's per-job view nor
in the planner.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.cache import Cache

from .builders import (
    config_data,
    deleted_pods,
    elastic,
    existing_children,
    hosts_in,
    mpijob,
    patched_pods,
    running_status,
    snap,
    worker,
)


def _impostor(job: dict, index: int) -> dict:  # type: ignore[type-arg]
    pod = worker(job, index)
    pod["metadata"]["namespace"] = "team-b"
    pod["metadata"]["uid"] = f"uid-impostor-{index}"
    return pod


def test_pod_of_another_namespace_with_our_uid_is_not_a_worker() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4), status=running_status())
    ours = [worker(job, 0)]
    impostor = _impostor(job, 1)

    actions = plan(snap(job, [*ours, impostor], **existing_children(job)))

    # It is not counted (a replacement for index 1's slot is created) and never touched.
    assert "pi-worker-1" not in patched_pods(actions) + deleted_pods(actions)
    data = config_data(actions)
    assert data is None or "pi-worker-1" not in hosts_in(data["discover_hosts.sh"])


def test_cache_view_of_a_job_leaves_out_pods_of_other_namespaces() -> None:
    job = mpijob(workers=2)
    ours = worker(job, 0)
    impostor = _impostor(job, 1)
    uid = job["metadata"]["uid"]
    cache = Cache()
    cache.put("mpijobs", ("team-a", "pi"), job)
    for pod in (ours, impostor):
        meta = pod["metadata"]
        assert meta["ownerReferences"][0]["uid"] == uid  # both name the job as their controller
        cache.put("pods", (meta["namespace"], meta["name"]), pod)

    snapshot = cache.snapshot(copy.deepcopy(job), datetime.now(UTC), OperatorConfig())

    assert [p["metadata"]["name"] for p in snapshot.owned_pods] == ["pi-worker-0"]
