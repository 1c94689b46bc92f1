"""The RBAC we ship, proven by running under it: the session's operator authenticates as its own
ServiceAccount (see conftest `operator_kubeconfig`), a role missing a verb the operator needs leaves a
scale-in unfinished with the refusal in the operator's log, the chart's namespaced RBAC (watchNamespaces)
runs an operator started with the chart's own flags, and the user roles aggregate into admin/edit/view."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from chart import CHART, NODES_ONLY, by_kind, helm_refuses, namespaced_chart
from elastic_jobs import elastic_job, own_nodes, start_job
from kube import Kube, eventually, has_condition, live, mpijob, names
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess
from rbac import (
    REPO,
    SERVICE_ACCOUNT,
    SYSTEM_NAMESPACE,
    renamed,
    server_side_apply,
    service_account_token,
    shipped_rbac,
    token_kubeconfig,
)

from mpijob.api import constants as c
from mpijob.kube.client import Client
from mpijob_testbed.client import load_api_client

pytestmark = pytest.mark.integration


async def _whoami(kubeconfig: Path) -> str:
    api = await load_api_client(kubeconfig)
    async with api:
        review = await Client(api, qps=0, burst=1).create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    return str(review["status"]["userInfo"]["username"])


async def test_the_operator_under_test_runs_as_its_service_account_not_as_admin(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess
) -> None:
    assert running_operator.kubeconfig == operator_kubeconfig
    assert await _whoami(operator_kubeconfig) == f"system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}"
    # What it may not do: read MPIJobs' neighbours it has no business with, or create MPIJobs.
    for verb, resource, group in (
        ("create", "mpijobs", "kubeflow.org"),
        ("list", "secrets", ""),
        ("watch", "secrets", ""),
        ("update", "nodes", ""),
    ):
        review = await kube.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}",
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}"],
                    "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": kube.ns},
                },
            },
        )
        assert review["status"]["allowed"] is False, (verb, resource)


async def test_a_role_missing_pod_delete_leaves_the_scale_in_unfinished_and_logs_the_refusal(
    kube: Kube, api: ApiClient, kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    suffix = f"-reduced-{kube.ns.rsplit('-', 1)[-1]}"
    docs = renamed(shipped_rbac(), suffix, kube.ns)
    for doc in docs:
        if doc["kind"] == "ClusterRole":
            for rule in doc["rules"]:
                if "pods" in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
        await server_side_apply(kube.client, doc)
    token = await service_account_token(kube.client, kube.ns, SERVICE_ACCOUNT + suffix)
    reduced = OperatorProcess(
        token_kubeconfig(kubeconfig, token, tmp_path / "kubeconfig", "reduced"), tmp_path, ("--namespace", kube.ns)
    )
    job = "rbac"
    running_operator.stop()  # only the reduced operator may act on this namespace now
    try:
        reduced.start()
        async with own_nodes(api, kube, "a", "b") as (node_a, node_b):
            pods = await start_job(kube, elastic_job(job, [node_a, node_b], grace=1), [node_a, node_b])
            victim = names(pods)[0]
            replicas = len(pods) - 1
            await kube.patch_job(
                job,
                {
                    "spec": {
                        "mpiReplicaSpecs": {"Worker": {"replicas": replicas}},
                        "elasticPolicy": {"workersToDelete": [victim]},
                    }
                },
            )

            async def refused() -> bool:
                return "403 Forbidden" in reduced.log_tail(2000) and "pods" in reduced.log_tail(2000)

            await eventually(refused, within=60, what="the operator's log to show the 403 on deleting the pod")
            await asyncio.sleep(3)  # well past the 1 s grace period
            assert victim in names(live(await kube.workers(job))), "a pod was deleted without the permission"
    finally:
        reduced.stop()
        running_operator.start()
        for doc in docs:
            if doc["kind"] != "ServiceAccount":
                await kube.client.delete(
                    f"/apis/rbac.authorization.k8s.io/v1/{doc['kind'].lower()}s/{doc['metadata']['name']}"
                )


async def _may(kube: Kube, user: str, verb: str, resource: str, namespace: str) -> bool:
    """The API server's authorizer on a ServiceAccount (SubjectAccessReview)."""
    _, _, ns, _ = user.split(":")
    review = await kube.client.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}"],
                "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace},
            },
        },
    )
    return bool(review["status"]["allowed"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _ready(port: int) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def _apply_chart_rbac(kube: Kube, rendered: list[dict[str, Any]], release_ns: str, suffix: str) -> list[str]:
    """The chart's RBAC applied as rendered, except that its cluster-scoped names take `suffix` (the
    session's operator runs under the ClusterRole of the same name); returns their API paths."""
    await server_side_apply(kube.client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_ns}})
    cluster_paths = []
    for doc in rendered:
        if doc["kind"] not in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            continue
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += suffix
        if doc["kind"].startswith("Cluster"):
            doc["metadata"]["name"] += suffix
            cluster_paths.append(f"/apis/rbac.authorization.k8s.io/v1/{doc['kind'].lower()}s/{doc['metadata']['name']}")
        await server_side_apply(kube.client, doc)
    return cluster_paths


async def test_the_chart_with_watch_namespaces_runs_its_operator_under_roles_in_them_and_node_reads_alone(
    kube: Kube, kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    release_ns, suffix = f"mpijob-rel-{kube.ns[-8:]}", f"-{kube.ns[-8:]}"
    # Without an image, `helm install` stops before anything reaches the cluster, and says what to set.
    said = helm_refuses("install", "r", str(CHART), "-n", release_ns, f"--kubeconfig={kubeconfig}")
    assert "image.repository is not set" in said, said
    rendered = namespaced_chart(release_ns, kube.ns)
    assert {o["kind"] for o in rendered} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service"
    }  # fmt: skip
    assert by_kind(rendered)[("ClusterRole", "mpijob-operator")]["rules"] == NODES_ONLY
    args = by_kind(rendered)[("Deployment", "mpijob-operator")]["spec"]["template"]["spec"]["containers"][0]["args"]
    cluster_paths = await _apply_chart_rbac(kube, rendered, release_ns, suffix)
    account = f"system:serviceaccount:{release_ns}:mpijob-operator"
    # Nothing cluster-wide but node reads: no pods anywhere else, none listed across namespaces.
    await eventually(lambda: _may(kube, account, "list", "pods", kube.ns), within=30, what="the Role in force")
    assert await _may(kube, account, "list", "nodes", "")
    for namespace in ("", "default"):
        assert not await _may(kube, account, "list", "pods", namespace), namespace
        assert not await _may(kube, account, "list", "mpijobs", namespace), namespace
    token = await service_account_token(kube.client, release_ns, "mpijob-operator")
    health = _free_port()
    # The chart's own flags (--namespace, --leader-elect with its Lease in the release namespace...), on
    # ports of this host: the process runs as the pod's container would.
    chart_operator = OperatorProcess(
        token_kubeconfig(kubeconfig, token, tmp_path / "kubeconfig", account),
        tmp_path,
        (*args[1:], f"--health-port={health}", "--metrics-port=0"),
    )
    running_operator.stop()  # only the chart's operator may act on this namespace now
    try:
        chart_operator.start()
        await eventually(lambda: _ready(health), within=60, what="the chart's operator ready (/readyz)")
        job = "chart"
        await kube.create(mpijob(job, workers=2, elastic={"minReplicas": 1, "maxReplicas": 3}))

        async def reconciled() -> bool:
            launched = bool(await kube.launcher_pods(job)) and len(live(await kube.workers(job))) == 2
            return launched and has_condition(await kube.job(job), "Created")

        await eventually(reconciled, within=90, what="the job's launcher and workers created by the chart's operator")

        # The launcher's discovery Role, granted by an operator that holds only a Role in this namespace. Written
        # in a pass after the pods' (docs/design.md, "What nothing waits for is written last"): waited for.
        async def granted() -> bool:
            return await kube.get("rbac.authorization.k8s.io/v1", "Role", c.discovery_rbac_name(job)) is not None

        await eventually(granted, within=30, what="the launcher's discovery Role written by the chart's operator")
        log = chart_operator.log_tail(100000)
        # "403 Forbidden" as the executor logs a refusal: a bare "403" also matches a random namespace suffix.
        for refusal in ("403 Forbidden", "Forbidden", "permissions:"):
            assert refusal not in log, f"{refusal!r} in the chart operator's log:\n{chart_operator.log_tail()}"
    finally:
        chart_operator.stop()
        running_operator.start()
        for path in cluster_paths:
            await kube.client.delete(path)
        await kube.client.delete(f"/api/v1/namespaces/{release_ns}")


async def test_user_roles_aggregate_into_edit_and_view(kube: Kube) -> None:
    for doc in yaml.safe_load_all((REPO / "deploy/base/user-roles.yaml").read_text()):
        await server_side_apply(kube.client, doc)

    async def allowed(role: str, verb: str, resource: str = "mpijobs") -> bool:
        # A user bound to the built-in role in this namespace, asked through the API server's authorizer.
        user = f"user-{role}"
        await server_side_apply(
            kube.client,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": user, "namespace": kube.ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
            },
        )
        review = await kube.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "group": "kubeflow.org",
                        "namespace": kube.ns,
                    },
                },
            },
        )
        return bool(review["status"]["allowed"])

    # Aggregation is asynchronous (the clusterrole-aggregation controller), and `admin` aggregates in two steps
    # (edit -> mpijob-mpijobs-admin -> admin), as does a new binding reaching the authorizer's cache: wait for
    # each grant.
    await eventually(lambda: allowed("edit", "create"), within=60, what="edit may create MPIJobs")
    await eventually(lambda: allowed("edit", "patch", "mpijobs/scale"), within=60, what="edit may scale MPIJobs")
    await eventually(lambda: allowed("admin", "delete"), within=60, what="admin may delete MPIJobs")
    await eventually(lambda: allowed("view", "list"), within=60, what="view may list MPIJobs")
    assert not await allowed("view", "create")
    assert not await allowed("view", "patch", "mpijobs/scale")
