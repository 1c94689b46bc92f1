"""The watched kinds, in one table: what each is called in the cache, where it is listed, what the cache keeps
of it (runtime/slim.py), which jobs an event of it wakes up, and whether an event that changes nothing the
planner reads is dropped (fingerprinted)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpijob.api import constants as c
from mpijob.api.models import GROUP, KIND, PLURAL, VERSION
from mpijob.api.objects import Obj, controller_ref
from mpijob.planner import podgroups
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import slim

Key = tuple[str, str]

# Child-name suffixes: an object named like a child of job J maps to J even when J does not own it,
# so a conflicting object that goes away wakes its job up.
_SUFFIXES = tuple(name("") for name in (c.launcher_name, c.config_map_name, c.secret_name, c.pdb_name))


def job_names_for(name: str, labels: Any, meta: Any) -> list[str]:
    """The jobs an object may belong to: its controller (an MPIJob), its job label, or its name's shape."""
    names = []
    ref = controller_ref(meta)
    if ref is not None and ref.get("kind") == KIND:
        names.append(str(ref.get("name")))
    job_label = (labels or {}).get(c.LABEL_JOB_NAME)
    if job_label:
        names.append(str(job_label))
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            names.append(name[: -len(suffix)])
    head, sep, tail = name.rpartition("-worker-")
    if sep and tail.isdigit():
        names.append(head)
    return list(dict.fromkeys(names))


def own_key(obj: Obj) -> list[Key]:
    meta = obj["metadata"]
    return [(str(meta.get("namespace")), str(meta.get("name")))]


def child_keys(obj: Obj) -> list[Key]:
    meta = obj["metadata"]
    ns, name = str(meta.get("namespace")), str(meta.get("name"))
    return [(ns, n) for n in job_names_for(name, meta.get("labels"), meta)]


def named_like_job(obj: Obj) -> list[Key]:
    """The Service and the PodGroup are named exactly like their job: a conflicting one going away must wake
    the job up."""
    return list(dict.fromkeys([*own_key(obj), *child_keys(obj)]))


@dataclass(frozen=True)
class Watched:
    kind: str
    # The cache's name for the kind's store (Cache.INDEXES).
    index: str
    # List path, cluster-wide; ns_path (with {ns}) for namespaced kinds when the operator watches namespaces.
    path: str
    ns_path: str | None
    slim: Callable[[Obj], Obj]
    # The jobs an event of the object enqueues; None: the jobs with pods on the node (nodes).
    keys: Callable[[Obj], list[Key]] | None
    # Drop events that leave what the planner reads unchanged (a node heartbeat, a pod status write that
    # changes nothing we read). Not for kinds whose resourceVersion itself is read (MPIJobs, ConfigMaps:
    # expectations compare it with our own writes).
    fingerprinted: bool = False

    @property
    def namespaced(self) -> bool:
        return self.ns_path is not None

    def paths(self, namespaces: list[str]) -> list[str]:
        return [self.ns_path.format(ns=ns) for ns in namespaces] if namespaces and self.ns_path else [self.path]


def _core(plural: str) -> tuple[str, str]:
    return f"/api/v1/{plural}", f"/api/v1/namespaces/{{ns}}/{plural}"


def _group(group_version: str, plural: str) -> tuple[str, str]:
    return f"/apis/{group_version}/{plural}", f"/apis/{group_version}/namespaces/{{ns}}/{plural}"


def _owned(kind: str) -> Callable[[Obj], Obj]:
    return lambda body: slim.owned_object(body, kind)


KINDS: tuple[Watched, ...] = (
    Watched("MPIJob", "mpijobs", *_group(f"{GROUP}/{VERSION}", PLURAL), slim.mpijob, own_key),
    Watched("Pod", "pods", *_core("pods"), slim.pod, child_keys, fingerprinted=True),
    Watched("Job", "jobs", *_group("batch/v1", "jobs"), slim.batch_job, child_keys),
    Watched("Service", "services", *_core("services"), _owned("Service"), named_like_job),
    Watched("ConfigMap", "configmaps", *_core("configmaps"), _owned("ConfigMap"), child_keys),
    Watched(
        "PodDisruptionBudget",
        "pdbs",
        *_group("policy/v1", "poddisruptionbudgets"),
        _owned("PodDisruptionBudget"),
        child_keys,
    ),
    Watched("ServiceAccount", "serviceaccounts", *_core("serviceaccounts"), _owned("ServiceAccount"), child_keys),
    Watched("Role", "roles", *_group("rbac.authorization.k8s.io/v1", "roles"), _owned("Role"), child_keys),
    Watched(
        "RoleBinding",
        "rolebindings",
        *_group("rbac.authorization.k8s.io/v1", "rolebindings"),
        _owned("RoleBinding"),
        child_keys,
    ),
    Watched("Node", "nodes", "/api/v1/nodes", None, slim.node, None, fingerprinted=True),
)


def watched(config: OperatorConfig | None = None) -> tuple[Watched, ...]:
    """Every kind the operator caches; PodGroups only with gang scheduling on (their CRD need not exist); not
    the kinds of a feature the operator may not use (runtime/permissions.py): their list would be refused."""
    config = config or OperatorConfig()
    skip = {
        "Node": not config.node_signals,
        "PodDisruptionBudget": not config.disruption_budgets,
        **dict.fromkeys(("ServiceAccount", "Role", "RoleBinding"), not config.discovery_access),
    }
    kinds = tuple(w for w in KINDS if not skip.get(w.kind))
    if not config.gang_scheduler:
        return kinds
    version = podgroups.api_version(config.gang_scheduler)
    pod_groups = Watched("PodGroup", "podgroups", *_group(version, "podgroups"), _owned("PodGroup"), named_like_job)
    return (*kinds, pod_groups)


BY_KIND = {w.kind: w for w in KINDS}
