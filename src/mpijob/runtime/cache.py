"""The operator's view of the cluster: kopf indexes, filled from watch streams, read to build snapshots.

kopf keeps each index up to date (adds, replaces, forgets deleted objects) and holds back all event
handlers until every index has its initial listing: so the first handler call means the cache is warm.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from mpijob.api import constants as c
from mpijob.api.objects import Obj
from mpijob.planner.snapshot import OperatorConfig, Snapshot

Key = tuple[str, str]


def _one(index: Any, key: Any) -> Any:
    if index is None:
        return None
    store = index.get(key)
    if not store:
        return None
    return next(iter(store))


def _controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


class _NamespacePods(Mapping[str, Obj]):
    """Pods of one namespace by name, looked up in the index on demand (no copy)."""

    def __init__(self, index: Any, namespace: str) -> None:
        self.index = index
        self.namespace = namespace

    def __getitem__(self, name: str) -> Obj:
        value = _one(self.index, (self.namespace, name))
        if value is None:
            raise KeyError(name)
        result: Obj = value
        return result

    def __iter__(self) -> Iterator[str]:
        return (name for (ns, name) in (self.index or {}) if ns == self.namespace)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Nodes(Mapping[str, Obj]):
    def __init__(self, index: Any) -> None:
        self.index = index

    def __getitem__(self, name: str) -> Obj:
        value = _one(self.index, name)
        if value is None:
            raise KeyError(name)
        result: Obj = value
        return result

    def __iter__(self) -> Iterator[str]:
        return iter(self.index or {})

    def __len__(self) -> int:
        return len(self.index or {})


class Cache:
    INDEXES = (
        "mpijobs",
        "pods",
        "jobs",
        "services",
        "configmaps",
        "pdbs",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "nodes",
    )

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.indexes: dict[str, Any] = {}
        # Optional indexes (e.g. "podgroups", only with --gang-scheduling: their CRD may not exist).
        self.required = self.INDEXES + extra
        # Secondary pod maps, kept by us rather than as two more kopf indexes: kopf invokes every indexer
        # through its handler machinery on every pod event, which cost more than the maps themselves.
        # Filled from the pods indexer (so complete before any handler runs, like a kopf index); entries
        # of deleted pods are dropped by the pod event handler. A stale entry is harmless: every lookup
        # goes through the pods index, which kopf updates first.
        self._pod_refs: dict[Key, tuple[str, str | None, str | None, Key | None]] = {}
        self._by_owner: dict[str, set[Key]] = {}
        self._by_node: dict[str, dict[Key, Key]] = {}

    @property
    def ready(self) -> bool:
        return len(self.indexes) == len(self.required)

    def capture(self, kwargs: Mapping[str, Any]) -> None:
        """kopf hands the (live) indexes to every handler; keep references to them."""
        if not self.ready:
            for name in self.required:
                if name in kwargs:
                    self.indexes[name] = kwargs[name]

    def mpijob(self, key: Key) -> Obj | None:
        value: Obj | None = _one(self.indexes.get("mpijobs"), key)
        return value

    def pod(self, namespace: str, name: str) -> Obj | None:
        value: Obj | None = _one(self.indexes.get("pods"), (namespace, name))
        return value

    def config_map_version(self, namespace: str, job: str) -> Any:
        cm = _one(self.indexes.get("configmaps"), (namespace, c.config_map_name(job)))
        return None if cm is None else (cm.get("metadata") or {}).get("resourceVersion")

    def mpijob_keys(self) -> list[Key]:
        return list(self.indexes.get("mpijobs") or {})

    def pod_seen(self, key: Key, uid: str, owner: str | None, node: str | None, job: Key | None) -> None:
        """A pod as the pods indexer saw it: its controller's uid, node and job (None when absent)."""
        entry = (uid, owner, node, job)
        old = self._pod_refs.get(key)
        if old == entry:
            return
        if old is not None:
            self._unlink(key, old)
        self._pod_refs[key] = entry
        if owner is not None:
            self._by_owner.setdefault(owner, set()).add(key)
        if node is not None and job is not None:
            self._by_node.setdefault(node, {})[key] = job

    def pod_gone(self, key: Key, uid: str) -> None:
        old = self._pod_refs.get(key)
        if old is not None and old[0] == uid:  # not a newer pod of the same name
            del self._pod_refs[key]
            self._unlink(key, old)

    def _unlink(self, key: Key, entry: tuple[str, str | None, str | None, Key | None]) -> None:
        _, owner, node, _ = entry
        if owner is not None and owner in self._by_owner:
            self._by_owner[owner].discard(key)
            if not self._by_owner[owner]:
                del self._by_owner[owner]
        if node is not None and node in self._by_node:
            self._by_node[node].pop(key, None)
            if not self._by_node[node]:
                del self._by_node[node]

    def _owned_pods(self, uid: str, namespace: str) -> list[Obj]:
        # Namespaces are walls: an owner reference is namespace-local, so a pod of another namespace that
        # names this uid (copied by hand) is not this job's.
        keys = [k for k in self._by_owner.get(uid) or () if k[0] == namespace]
        pods = (_one(self.indexes["pods"], k) for k in keys)
        # Checked against the pods index: an entry outlives its pod until the deletion handler runs.
        return [p for p in pods if p is not None and _controller_uid(p) == uid]

    def jobs_on_node(self, node: str) -> list[Key]:
        return list(dict.fromkeys((self._by_node.get(node) or {}).values()))

    def snapshot(self, job: Obj, now: datetime, config: OperatorConfig) -> Snapshot:
        meta = job["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        launcher = _one(self.indexes["jobs"], (ns, c.launcher_name(name)))
        launcher_pods = self._owned_pods(launcher["metadata"]["uid"], ns) if launcher else []
        return Snapshot(
            job=job,
            now=now,
            owned_pods=self._owned_pods(uid, ns),
            pods_by_name=_NamespacePods(self.indexes["pods"], ns),
            launcher=launcher,
            launcher_pods=launcher_pods,
            service=_one(self.indexes["services"], (ns, name)),
            config_map=_one(self.indexes["configmaps"], (ns, c.config_map_name(name))),
            pdb=_one(self.indexes["pdbs"], (ns, c.pdb_name(name))),
            service_account=_one(self.indexes.get("serviceaccounts"), (ns, c.discovery_rbac_name(name))),
            role=_one(self.indexes.get("roles"), (ns, c.discovery_rbac_name(name))),
            role_binding=_one(self.indexes.get("rolebindings"), (ns, c.discovery_rbac_name(name))),
            nodes=_Nodes(self.indexes["nodes"]),
            pod_group=_one(self.indexes.get("podgroups"), (ns, name)),
            config=config,
        )
