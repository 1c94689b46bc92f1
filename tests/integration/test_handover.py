"""Live hand-over from the reference operator (kubeflow/mpi-operator v0.8.2, built from its Go module by
bench/reference/build.sh) to mpijob, and back, as docs/migration.md tells a user to do it.

On a testbed of this module's own (the reference's CRD replaces ours there): the reference runs jobs in every
phase; it is stopped; our CRD and the shipped RBAC are applied; `mpijob operator` starts under that RBAC.
What is proven is what a user sees with kubectl: which objects kept their uid, which pods appeared, the
jobs' conditions, and the operator's own counters (/metrics) for what it wrote.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import Kube, eventually, has_condition, job_has, live, mpijob
from kubernetes_asyncio.client import CoreV1Api
from operator_harness import OperatorProcess
from rbac import operator_kubeconfig
from reference_operator import CRD_PATH, REFERENCE, Reference, reference_built

from mpijob.api import constants as c
from mpijob.cli.operator import install_crd
from mpijob.kube.client import ApiError, Client
from mpijob_testbed import cluster
from mpijob_testbed.client import load_api_client
from mpijob_testbed.pods import complete_pod

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
NS = "handover"
# Where the jobs are when the reference stops.
RUNNING = ("running-a", "running-b", "scaled", "elastic", "back")
QUIET_SECONDS = 30


@dataclass
class Handover:
    tb: cluster.Testbed
    kube: Kube
    reference: Reference
    mpijob: OperatorProcess
    # (kind, name) -> uid of every child of every job when the reference stopped.
    before: dict[tuple[str, str], str] = field(default_factory=dict)
    switched_at: float = 0.0


async def children(kube: Kube) -> dict[tuple[str, str], str]:
    """(kind, name) -> uid of every object a job owns or names, in the namespace."""
    out: dict[tuple[str, str], str] = {}
    for api_version, kind in (("v1", "Pod"), ("batch/v1", "Job"), ("v1", "Service"), ("v1", "ConfigMap")):
        for obj in await kube.list(api_version, kind):
            meta = obj["metadata"]
            if any(r.get("kind") == "MPIJob" for r in meta.get("ownerReferences") or []):
                out[(kind, meta["name"])] = meta["uid"]
    for job in await kube.list("kubeflow.org/v2beta1", "MPIJob"):
        secret = await kube.get("v1", "Secret", c.secret_name(job["metadata"]["name"]))
        if secret is not None:
            out[("Secret", secret["metadata"]["name"])] = secret["metadata"]["uid"]
    return out


def _jobs() -> list[Obj]:
    pending = {
        "spec": {"nodeSelector": {"testbed.mpijob.io/no-such-node": "x"}, "containers": [{"name": "w", "image": "x"}]}
    }
    finished = {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 40, "backoffLimit": 0}
    return [
        *(mpijob(name, workers=3) for name in RUNNING),
        mpijob("created", workers=2, worker_template=pending),
        mpijob("suspended", workers=2, run_policy={"suspend": True}),
        mpijob("succeeded", workers=2, run_policy=finished),
        mpijob("failed", workers=2, run_policy=finished),
    ]


async def _under_the_reference(h: Handover) -> None:
    """Every job in its phase under the reference: Running, Created (pods Pending), Suspended, Succeeded,
    Failed (the launcher pod made to finish by the testbed's kwok stage)."""
    for job in _jobs():
        await h.kube.create(job)

    async def running(name: str) -> bool:
        return has_condition(await h.kube.job(name), "Running") and len(live(await h.kube.workers(name))) >= 2

    for name in (*RUNNING, "succeeded", "failed"):
        await eventually(lambda n=name: running(n), within=120, what=f"{name} Running under the reference")
    for name, ok in (("succeeded", True), ("failed", False)):
        pod = (await h.kube.launcher_pods(name))[0]["metadata"]["name"]
        await complete_pod(h.tb.kubeconfig, NS, pod, succeeded=ok)
    for name, cond in (("succeeded", "Succeeded"), ("failed", "Failed"), ("suspended", "Suspended")):
        await eventually(lambda n=name, k=cond: job_has(h.kube, n, k), within=120, what=f"{name} {cond}")
    await eventually(lambda: job_has(h.kube, "created", "Created"), within=60, what="created Created")


@pytest.fixture(scope="module")
def handover_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.Testbed]:
    reference_built()
    state = tmp_path_factory.mktemp("handover-testbed")
    tb = cluster.up(nodes=2, state_dir=state)
    try:
        yield tb
    finally:
        cluster.down(state)


@pytest.fixture(scope="module")
async def handover(handover_testbed: cluster.Testbed) -> AsyncIterator[Handover]:
    tb = handover_testbed
    api = await load_api_client(tb.kubeconfig)
    async with api:
        client = Client(api, qps=0, burst=1)
        await client.create(CRD_PATH, yaml.safe_load((REFERENCE / "crd.yaml").read_text()))
        v1 = CoreV1Api(api)
        for ns in (NS, "mpi-operator"):
            await v1.create_namespace({"metadata": {"name": ns}})
        ours = await operator_kubeconfig(client, tb.kubeconfig, tb.state_dir / "operator-kubeconfig")
        h = Handover(tb, Kube(client, NS), Reference(tb.kubeconfig, tb.state_dir / "reference.log"),
                     OperatorProcess(ours, tb.state_dir, metrics=True))  # fmt: skip
        await eventually(lambda: _default_sa(v1), within=60, what="the default ServiceAccount")
        await eventually(lambda: _served(h.kube), within=60, what="the reference's CRD served")
        h.reference.start()
        try:
            await _under_the_reference(h)
            await asyncio.sleep(3)  # the reference's last status writes
            h.reference.stop()
            h.before = await children(h.kube)
            await install_crd(str(tb.kubeconfig))
            h.switched_at = time.monotonic()
            h.mpijob.start()
            yield h
        finally:
            h.mpijob.stop()
            h.reference.stop()


async def _served(kube: Kube) -> bool:
    try:
        await kube.list("kubeflow.org/v2beta1", "MPIJob")
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


async def _default_sa(v1: CoreV1Api) -> bool:
    return any(x.metadata.name == "default" for x in (await v1.list_namespaced_service_account(NS)).items)


def metric_sum(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.MULTILINE))


async def test_nothing_of_a_job_the_reference_ran_is_deleted_or_recreated_after_the_switch(handover: Handover) -> None:
    h = handover
    await asyncio.sleep(max(0.0, QUIET_SECONDS - (time.monotonic() - h.switched_at)))
    after = await children(h.kube)
    replaced = {k: (v, after.get(k)) for k, v in h.before.items() if after.get(k) != v}
    new = sorted(k for k in after if k not in h.before)
    assert not replaced and not new, (replaced, new, h.mpijob.log_tail())
    for name in RUNNING:
        job = await h.kube.job(name)
        assert has_condition(job, "Running"), (name, job.get("status"))
        assert (job["status"].get("replicaStatuses") or {}).get("Worker", {}).get("active") == 3, job["status"]


async def test_finished_adopted_jobs_are_not_restarted_and_their_ttl_and_clean_pod_policy_hold(
    handover: Handover,
) -> None:
    kube = handover.kube
    for name in ("succeeded", "failed"):
        assert not live(await kube.workers(name)), f"{name}: cleanPodPolicy Running left workers"
        assert not [p for p in await kube.launcher_pods(name) if p["status"].get("phase") in ("Pending", "Running")]

    async def gone(name: str) -> bool:
        return await kube.get("kubeflow.org/v2beta1", "MPIJob", name) is None

    for name in ("succeeded", "failed"):  # ttlSecondsAfterFinished: 40
        await eventually(lambda n=name: gone(n), within=90, what=f"{name} deleted by its TTL")


async def test_an_operator_that_adopted_the_references_jobs_is_as_quiet_as_one_that_started_them(
    handover: Handover,
) -> None:
    """The issue's spin: adopted jobs were planned every 3 ms with no write landing. Once adopted, nothing
    changing means no reconcile and no write. Run after the finished jobs' TTL deleted them (a change)."""
    h = handover
    port = h.mpijob.metrics_port

    async def settled() -> tuple[float, float] | None:
        first = (
            metric_sum(port, "mpijob_reconcile_duration_seconds_count"),
            metric_sum(port, "mpijob_api_writes_total"),
        )
        await asyncio.sleep(3)
        second = (
            metric_sum(port, "mpijob_reconcile_duration_seconds_count"),
            metric_sum(port, "mpijob_api_writes_total"),
        )
        return second if first == second else None

    before = await eventually(settled, within=90, interval=1, what="the operator settled after the switch")
    await asyncio.sleep(10)
    after = (metric_sum(port, "mpijob_reconcile_duration_seconds_count"), metric_sum(port, "mpijob_api_writes_total"))
    if after != before:
        print(h.mpijob.log_tail(200))  # shown with the failure: what was planned and written
    assert after == before, (before, after)
    assert before[0] > 0, "no reconcile at all: the operator never looked at the adopted jobs"


async def test_a_plain_scale_down_of_an_adopted_job_deletes_its_highest_index_worker(handover: Handover) -> None:
    kube = handover.kube
    kept = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("scaled"))}
    await kube.patch_job("scaled", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}})

    async def scaled() -> list[str] | None:
        names = sorted(p["metadata"]["name"] for p in live(await kube.workers("scaled")))
        return names if names == ["scaled-worker-0", "scaled-worker-1"] else None

    await eventually(scaled, within=60, what="scaled-worker-2 deleted, as the reference would")
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("scaled"))}
    assert all(kept[n] == u for n, u in now.items()), (kept, now)


async def test_an_elastic_policy_added_to_an_adopted_job_removes_exactly_the_named_worker_discovery_first(
    handover: Handover,
) -> None:
    kube = handover.kube
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("elastic"))}
    policy = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "scaleInGracePeriodSeconds": 3,
        "workersToDelete": ["elastic-worker-0"],
    }
    await kube.patch_job("elastic", {"spec": {"elasticPolicy": policy, "mpiReplicaSpecs": {"Worker": {"replicas": 2}}}})
    dropped_at = terminating_at = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and terminating_at is None:
        cm = await kube.get("v1", "ConfigMap", c.config_map_name("elastic")) or {}
        listed = (cm.get("data") or {}).get(c.DISCOVERED_HOSTS_KEY, "")
        if dropped_at is None and listed and "elastic-worker-0" not in listed:
            dropped_at = time.monotonic()
        pod = await kube.get("v1", "Pod", "elastic-worker-0")
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            terminating_at = time.monotonic()
        await asyncio.sleep(0.1)
    assert dropped_at is not None and terminating_at is not None, (
        dropped_at,
        terminating_at,
        handover.mpijob.log_tail(),
    )
    assert dropped_at < terminating_at, (dropped_at, terminating_at)

    async def only_the_named_one_gone() -> dict[str, str] | None:
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("elastic"))}
        return now if set(now) == {"elastic-worker-1", "elastic-worker-2"} else None

    now = await eventually(only_the_named_one_gone, within=60, what="only elastic-worker-0 gone")
    assert all(before[n] == u for n, u in now.items()), (before, now)


async def test_adopted_created_and_suspended_jobs_run_when_they_can(handover: Handover) -> None:
    kube = handover.kube
    await kube.patch_job("suspended", {"spec": {"runPolicy": {"suspend": False}}})

    async def running(name: str, workers: int) -> bool:
        return has_condition(await kube.job(name), "Running") and len(live(await kube.workers(name))) == workers

    await eventually(lambda: running("suspended", 2), within=90, what="the resumed job Running")
    pending = [p for p in await kube.workers("created") if p["status"].get("phase") == "Pending"]
    assert len(pending) == 2 and not has_condition(await kube.job("created"), "Running"), pending


async def test_back_to_the_reference_a_job_without_elastic_policy_keeps_running_and_scales_down(
    handover: Handover,
) -> None:
    """The reverse, run last: mpijob stopped, the reference started again (with our CRD in place, which
    serves every field it knows). Nothing of `back` is deleted or recreated; a scale-down works under it."""
    h, kube = handover, handover.kube
    h.mpijob.stop()
    before = {k: v for k, v in (await children(kube)).items() if k[1].startswith("back")}
    h.reference.start()
    await asyncio.sleep(QUIET_SECONDS)
    after = {k: v for k, v in (await children(kube)).items() if k[1].startswith("back")}
    assert after == before, {
        k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)
    }
    assert has_condition(await kube.job("back"), "Running")
    await kube.patch_job("back", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}})

    async def scaled() -> bool:
        return sorted(p["metadata"]["name"] for p in live(await kube.workers("back"))) == [
            "back-worker-0",
            "back-worker-1",
        ]

    await eventually(scaled, within=90, what="back-worker-2 deleted by the reference")
