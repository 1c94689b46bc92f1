"""Gang scheduling and Kueue, against the real components on the testbed: Kueue's controller manager (with
its webhooks) and the scheduler-plugins scheduler running the Coscheduling plugin, both built from their Go
modules by testbed/extras/build.sh. Tests skip, saying why, only when a component could not be built or
MPIJOB_TEST_KUBECONFIG points away from the testbed; in CI (CI=true) that is a failure (cannot_run.py).

Each test works on its own kwok nodes (tainted so that only its pods land there, see elastic_jobs.py) and
its own cluster-scoped Kueue objects, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cannot_run import cannot_run
from elastic_jobs import HOSTNAME, OWNER_TAINT, TOLERATE_OWNER, own_nodes
from kube import Kube, container, eventually, has_condition, label_node, live, mpijob
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.cli.elastic import scale_in
from mpijob.kube.client import ApiError
from mpijob_testbed import SPOT_ITN_TAINT, cluster, extras, taint_node
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.nodes import spread_evenly

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
POOL_LABEL = "e2e.mpijob.io/pool"
GANG_SCHEDULER = extras.COSCHEDULING_SCHEDULER_NAME


def _echo(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _components(testbed: cluster.Testbed | None, name: str) -> None:
    """Start `name` on the session's testbed; skip (with the reason; a failure under CI=true, cannot_run.py) if
    there is no testbed or it cannot be built here."""
    if testbed is None:
        cannot_run("needs the local testbed (MPIJOB_TEST_KUBECONFIG points elsewhere)")
    try:
        extras.build([name], echo=_echo)
    except TestbedError as err:
        cannot_run(f"{name} could not be built: {err}")
    cluster.start_extras((name,), testbed.state_dir, echo=_echo)


@pytest.fixture(scope="module")
def kueue(testbed: cluster.Testbed | None) -> None:
    _components(testbed, extras.KUEUE)


@pytest.fixture(scope="module")
def coscheduling(testbed: cluster.Testbed | None) -> None:
    _components(testbed, extras.COSCHEDULING)


@pytest.fixture
def gang_operator(
    coscheduling: None, running_operator: OperatorProcess, operator_kubeconfig: Path, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with --gang-scheduling in place of the session's (two operators would fight over the same
    jobs); the session's is started again by the next test that needs it. It takes `running_operator`, not
    `operator`, so that `kube` (which starts the session's when it is not running) is set up before the stop,
    never after it. As the session's, it runs as its ServiceAccount under the shipped RBAC: its PodGroup verbs
    are proven here. Its log stays in the test's tmp_path (pytest keeps the last runs' directories)."""
    running_operator.stop()
    proc = OperatorProcess(operator_kubeconfig, tmp_path, extra_args=("--gang-scheduling", GANG_SCHEDULER))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def gang_kube(gang_operator: OperatorProcess, kube: Kube, operator: OperatorProcess) -> Kube:
    """`kube`, with the gang-scheduling operator running, alone."""
    assert not operator.alive(), "the session's operator would create the job's pods without the gang"
    return kube


# -- Kueue objects ------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def kueue_queue(
    kube: Kube, nodes: list[str], *, cpu: str, preemption: bool = False
) -> AsyncIterator[tuple[str, str]]:
    """A ResourceFlavor for `nodes` (selected by a per-test pool label, tolerating the owner taint), a
    ClusterQueue with `cpu` of quota in it, and a LocalQueue in the test's namespace. Yields (local queue,
    flavor). Cluster-scoped objects are deleted on exit."""
    short = kube.ns.rsplit("-", 1)[-1]
    for node in nodes:
        await label_node(kube.client, node, {POOL_LABEL: short})
    flavor, cq, lq = f"pool-{short}", f"cq-{short}", "team"
    made: list[str] = []
    try:
        await kube.client.create(
            f"{KUEUE_API}/resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {
                    "nodeLabels": {POOL_LABEL: short},
                    "tolerations": [{"key": OWNER_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        )
        made.append(f"{KUEUE_API}/resourceflavors/{flavor}")
        spec: Obj = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
                }
            ],
        }
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        await kube.client.create(
            f"{KUEUE_API}/clusterqueues",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": spec},
        )
        made.append(f"{KUEUE_API}/clusterqueues/{cq}")
        await kube.client.create(
            f"{KUEUE_API}/namespaces/{kube.ns}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": kube.ns},
                "spec": {"clusterQueue": cq},
            },
        )

        async def active() -> bool:
            obj = await kube.client.get(f"{KUEUE_API}/clusterqueues/{cq}")
            return has_condition(obj, "Active")

        await eventually(active, within=60, what=f"ClusterQueue {cq} Active")
        yield lq, flavor
    finally:
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                await kube.client.delete(path)


@contextlib.asynccontextmanager
async def priority_classes(kube: Kube) -> AsyncIterator[tuple[str, str]]:
    short = kube.ns.rsplit("-", 1)[-1]
    low, high = f"low-{short}", f"high-{short}"
    for name, value in ((low, 100), (high, 1000)):
        await kube.client.create(
            f"{KUEUE_API}/workloadpriorityclasses",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    try:
        yield low, high
    finally:
        for name in (low, high):
            with contextlib.suppress(ApiError):
                await kube.client.delete(f"{KUEUE_API}/workloadpriorityclasses/{name}")


def _cpu_job(name: str, queue: str, *, workers: int, priority: str | None = None, **kw: Any) -> Obj:
    """A job whose pods each request one CPU (the quota Kueue counts), tolerating test nodes' owner taint."""
    res = {"requests": {"cpu": "1"}}
    body = mpijob(
        name,
        workers=workers,
        worker_template={"spec": {"containers": [container("worker", resources=res)]}},
        launcher_template={"spec": {"containers": [container("launcher", resources=res)]}},
        **kw,
    )
    labels = {c.LABEL_KUEUE_QUEUE_NAME: queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    body["metadata"]["labels"] = labels
    return body


async def _workload(kube: Kube, job: str) -> Obj | None:
    listed = await kube.client.get(f"{KUEUE_API}/namespaces/{kube.ns}/workloads")
    for wl in listed.get("items") or []:
        refs = wl["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == "MPIJob" and r.get("name") == job for r in refs):
            found: Obj = wl
            return found
    return None


async def _running_workers(kube: Kube, job: str, count: int) -> list[Obj]:
    async def check() -> list[Obj] | None:
        pods = [p for p in live(await kube.workers(job)) if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == count else None

    return await eventually(check, within=90, what=f"{count} Running workers of {job}")


# -- Kueue -------------------------------------------------------------------------------------------------


async def test_kueue_admits_a_queued_mpijob_with_its_flavor_node_selector(
    kueue: None, api: ApiClient, kube: Kube
) -> None:
    async with own_nodes(api, kube, "a", "b", spot=("a", "b")) as nodes, kueue_queue(kube, nodes, cpu="4") as (lq, _):
        created = await kube.create(_cpu_job("admitted", lq, workers=2))

        # Kueue's webhook suspends it on creation; its controller admits it by unsuspending it.
        assert created["spec"]["runPolicy"]["suspend"] is True
        workers = await _running_workers(kube, "admitted", 2)
        job = await kube.job("admitted")
        assert job["spec"]["runPolicy"]["suspend"] is False
        short = kube.ns.rsplit("-", 1)[-1]
        selector = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]
        assert selector[POOL_LABEL] == short
        assert all(p["spec"]["nodeName"] in nodes for p in workers)
        assert all(p["spec"]["nodeSelector"][POOL_LABEL] == short for p in workers)
        wl = await _workload(kube, "admitted")
        assert wl is not None and has_condition(wl, "Admitted")


async def test_kueue_preempts_a_low_priority_mpijob_for_a_higher_one_and_resumes_it(
    kueue: None, api: ApiClient, kube: Kube
) -> None:
    async with (
        own_nodes(api, kube, "a", spot=("a",)) as nodes,
        kueue_queue(kube, nodes, cpu="4", preemption=True) as (lq, _),
        priority_classes(kube) as (low, high),
    ):
        await kube.create(_cpu_job("low", lq, workers=2, priority=low))  # 3 CPUs of 4
        first = await _running_workers(kube, "low", 2)

        await kube.create(_cpu_job("high", lq, workers=2, priority=high))

        async def low_suspended() -> bool:
            job = await kube.job("low")
            return bool(job["spec"]["runPolicy"]["suspend"]) and has_condition(job, "Suspended")

        await eventually(low_suspended, within=90, what="the low-priority job suspended by Kueue")

        async def low_pods_gone() -> bool:
            return not live(await kube.workers("low")) and not live(await kube.launcher_pods("low"))

        await eventually(low_pods_gone, within=60, what="the preempted job's pods gone")
        wl = await _workload(kube, "low")
        assert wl is not None and has_condition(wl, "Evicted")
        await _running_workers(kube, "high", 2)

        await kube.delete(API_VERSION, "MPIJob", "high")

        again = await _running_workers(kube, "low", 2)
        job = await kube.job("low")
        assert not job["spec"]["runPolicy"]["suspend"]
        assert has_condition(job, "Suspended", "False")
        assert {p["metadata"]["uid"] for p in again}.isdisjoint({p["metadata"]["uid"] for p in first})


async def test_spot_taint_on_a_kueue_managed_elastic_job_removes_the_nodes_workers_without_suspending_it(
    kueue: None, api: ApiClient, kube: Kube
) -> None:
    async with own_nodes(api, kube, "a", "b", spot=("a", "b")) as nodes, kueue_queue(kube, nodes, cpu="5") as (lq, _):
        spread = {"e2e.mpijob.io/spread": "spot"}
        body = _cpu_job(
            "spot",
            lq,
            workers=4,
            elastic={"minReplicas": 2, "maxReplicas": 4, "scaleInGracePeriodSeconds": 1},
        )
        wt = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        wt.setdefault("metadata", {})["labels"] = spread
        wt["spec"]["topologySpreadConstraints"] = spread_evenly(spread, honor_taints=True)
        body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {HOSTNAME: nodes[0]}
        await kube.create(body)
        before = await _running_workers(kube, "spot", 4)
        doomed = [p for p in before if p["spec"]["nodeName"] == nodes[1]]
        kept = {p["metadata"]["name"]: p["metadata"]["uid"] for p in before if p["spec"]["nodeName"] == nodes[0]}
        assert doomed and kept
        wl_before = await _workload(kube, "spot")
        assert wl_before is not None

        await taint_node(api, nodes[1], SPOT_ITN_TAINT)

        async def doomed_gone() -> bool:
            current = {p["metadata"]["name"]: p for p in live(await kube.workers("spot"))}
            return all(
                d["metadata"]["name"] not in current
                or current[d["metadata"]["name"]]["metadata"]["uid"] != d["metadata"]["uid"]
                for d in doomed
            )

        seen_suspended = False
        deadline = asyncio.get_running_loop().time() + 90
        while not await doomed_gone():
            job = await kube.job("spot")
            seen_suspended |= bool(job["spec"]["runPolicy"].get("suspend"))
            assert asyncio.get_running_loop().time() < deadline, "the tainted node's workers were not removed"
            await asyncio.sleep(0.2)

        job = await kube.job("spot")
        assert not seen_suspended and not job["spec"]["runPolicy"]["suspend"]
        assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4  # as admitted
        assert not has_condition(job, "Suspended")
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("spot"))}
        assert all(now.get(n) == uid for n, uid in kept.items())  # the healthy node's workers kept
        wl = await _workload(kube, "spot")
        assert wl is not None and wl["metadata"]["uid"] == wl_before["metadata"]["uid"]
        assert has_condition(wl, "Admitted") and not has_condition(wl, "Evicted")
        discovered = set(job["status"]["discoveredHosts"])
        assert set(kept) <= discovered and not discovered & {d["metadata"]["name"] for d in doomed}
        # Replacements keep the admitted count; with room on the healthy node they run there.
        assert len(now) == 4 and all(n not in {d["metadata"]["name"] for d in doomed} for n in now)
        # Under Kueue the admitted count rules: no regrow target, no probe, no second accounting of quota.
        annotations = job["metadata"].get("annotations") or {}
        assert c.ANNOTATION_REGROW_TARGET not in annotations, annotations
        assert not any(
            c.ANNOTATION_REGROW_PROBE in (p["metadata"].get("annotations") or {})
            for p in live(await kube.workers("spot"))
        )


async def test_targeted_scale_in_of_a_kueue_managed_job_drains_and_replaces_without_suspending_it(
    kueue: None, api: ApiClient, kube: Kube
) -> None:
    async with own_nodes(api, kube, "a", spot=("a",)) as nodes, kueue_queue(kube, nodes, cpu="4") as (lq, _):
        await kube.create(
            _cpu_job(
                "drain", lq, workers=3, elastic={"minReplicas": 1, "maxReplicas": 3, "scaleInGracePeriodSeconds": 1}
            )
        )
        before = await _running_workers(kube, "drain", 3)
        victim = before[1]["metadata"]["name"]

        old, new, added = await scale_in(kube.client, kube.ns, "drain", [victim], None, False)

        assert (old, new, added) == (3, 3, [victim])  # Kueue-managed: the admitted count is kept

        async def replaced() -> bool:
            pods = {p["metadata"]["name"] for p in live(await kube.workers("drain"))}
            running = await _running_workers(kube, "drain", 3)
            return victim not in pods and len(running) == 3

        await eventually(replaced, within=90, what=f"{victim} drained and replaced")
        job = await kube.job("drain")
        assert not job["spec"]["runPolicy"]["suspend"]
        assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
        wl = await _workload(kube, "drain")
        assert wl is not None and has_condition(wl, "Admitted") and not has_condition(wl, "Evicted")


# -- coscheduling ------------------------------------------------------------------------------------------


def _gang_job(name: str, nodes: list[str], *, workers: int, cpu: str, **kw: Any) -> Obj:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": nodes}]}]
            }
        }
    }
    return mpijob(
        name,
        workers=workers,
        worker_template={
            "spec": {
                "containers": [container("worker", resources={"requests": {"cpu": cpu}})],
                "tolerations": TOLERATE_OWNER,
                "affinity": affinity,
            }
        },
        launcher_template={
            "spec": {
                "containers": [container("launcher", resources={"requests": {"cpu": "1"}})],
                "tolerations": TOLERATE_OWNER,
                "affinity": affinity,
            }
        },
        **kw,
    )


async def _job_pods(kube: Kube, job: str) -> list[Obj]:
    return live(await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job}"))


async def test_coscheduling_binds_no_pod_of_a_job_until_its_whole_gang_fits(gang_kube: Kube, api: ApiClient) -> None:
    kube = gang_kube
    async with own_nodes(api, kube, "a", "b", "c") as nodes:
        # 30 of node a's 32 CPUs taken: only b and c have room for a 20-CPU worker, the job needs three.
        blocker = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "blocker"},
            "spec": {
                "nodeName": nodes[0],
                "tolerations": TOLERATE_OWNER,
                "containers": [container("hog", resources={"requests": {"cpu": "30"}})],
                "terminationGracePeriodSeconds": 0,
            },
        }
        await kube.create(blocker)
        await kube.create(_gang_job("gang", nodes, workers=3, cpu="20"))

        async def gang_pending() -> list[Obj] | None:
            pods = await _job_pods(kube, "gang")
            return pods if len(pods) == 4 else None

        pods = await eventually(gang_pending, within=60, what="the launcher and 3 workers created")
        assert all(p["spec"]["schedulerName"] == GANG_SCHEDULER for p in pods)
        assert all(p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gang" for p in pods)
        group = await kube.client.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{kube.ns}/podgroups/gang")
        assert group["spec"]["minMember"] == 4
        # Two of the workers and the launcher would fit; the gang scheduler must hold all of them back.
        for _ in range(40):
            bound = [p["metadata"]["name"] for p in await _job_pods(kube, "gang") if p["spec"].get("nodeName")]
            assert bound == [], f"bound before the whole gang fits: {bound}"
            await asyncio.sleep(0.25)

        await kube.delete("v1", "Pod", "blocker", grace=0)

        async def all_bound() -> bool:
            pods = await _job_pods(kube, "gang")
            return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

        await eventually(all_bound, within=180, what="the whole gang bound once it fits")
        await _running_workers(kube, "gang", 3)


async def test_coscheduled_elastic_job_shrunk_by_a_spot_taint_keeps_running_and_grows_back_within_its_gang(
    gang_kube: Kube, gang_operator: OperatorProcess, api: ApiClient
) -> None:
    kube = gang_kube
    async with own_nodes(api, kube, "a", "b") as nodes:
        spread = {"e2e.mpijob.io/spread": "shrink"}
        body = _gang_job(
            "shrink",
            nodes,
            workers=4,
            cpu="1",
            elastic={"minReplicas": 2, "maxReplicas": 4, "scaleInGracePeriodSeconds": 1},
        )
        wt = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        wt["metadata"] = {"labels": spread}
        wt["spec"]["topologySpreadConstraints"] = spread_evenly(spread, honor_taints=True)
        body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {HOSTNAME: nodes[0]}
        await kube.create(body)
        before = await _running_workers(kube, "shrink", 4)
        group_path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{kube.ns}/podgroups/shrink"
        assert (await kube.client.get(group_path))["spec"]["minMember"] == 3  # minReplicas + launcher
        kept = {p["metadata"]["name"]: p["metadata"]["uid"] for p in before if p["spec"]["nodeName"] == nodes[0]}
        assert len(kept) == 2

        await taint_node(api, nodes[1], SPOT_ITN_TAINT)

        async def regrown() -> list[Obj] | None:
            # Regrow (on by default): the tainted node's workers go, probes join the gang on the healthy node.
            job = await kube.job("shrink")
            workers = live(await kube.workers("shrink"))
            current = {p["metadata"]["name"]: p["metadata"]["uid"] for p in workers}
            ok = (
                job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
                and len(workers) == 4
                and all(
                    p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == nodes[0] for p in workers
                )
                and kept.items() <= current.items()
            )
            return workers if ok else None

        await eventually(
            regrown, within=120, what="the job shrunk off the tainted node and grew back to 4 on the other"
        )
        job = await kube.job("shrink")
        assert has_condition(job, "Running")
        assert (await kube.client.get(group_path))["spec"]["minMember"] == 3

        async def announced() -> list[str] | None:
            # Events are posted off the reconcile path: the last one may trail the state it announces.
            reasons = [str(e.get("reason")) for e in await kube.events("shrink")]
            return reasons if "NodeTerminating" in reasons and "Regrown" in reasons else None

        try:
            await eventually(announced, within=30, what="the NodeTerminating and Regrown Events")
        except AssertionError as err:
            seen = [(e.get("reason"), e.get("message")) for e in await kube.events("shrink")]
            raise AssertionError(f"{err}\nEvents: {seen}\noperator log {gang_operator.log_path}") from None


def test_volcano_is_reported_unavailable_with_the_reason() -> None:
    with pytest.raises(TestbedError, match="not served by the Go module proxy"):
        extras.parse_with("kueue,volcano")


def test_gang_scheduling_without_the_pod_group_crd_stops_the_operator_with_the_reason(
    kubeconfig: Path, tmp_path: Path
) -> None:
    # Volcano's CRD is never installed on the testbed: with the flag, the operator must refuse to run rather
    # than wait forever for a cache of a kind the API server does not serve.
    proc = OperatorProcess(kubeconfig, tmp_path, extra_args=("--gang-scheduling", "volcano"))
    proc.start()
    assert proc.proc is not None
    try:
        code = proc.proc.wait(timeout=60)
    finally:
        proc.stop()
    assert code != 0
    assert "does not serve scheduling.volcano.sh/v1beta1 podgroups" in proc.log_tail()
