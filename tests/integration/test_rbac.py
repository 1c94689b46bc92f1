"""The RBAC we ship, proven by running under it: the session's operator authenticates as its own
ServiceAccount (see conftest `operator_kubeconfig`), a role missing a verb the operator needs leaves a
scale-in unfinished with the refusal in the operator's log, and the user roles aggregate into admin/edit/view."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from kube import Kube, eventually, live, names
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
from test_elastic import elastic_job, own_nodes, start_job

from mpijob.executor.client import Client
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
                return "403" in reduced.log_tail(2000) and "pods" in reduced.log_tail(2000)

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
