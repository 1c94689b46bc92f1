"""Issue 40, the install that swaps the image: mpijob started with the reference operator's command line
(`-alsologtostderr --lock-namespace=...`, no sub-command) under the reference's own ClusterRole
(kubeflow/mpi-operator v0.8.2 manifests/base/cluster-role.yaml, from its Go module). A plain job runs as it
runs under the reference (its ConfigMap, Service and launcher Job written with the verbs that role grants);
an elastic job runs too, without what the role does not grant, and says so (condition and Event); the
operator holds the reference's Lease and never stops for a refusal."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import reference_examples
import yaml
from kube import Kube, eventually, has_condition, live, mpijob, wait_condition, wait_running
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess, _free_port
from rbac import server_side_apply, service_account_token, token_kubeconfig
from reference_operator import REFERENCE, reference_built

from mpijob.api import constants as c
from mpijob_testbed import complete_pod

pytestmark = pytest.mark.integration


def reference_cluster_role() -> dict[str, Any]:
    path = reference_examples.module_dir() / "manifests/base/cluster-role.yaml"
    role: dict[str, Any] = next(
        d for d in yaml.safe_load_all(path.read_text()) if d and d["metadata"]["name"] == "mpi-operator"
    )
    return role


async def _reference_identity(kube: Kube, name: str) -> list[dict[str, Any]]:
    role = {**reference_cluster_role(), "metadata": {"name": name}}
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": kube.ns}},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": kube.ns}],
        },
    ]
    for doc in docs:
        await server_side_apply(kube.client, doc)
    return docs


async def test_under_the_reference_cluster_role_plain_jobs_run_and_elastic_jobs_say_what_is_off(
    kube: Kube, api: ApiClient, kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    name = f"mpi-operator-{kube.ns.rsplit('-', 1)[-1]}"
    docs = await _reference_identity(kube, name)
    token = await service_account_token(kube.client, kube.ns, name)
    operator = OperatorProcess(
        token_kubeconfig(kubeconfig, token, tmp_path / "kubeconfig", name),
        tmp_path,
        ("-alsologtostderr", f"--lock-namespace={kube.ns}", f"-namespace={kube.ns}", f"--health-port={_free_port()}"),
        command=(),
    )
    running_operator.stop()  # only the operator under the reference's role acts now
    try:
        operator.start()
        await _plain_job_suspended_resumed_and_succeeded(kube, api)
        await _elastic_job_runs_and_says_what_is_off(kube)
        lease = await kube.client.get(f"/apis/coordination.k8s.io/v1/namespaces/{kube.ns}/leases/mpi-operator")
        assert lease["spec"]["holderIdentity"], lease
        log = operator.log_tail(20000)
        assert "flag -alsologtostderr=true has no effect" in log
        assert "ConfigMap, Job, Service are written by read-then-update" in log
        assert operator.proc is not None and operator.proc.poll() is None, "the operator stopped"
    finally:
        operator.stop()
        running_operator.start()
        for doc in docs[1:]:
            await kube.client.delete(f"/apis/rbac.authorization.k8s.io/v1/{doc['kind'].lower()}s/{name}")


async def _plain_job_suspended_resumed_and_succeeded(kube: Kube, api: ApiClient) -> None:
    """Created suspended, resumed (the launcher Job's update), run and finished: the reference e2e's path."""
    job = "plain"
    await kube.create(mpijob(job, workers=2, run_policy={"suspend": True}))
    await wait_condition(kube, job, "Suspended")
    await kube.patch_job(job, {"spec": {"runPolicy": {"suspend": False}}})
    await wait_running(kube, job, 2, within=90)
    config = await kube.get("v1", "ConfigMap", c.config_map_name(job))
    assert config is not None and c.worker_name(job, 1) in config["data"][c.HOSTFILE_KEY]
    [launcher] = live(await kube.launcher_pods(job))
    await complete_pod(api, kube.ns, launcher["metadata"]["name"], succeeded=True)
    await wait_condition(kube, job, "Succeeded", within=90)


async def _elastic_job_runs_and_says_what_is_off(kube: Kube) -> None:
    job = "elastic"
    body = mpijob(job, workers=2)
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    await kube.create(body)
    found = await wait_condition(kube, job, "PermissionsMissing", within=60)
    cond = next(x for x in found["status"]["conditions"] if x["type"] == "PermissionsMissing")
    for what in ("nodes", "poddisruptionbudgets", "rolebindings", "elastic-rbac.yaml"):
        assert what in cond["message"], cond
    await wait_running(kube, job, 2, within=90)

    async def warned() -> bool:
        events = await kube.client.get(f"/api/v1/namespaces/{kube.ns}/events")
        return any(e.get("reason") == "PermissionsMissing" for e in events["items"])

    await eventually(warned, within=30, what="the PermissionsMissing Event")
    assert await kube.get("policy/v1", "PodDisruptionBudget", c.pdb_name(job)) is None
    assert not has_condition(await kube.job(job), "Failed")


async def test_the_swapped_image_waits_for_the_references_lease_and_takes_it_when_the_reference_is_gone(
    kube: Kube, kubeconfig: Path, tmp_path: Path
) -> None:
    """A rolling update from the reference's pod to ours: both elect on the Lease `mpi-operator` in
    --lock-namespace, so ours does not reconcile while the reference holds it, and leads once the reference
    is gone (its Lease expires: v0.8.2 does not release it)."""
    reference_built()
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{kube.ns}/leases/mpi-operator"
    reference = subprocess.Popen(  # noqa: ASYNC220 (only forks)
        [str(REFERENCE / "mpi-operator"), f"--kubeConfig={kubeconfig}", f"--namespace={kube.ns}",
         f"--lock-namespace={kube.ns}"],
        stdout=(tmp_path / "reference.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    ours = OperatorProcess(
        kubeconfig,
        tmp_path,
        ("-alsologtostderr", f"--lock-namespace={kube.ns}", f"-namespace={kube.ns}", f"--health-port={_free_port()}"),
        command=(),
    )
    try:

        async def reference_leads() -> str:
            return str((await kube.client.get(lease_path))["spec"].get("holderIdentity") or "")

        held = await eventually(reference_leads, within=60, what="the reference holding its Lease")
        ours.start()
        await asyncio.sleep(8)  # several of our retry periods (3 s)
        assert (await kube.client.get(lease_path))["spec"]["holderIdentity"] == held
        assert "leading as" not in ours.log_tail(20000)
        reference.terminate()
        reference.wait(timeout=20)
        gone = time.monotonic()

        async def ours_leads() -> bool:
            return "leading as" in ours.log_tail(20000)

        await eventually(ours_leads, within=60, interval=0.5, what="ours leading once the reference is gone")
        print(f"lease taken over {time.monotonic() - gone:.1f} s after the reference stopped")
        assert (await kube.client.get(lease_path))["spec"]["holderIdentity"] != held
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait(timeout=10)
        ours.stop()
