"""Proof that the testbed behaves like a cluster where it matters to the operator: scheduling, pods
running with IPs, grace periods, garbage collection, Jobs whose pods end only when a test says so,
node taints/cordons seen through a real watch, and a lifecycle (`up`/`down`) that leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, BatchV1Api, CoreV1Api, V1Pod
from kubernetes_asyncio.client.exceptions import ApiException

from mpijob_testbed import cluster, processes
from mpijob_testbed.components import COMPONENTS
from mpijob_testbed.nodes import (
    SPOT_ITN_TAINT,
    cordon_node,
    create_node,
    delete_node,
    taint_node,
    uncordon_node,
    untaint_node,
)
from mpijob_testbed.pods import complete_pod
from mpijob_testbed.waiting import wait_until

pytestmark = pytest.mark.integration

IMAGE = "registry.k8s.io/pause:3.10"


def pod_body(
    name: str,
    *,
    grace: int = 1,
    node_selector: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": IMAGE}],
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def read_pod(api: ApiClient, namespace: str, name: str) -> V1Pod | None:
    try:
        return await CoreV1Api(api).read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def is_ready(pod: V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


async def wait_running(api: ApiClient, namespace: str, name: str) -> V1Pod:
    async def running() -> V1Pod | None:
        pod = await read_pod(api, namespace, name)
        if pod is not None and pod.status.phase == "Running" and pod.status.pod_ip and is_ready(pod):
            return pod
        return None

    return await wait_until(running, what=f"pod {namespace}/{name} Running and Ready with an IP")


async def wait_gone(api: ApiClient, namespace: str, name: str, within: float = 90) -> None:
    async def gone() -> bool:
        return await read_pod(api, namespace, name) is None

    await wait_until(gone, what=f"pod {namespace}/{name} to disappear", within=within)


# --- scheduling and running ------------------------------------------------------------------------


async def test_pod_with_node_selector_runs_on_that_node(api: ApiClient, namespace: str) -> None:
    v1 = CoreV1Api(api)
    await v1.create_namespaced_pod(namespace, pod_body("pinned", node_selector={"kubernetes.io/hostname": "node-3"}))

    pod = await wait_running(api, namespace, "pinned")

    assert pod.spec.node_name == "node-3"
    node = await v1.read_node("node-3")
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node.spec.pod_cidr)
    assert pod.status.host_ip == next(a.address for a in node.status.addresses if a.type == "InternalIP")
    (status,) = pod.status.container_statuses
    assert status.ready and status.state.running is not None


async def test_pod_without_node_is_scheduled_and_runs(api: ApiClient, namespace: str) -> None:
    await CoreV1Api(api).create_namespaced_pod(namespace, pod_body("free"))

    pod = await wait_running(api, namespace, "free")

    assert pod.spec.node_name in {f"node-{i}" for i in range(1, 5)}
    scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert scheduled and scheduled[0].status == "True"


async def test_nodes_carry_the_documented_labels(api: ApiClient) -> None:
    nodes = {n.metadata.name: n for n in (await CoreV1Api(api).list_node()).items}
    for i in range(1, 5):
        node = nodes[f"node-{i}"]
        labels = node.metadata.labels
        spot = i % 2 == 0
        assert labels["kubernetes.io/hostname"] == f"node-{i}"
        assert labels["topology.kubernetes.io/zone"] == ("zone-b" if spot else "zone-a")
        assert labels["node.kubernetes.io/instance-type"] == "r5.8xlarge"
        assert labels["karpenter.sh/capacity-type"] == ("spot" if spot else "on-demand")
        assert labels["node.kubernetes.io/capacity-type"] == labels["karpenter.sh/capacity-type"]
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.allocatable["cpu"] == "32"
        assert node.status.allocatable["memory"] == "256Gi"
        assert node.status.allocatable["pods"] == "110"


# --- deletion --------------------------------------------------------------------------------------


async def test_deleted_pod_is_removed_after_its_grace_period(api: ApiClient, namespace: str) -> None:
    v1 = CoreV1Api(api)
    await v1.create_namespaced_pod(namespace, pod_body("graceful", grace=15))
    await wait_running(api, namespace, "graceful")

    await v1.delete_namespaced_pod("graceful", namespace)
    # The grace period is 15 s, so right after the delete call the pod must still be there, terminating.
    pod = await read_pod(api, namespace, "graceful")
    assert pod is not None
    assert pod.metadata.deletion_timestamp is not None
    assert pod.status.phase == "Running"

    await wait_gone(api, namespace, "graceful")


async def test_garbage_collector_deletes_dependents(api: ApiClient, namespace: str) -> None:
    v1 = CoreV1Api(api)
    owner = await v1.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}, "data": {"a": "b"}})
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    await v1.create_namespaced_pod(namespace, pod_body("dependent", owner=reference))
    await wait_running(api, namespace, "dependent")

    await v1.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    await wait_gone(api, namespace, "dependent")


# --- Jobs: pods run until a test completes them -----------------------------------------------------


@pytest.mark.parametrize("succeeded", [True, False], ids=["succeeded", "failed"])
async def test_job_pod_runs_until_completed(api: ApiClient, kubeconfig: Path, namespace: str, succeeded: bool) -> None:
    batch = BatchV1Api(api)
    v1 = CoreV1Api(api)
    job = {
        "metadata": {"name": "work"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": IMAGE}],
                }
            },
        },
    }
    await batch.create_namespaced_job(namespace, job)

    async def job_pod() -> V1Pod | None:
        pods = (await v1.list_namespaced_pod(namespace, label_selector="job-name=work")).items
        return pods[0] if pods else None

    pod_name = (await wait_until(job_pod, what="the Job's pod")).metadata.name
    await wait_running(api, namespace, pod_name)

    # Nothing completes the pod on its own: a few seconds later it still runs and the Job is active.
    await asyncio.sleep(3)
    pod = await read_pod(api, namespace, pod_name)
    assert pod is not None and pod.status.phase == "Running"
    status = (await batch.read_namespaced_job("work", namespace)).status
    assert status.active == 1
    assert not [c for c in status.conditions or [] if c.type in ("Complete", "Failed") and c.status == "True"]

    # Both forms of the first argument work; use the kubeconfig path for one case.
    await complete_pod(api if succeeded else kubeconfig, namespace, pod_name, succeeded=succeeded)

    expected = "Complete" if succeeded else "Failed"

    async def finished() -> bool:
        conditions = (await batch.read_namespaced_job("work", namespace)).status.conditions or []
        return any(c.type == expected and c.status == "True" for c in conditions)

    await wait_until(finished, what=f"Job condition {expected}")
    pod = await read_pod(api, namespace, pod_name)
    assert pod is not None
    assert pod.status.phase == ("Succeeded" if succeeded else "Failed")
    (container,) = pod.status.container_statuses
    assert container.state.terminated.exit_code == (0 if succeeded else 1)


# --- nodes: taints and cordons through a real watch --------------------------------------------------


async def test_taint_and_cordon_are_seen_by_a_watch(api: ApiClient) -> None:
    v1 = CoreV1Api(api)
    # A node of its own, so no other test's scheduling is disturbed.
    name = f"watch-{uuid.uuid4().hex[:8]}"
    await create_node(api, name)
    try:
        start = (await v1.read_node(name)).metadata.resource_version
        seen: set[str] = set()

        async def observe() -> None:
            async with watch.Watch().stream(
                v1.list_node, field_selector=f"metadata.name={name}", resource_version=start, timeout_seconds=120
            ) as stream:
                async for event in stream:
                    node = event["object"]
                    taints = {t.key: t for t in node.spec.taints or []}
                    if SPOT_ITN_TAINT in taints and taints[SPOT_ITN_TAINT].value == "notice":
                        seen.add("taint")
                    if node.spec.unschedulable:
                        seen.add("cordon")
                    # Added by the node-lifecycle controller in reaction to the cordon.
                    if "node.kubernetes.io/unschedulable" in taints:
                        seen.add("unschedulable-taint")
                    if seen == {"taint", "cordon", "unschedulable-taint"}:
                        return

        watcher = asyncio.create_task(observe())
        await taint_node(api, name, SPOT_ITN_TAINT, "notice")
        await cordon_node(api, name)
        async with asyncio.timeout(120):
            await watcher
        assert seen == {"taint", "cordon", "unschedulable-taint"}

        await untaint_node(api, name, SPOT_ITN_TAINT)
        await uncordon_node(api, name)
        node = await v1.read_node(name)
        assert not node.spec.unschedulable
        assert SPOT_ITN_TAINT not in {t.key for t in node.spec.taints or []}
    finally:
        await delete_node(api, name)


# --- lifecycle: a second testbed of its own ------------------------------------------------------------


def test_up_is_idempotent_restarts_stale_and_down_leaves_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "tb"
    first = cluster.up(nodes=1, state_dir=state_dir)
    all_pids: set[int] = set()
    try:
        assert first.started and first.nodes == ("node-1",)
        assert first.kubeconfig.is_file()

        again = cluster.up(nodes=1, state_dir=state_dir)
        assert not again.started
        assert again.ports == first.ports
        before = cluster.status(state_dir)
        assert before.running
        all_pids |= {c.pid for c in before.components if c.pid is not None}

        # A dead component leaves a stale pid file: `up` must notice, clean up and start afresh.
        kwok = next(c for c in before.components if c.name == "kwok")
        assert kwok.pid is not None
        os.kill(kwok.pid, signal.SIGKILL)
        # SIGKILL is delivered asynchronously: give the kernel a moment to end the process.
        deadline = time.monotonic() + 10
        while cluster.is_running(state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not cluster.is_running(state_dir)
        restarted = cluster.up(nodes=1, state_dir=state_dir)
        assert restarted.started
        after = cluster.status(state_dir)
        assert after.running
        all_pids |= {c.pid for c in after.components if c.pid is not None}
        assert len(all_pids) == 2 * len(COMPONENTS)
    finally:
        assert cluster.down(state_dir)

    assert not state_dir.exists()
    assert processes.find_processes(f"{state_dir}/", COMPONENTS) == {}
    for pid in all_pids:
        assert not Path(f"/proc/{pid}").exists() or not processes.group_members(pid)
    assert cluster.down(state_dir) is False
