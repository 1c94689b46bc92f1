"""Accessors of Kubernetes objects as plain JSON dicts (what the API server returns and the cache holds).

One `Obj` alias and one set of readers for every layer: a field is read the same way everywhere, and a
missing or mistyped field reads as absent, never as an exception.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mpijob.api.constants import ANNOTATION_LEAVING_SINCE

Obj = dict[str, Any]

# The phases of a pod that runs no more: its containers stopped for good.
FINISHED_PHASES = ("Failed", "Succeeded")


def get_condition(status: Obj, kind: str) -> Obj | None:
    """The condition of type `kind` in a status (one entry per type, as Kubernetes keeps them)."""
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def is_true(status: Obj, kind: str) -> bool:
    cond = get_condition(status, kind)
    return cond is not None and cond.get("status") == "True"


# The planner reads names, uids and owners hundreds of times per plan: these accessors are its hottest
# functions (bench: `plan()` profile), so they read the dicts directly instead of through `meta`. Never
# written to (they only read).
_EMPTY: Obj = {}


def meta(obj: Obj) -> Obj:
    value: Obj = obj.get("metadata") or {}  # a fresh dict, not _EMPTY: a caller may write to it
    return value


def name_of(obj: Obj) -> str:
    name = (obj.get("metadata") or _EMPTY).get("name", "")
    return name if type(name) is str else str(name)


def uid_of(obj: Obj) -> str:
    uid = (obj.get("metadata") or _EMPTY).get("uid", "")
    return uid if type(uid) is str else str(uid)


def resource_version(obj: Obj) -> str | None:
    """The resourceVersion a patch of an object read from the cache carries: if the object was deleted and
    made again under the same name (by someone else) since then, the patch fails with 409 instead of
    changing theirs."""
    version = meta(obj).get("resourceVersion")
    return str(version) if version is not None else None


def resource_version_number(version: object) -> int:
    """A resourceVersion as a number, to tell which of two versions is newer. resourceVersions are opaque, but
    etcd-backed servers make them increasing integers; anything else is 0, so no comparison using it fires."""
    return int(version) if isinstance(version, str) and version.isascii() and version.isdigit() else 0


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def controller_ref(metadata: Any) -> dict[str, Any] | None:
    """The owner reference marked controller in an object's metadata, or None. Defensive: the informers call
    it on objects as the API server sent them, before anything checked their shape."""
    refs = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def controller_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or _EMPTY).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def is_owned_by(obj: Obj, owner: Obj) -> bool:
    """`owner` is `obj`'s controller. Owner references are namespace-local: one across namespaces (a uid
    copied into another namespace's object) is ignored."""
    ns = (obj.get("metadata") or _EMPTY).get("namespace")
    return controller_uid(obj) == uid_of(owner) and (ns is None or ns == meta(owner).get("namespace"))


def is_terminating(obj: Obj) -> bool:
    return (obj.get("metadata") or _EMPTY).get("deletionTimestamp") is not None


def is_leaving(pod: Obj) -> bool:
    """A worker marked leaving (the annotation with the time it started): out of discovery, deleted after its
    grace period."""
    return ANNOTATION_LEAVING_SINCE in ((pod.get("metadata") or _EMPTY).get("annotations") or _EMPTY)


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time, or None for anything else: annotations and status fields can be edited by hand,
    and a bad one must not wedge the job. Naive times (comparing them with an aware `now` raises) and
    years outside 1970..9000 (adding a grace period would overflow) count as bad."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None or not 1970 <= parsed.year <= 9000:
        return None
    return parsed


def format_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_node(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def condition(obj: Obj, kind: str) -> Obj | None:
    """A condition of any object's status (MPIJob, batch Job, Pod)."""
    return get_condition(obj.get("status") or {}, kind)


def condition_true(obj: Obj, kind: str) -> bool:
    return is_true(obj.get("status") or {}, kind)
