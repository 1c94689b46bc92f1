"""Closing watch gaps: a periodic, jittered, paged relist of what the operator caches.

kopf (1.45) re-lists a resource after its watch expired (410 Gone) but keeps the index entries of objects
deleted during the gap: such a ghost pod would count as a kept worker and stay in discovery until the
operator restarts. `relist_once` lists every cached kind (paged), and drops from the indexes each cached
object the list does not have, provided the cache's copy is not newer than the list (an object created
after the list started is not a ghost); the jobs the ghosts belonged to are enqueued. A write that gets
404 confirms a ghost at once (`drop`), instead of a retry every 0.2 s. At DEBUG it also names the cached
objects older than the list (`_report`); being behind drops or refreshes nothing.

Dropping uses kopf's index protocol (`Index._discard(acckey)`, acckey = (namespace, name, uid)); a unit
test pins it against the installed kopf.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mpijob.api.models import GROUP, PLURAL, VERSION
from mpijob.api.objects import Obj
from mpijob.executor.client import Client
from mpijob.runtime.cache import Cache

log = logging.getLogger("mpijob.resync")


PAGE = 500
# Only the metadata of each listed object (what client-go's metadata informers ask for): the relist reads
# uids and resourceVersions alone, and full pages of pods were the operator's largest transient allocation
# (a page of 500 pods decoded is ~15 MiB of Python objects, and RSS kept the peak: docs/design.md).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PERIOD = 300.0
JITTER = 0.2


@dataclass(frozen=True)
class Kind:
    kind: str
    # List path, cluster-wide ({ns} for per-namespace lists when the operator watches namespaces).
    path: str
    ns_path: str | None
    # The index keyed by (namespace, name) (by name for nodes), and every index the resource feeds.
    primary: str
    indexes: tuple[str, ...]

    @property
    def resource(self) -> tuple[str, str, str]:
        """(group, version, plural) as discovery lists it, read from the list path ("" for the core group)."""
        parts = self.path.strip("/").split("/")
        return ("", parts[1], parts[2]) if parts[0] == "api" else (parts[1], parts[2], parts[3])


KINDS: tuple[Kind, ...] = (
    Kind(
        "MPIJob",
        f"/apis/{GROUP}/{VERSION}/{PLURAL}",
        f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}",
        "mpijobs",
        ("mpijobs",),
    ),
    Kind("Pod", "/api/v1/pods", "/api/v1/namespaces/{ns}/pods", "pods", ("pods",)),
    Kind("Job", "/apis/batch/v1/jobs", "/apis/batch/v1/namespaces/{ns}/jobs", "jobs", ("jobs",)),
    Kind("Service", "/api/v1/services", "/api/v1/namespaces/{ns}/services", "services", ("services",)),
    Kind("ConfigMap", "/api/v1/configmaps", "/api/v1/namespaces/{ns}/configmaps", "configmaps", ("configmaps",)),
    Kind(
        "PodDisruptionBudget",
        "/apis/policy/v1/poddisruptionbudgets",
        "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        "pdbs",
        ("pdbs",),
    ),
    Kind(
        "ServiceAccount",
        "/api/v1/serviceaccounts",
        "/api/v1/namespaces/{ns}/serviceaccounts",
        "serviceaccounts",
        ("serviceaccounts",),
    ),
    Kind(
        "Role",
        "/apis/rbac.authorization.k8s.io/v1/roles",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        "roles",
        ("roles",),
    ),
    Kind(
        "RoleBinding",
        "/apis/rbac.authorization.k8s.io/v1/rolebindings",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        "rolebindings",
        ("rolebindings",),
    ),
    Kind("Node", "/api/v1/nodes", None, "nodes", ("nodes",)),
)
BY_KIND = {k.kind: k for k in KINDS}


def _rv(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _cached(cache: Cache, kind: Kind) -> list[Obj]:
    index = cache.indexes.get(kind.primary)
    if index is None:
        return []
    return [obj for key in list(index) for obj in list(index.get(key) or ())]


def drop(cache: Cache, kind: str, obj: Obj) -> None:
    """Forgets one cached object (every index its resource feeds)."""
    meta = obj.get("metadata") or {}
    acckey = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
    for name in BY_KIND[kind].indexes:
        index = cache.indexes.get(name)
        discard = getattr(index, "_discard", None)
        if discard is not None:
            discard(acckey)
    if kind == "Pod":  # the cache's own owner and node maps
        cache.pod_gone((str(meta.get("namespace")), str(meta.get("name"))), str(meta.get("uid")))


def cached_object(cache: Cache, kind: str, namespace: str | None, name: str) -> Obj | None:
    index = cache.indexes.get(BY_KIND[kind].primary) if kind in BY_KIND else None
    if index is None:
        return None
    store = index.get(name if kind == "Node" else (namespace, name))
    return next(iter(store), None) if store else None


async def _list(client: Client, path: str) -> tuple[dict[str, int], int]:
    """uid -> resourceVersion of every object at `path` (paged), and the resourceVersion of the first page."""
    uids: dict[str, int] = {}
    token: str | None = None
    list_rv = 0
    while True:
        query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        page = await client.request("GET", path, query=query, accept=METADATA_ONLY)
        meta = page.get("metadata") or {}
        if not list_rv:
            list_rv = _rv(meta.get("resourceVersion"))
        for item in page.get("items") or []:
            item_meta = item.get("metadata") or {}
            uids[str(item_meta.get("uid"))] = _rv(item_meta.get("resourceVersion"))
        token = meta.get("continue") or None
        if not token:
            return uids, list_rv


def _report(kind: Kind, list_rv: int, live: dict[str, int], cached: list[Obj]) -> None:
    """Names each cached object older than its listed copy (DEBUG; every pass for MPIJobs, for other kinds
    only when one is behind). An object just changed is behind for the moment its event takes to arrive; one
    that stays behind pass after pass means a watch that delivers nothing (docs/reliability.md)."""
    behind = []
    for obj in cached:
        meta = obj.get("metadata") or {}
        listed = live.get(str(meta.get("uid")))
        if listed is not None and listed > _rv(meta.get("resourceVersion")):
            behind.append(f"{meta.get('namespace')}/{meta.get('name')} {meta.get('resourceVersion')}<{listed}")
    if behind or kind.kind == "MPIJob":
        log.debug(
            "relist %s at rv %s: %d listed, %d cached, behind: %s", kind.kind, list_rv, len(live), len(cached), behind
        )


async def relist_once(
    client: Client, cache: Cache, on_ghost: Callable[[str, Obj], None], namespaces: Iterable[str] = ()
) -> int:
    """One pass over every cached kind. Returns how many ghosts were dropped."""
    dropped = 0
    scopes = list(namespaces)
    for kind in KINDS:
        paths = [kind.ns_path.format(ns=ns) for ns in scopes] if scopes and kind.ns_path else [kind.path]
        live: dict[str, int] = {}
        list_rv = 0
        for path in paths:
            uids, rv = await _list(client, path)
            live.update(uids)
            list_rv = rv if not list_rv else min(list_rv, rv)
        cached = _cached(cache, kind)
        if log.isEnabledFor(logging.DEBUG):
            _report(kind, list_rv, live, cached)
        for obj in cached:
            meta = obj.get("metadata") or {}
            if str(meta.get("uid")) in live or _rv(meta.get("resourceVersion")) > list_rv:
                continue  # still there, or seen after the list was taken
            log.warning(
                "dropping %s %s/%s from the cache: gone from the API server",
                kind.kind,
                meta.get("namespace"),
                meta.get("name"),
            )
            on_ghost(kind.kind, obj)
            drop(cache, kind.kind, obj)
            dropped += 1
    return dropped


async def resync_forever(
    client: Client,
    cache: Cache,
    on_ghost: Callable[[str, Obj], None],
    namespaces: Iterable[str] = (),
    period: float = PERIOD,
) -> None:
    """Relists every `period` seconds, +-20 % jitter (so a fleet of operators does not list in step)."""
    scopes = list(namespaces)
    while True:
        await asyncio.sleep(period * (1 + random.uniform(-JITTER, JITTER)))  # jitter, not crypto
        try:
            await relist_once(client, cache, on_ghost, scopes)
        except asyncio.CancelledError:
            raise
        except Exception:  # a failed relist is retried at the next period; the watches go on meanwhile
            log.exception("relist failed")
