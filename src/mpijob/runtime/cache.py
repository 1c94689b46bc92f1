"""The operator's view of the cluster: one store per watched kind (key -> slimmed object), filled by the
informers (runtime/informer.py, through the controller), read to build snapshots; plus the pod indexes the
planner needs (by controller uid, by node)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from mpijob.api import constants as c
from mpijob.api.objects import Obj, controller_ref, controller_uid
from mpijob.planner.snapshot import OperatorConfig, Snapshot

Key = tuple[str, str]


def _one(index: Any, key: Any) -> Any:
    return None if index is None else index.get(key)


# What the secondary pod maps hold of a pod: its controller's uid, its node and its job's name.
_Links = tuple[str | None, str | None, str | None]


def _links(pod: Obj) -> _Links:
    meta = pod.get("metadata") or {}
    ref = controller_ref(meta)
    job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
    node = (pod.get("spec") or {}).get("nodeName") or None
    return (str(ref["uid"]) if ref else None, node, str(job) if job else None)


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
        # Optional indexes (e.g. "podgroups", only with --gang-scheduling: their CRD may not exist).
        self.required = self.INDEXES + extra
        self.indexes: dict[str, dict[Any, Obj]] = {name: {} for name in self.required}
        # Whether every store has had its first list (the controller clears it until the informers have).
        self.ready = True
        # Kinds listed at least once (a later list that lacks an object found a ghost).
        self.listed: set[str] = set()
        # Secondary pod maps, kept in step with the pods store by put/remove (from the stored view a change
        # replaces: no copy of what they were made from is kept). A stale entry is harmless: every lookup
        # goes through the pods store.
        self._by_owner: dict[str, set[Key]] = {}
        # node -> pod key -> the pod's job name (its namespace is the key's).
        self._by_node: dict[str, dict[Key, str]] = {}

    def put(self, index: str, key: Any, obj: Obj) -> None:
        store = self.indexes[index]
        old = store.get(key)
        store[key] = obj
        if index == "pods":
            self._relink(key, None if old is None else _links(old), _links(obj))

    def remove(self, index: str, key: Any, uid: Any) -> None:
        """Forgets the object, unless the store holds a newer one of the same name (another uid)."""
        store = self.indexes[index]
        old = store.get(key)
        if old is not None and (uid is None or (old.get("metadata") or {}).get("uid") in (uid, None)):
            del store[key]
            if index == "pods":
                self._relink(key, _links(old), None)

    def get(self, index: str, key: Any) -> Obj | None:
        return self.indexes[index].get(key) if index in self.indexes else None

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

    def _relink(self, key: Key, before: _Links | None, after: _Links | None) -> None:
        if before == after:
            return
        if before is not None:
            owner, node, _ = before
            if owner is not None and owner in self._by_owner:
                self._by_owner[owner].discard(key)
                if not self._by_owner[owner]:
                    del self._by_owner[owner]
            if node is not None and node in self._by_node:
                self._by_node[node].pop(key, None)
                if not self._by_node[node]:
                    del self._by_node[node]
        if after is not None:
            owner, node, job = after
            if owner is not None:
                self._by_owner.setdefault(owner, set()).add(key)
            if node is not None and job is not None:
                self._by_node.setdefault(node, {})[key] = job

    def _owned_pods(self, uid: str, namespace: str) -> list[Obj]:
        # Namespaces are walls: an owner reference is namespace-local, so a pod of another namespace that
        # names this uid (copied by hand) is not this job's.
        keys = [k for k in self._by_owner.get(uid) or () if k[0] == namespace]
        pods = (_one(self.indexes["pods"], k) for k in keys)
        # Checked against the pods store: the owner map is only a way in.
        return [p for p in pods if p is not None and controller_uid(p) == uid]

    def jobs_on_node(self, node: str) -> list[Key]:
        return list(dict.fromkeys((key[0], job) for key, job in (self._by_node.get(node) or {}).items()))

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
