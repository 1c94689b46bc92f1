"""The operator runs in the tests as it runs in a cluster: with a token of its own ServiceAccount, bound to
the ClusterRole we ship (deploy/base/rbac.yaml), never as the testbed's admin. A verb missing from the role
then fails the tests that need it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mpijob.kube.client import Client

REPO = Path(__file__).resolve().parents[2]
RBAC_FILES = (REPO / "deploy/base/namespace.yaml", REPO / "deploy/base/rbac.yaml")
SYSTEM_NAMESPACE = "mpijob-system"
SERVICE_ACCOUNT = "mpijob-operator"
FIELD_MANAGER = "mpijob-integration-tests"


def shipped_rbac() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in RBAC_FILES:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


async def server_side_apply(client: Client, obj: dict[str, Any]) -> dict[str, Any]:
    """`kubectl apply --server-side --force-conflicts`, for one object."""
    meta = obj["metadata"]
    base = f"/apis/{obj['apiVersion']}" if "/" in obj["apiVersion"] else f"/api/{obj['apiVersion']}"
    scope = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    # Namespace, ServiceAccount, (Cluster)Role(Binding): the plural is the lower-cased kind plus "s".
    path = f"{base}{scope}/{obj['kind'].lower()}s/{meta['name']}"
    result: dict[str, Any] = await client.request(
        "PATCH",
        path,
        obj,
        content_type="application/apply-patch+yaml",
        query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
    )
    return result


def renamed(docs: list[dict[str, Any]], suffix: str, namespace: str) -> list[dict[str, Any]]:
    """The operator's ServiceAccount, ClusterRole and binding under other names (for a reduced role)."""
    out = []
    for doc in copy.deepcopy(docs):
        if doc["kind"] not in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            continue
        doc["metadata"]["name"] += suffix
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += suffix
            doc["subjects"] = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT + suffix, "namespace": namespace}]
        out.append(doc)
    return out


async def service_account_token(client: Client, namespace: str, name: str, seconds: int = 6 * 3600) -> str:
    """A TokenRequest, as the kubelet makes for a pod's projected token."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    result = await client.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
    return str(result["status"]["token"])


def token_kubeconfig(admin_kubeconfig: Path, token: str, out: Path, user: str) -> Path:
    """The admin kubeconfig's cluster (server, CA), with the token as the only credential."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    ca = cluster["cluster"].get("certificate-authority")
    if ca and not Path(ca).is_absolute():  # relative to the kubeconfig it came from
        cluster["cluster"]["certificate-authority"] = str(admin_kubeconfig.parent / ca)
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


async def operator_kubeconfig(client: Client, admin_kubeconfig: Path, out: Path) -> Path:
    """Applies the shipped RBAC and returns a kubeconfig that authenticates as the operator's ServiceAccount."""
    for doc in shipped_rbac():
        await server_side_apply(client, doc)
    token = await service_account_token(client, SYSTEM_NAMESPACE, SERVICE_ACCOUNT)
    return token_kubeconfig(admin_kubeconfig, token, out, f"system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}")
