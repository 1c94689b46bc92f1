"""REST paths of the kinds the operator writes. A table, not discovery: these are all core, stable kinds."""

from __future__ import annotations

from mpijob.api.models import API_VERSION

# (apiVersion, kind) -> plural; every one of them is namespaced.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "pods",
    ("v1", "Service"): "services",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Secret"): "secrets",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("v1", "Event"): "events",
    ("batch/v1", "Job"): "jobs",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    (API_VERSION, "MPIJob"): "mpijobs",
    # Gang schedulers' PodGroups (only with --gang-scheduling).
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "podgroups",
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "podgroups",
}


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    plural = PLURALS[(api_version, kind)]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


def object_path(api_version: str, kind: str, namespace: str, name: str, subresource: str | None = None) -> str:
    path = f"{collection_path(api_version, kind, namespace)}/{name}"
    return f"{path}/{subresource}" if subresource else path
