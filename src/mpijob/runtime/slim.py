"""What the cache keeps of each object: only the fields the planner reads (memory scales with the cluster)."""

from __future__ import annotations

import hashlib
import sys
import weakref
from collections.abc import Mapping
from typing import Any

import orjson

from mpijob.api.constants import DISCOVER_HOSTS_KEY, HOSTFILE_KEY, LABEL_OPERATOR_NAME
from mpijob.api.models import GROUP, KIND
from mpijob.api.objects import controller_ref

# Longer strings are rarely repeated (scripts, messages): not worth a place in the interned table.
_SHARED_MAX = 256
# Annotations of an MPIJob nobody here reads: kubectl's copy of the whole applied manifest.
_UNREAD_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
# ConfigMap keys the planner only compares with what it would write, never reads (the generated script is
# never parsed: planner/discovery.py). The discovery list itself (discovered_hosts) is read, and kept.
_COMPARED_ONLY = (DISCOVER_HOSTS_KEY, HOSTFILE_KEY)


class Digest:
    """Stands for a long text the planner only compares (`==`, `!=`) with the text it would write: equal to
    exactly that text (BLAKE2b, 128 bits), in 80 bytes instead of the text (discover_hosts.sh is ~9 KiB per
    job). Anything else it is compared with is unequal."""

    __slots__ = ("digest", "length")
    __hash__ = None  # type: ignore[assignment]  # equal to a str, so it cannot hash like one

    def __init__(self, text: str) -> None:
        self.length = len(text)
        self.digest = _digest(text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Digest):
            return self.length == other.length and self.digest == other.digest
        return isinstance(other, str) and len(other) == self.length and _digest(other) == self.digest

    def __repr__(self) -> str:
        return f"<digest of {self.length} characters>"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


_META_KEYS = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
    "creationTimestamp",
)


def _shared(value: Any) -> Any:
    """One copy of a string many cached objects repeat (label values, owner references, namespaces, node
    names, phases, condition types): every watch event decodes fresh copies, and the cache would keep one
    per object. ~1 KiB less per cached pod (docs/design.md)."""
    return sys.intern(value) if type(value) is str else value


def _shared_tree(value: Any) -> Any:
    """A copy of a JSON tree whose short strings are shared (see _shared): an MPIJob's spec repeats its
    template's images, commands, arguments and label values in every job made from it."""
    if type(value) is str:
        return sys.intern(value) if len(value) <= _SHARED_MAX else value
    if type(value) is dict:
        return {k: _shared_tree(v) for k, v in value.items()}
    if type(value) is list:
        return [_shared_tree(v) for v in value]
    return value


def _shared_dict(values: Any) -> Any:
    return {k: _shared(v) for k, v in values.items()} if isinstance(values, dict) else values


class SharedRefs(list[Any]):
    """An ownerReferences list shared by every cached object with the same owners (a job's workers, Service,
    ConfigMap, PDB and RBAC objects: ~370 bytes each otherwise). Nothing edits a cached object in place."""

    __slots__ = ("__weakref__",)


# Owners' reference lists, as long as some cached object holds them (a weak table: it never outgrows the cache).
_REFS: weakref.WeakValueDictionary[tuple[Any, ...], SharedRefs] = weakref.WeakValueDictionary()


def _owner_refs(refs: list[Any]) -> list[Any]:
    try:
        key = tuple(tuple(sorted(ref.items())) for ref in refs)
        hash(key)
    except (AttributeError, TypeError):  # not the shape the API server gives: kept as it is, unshared
        return [_shared_dict(ref) for ref in refs]
    found = _REFS.get(key)
    if found is None:
        found = SharedRefs(_shared_dict(ref) for ref in refs)
        _REFS[key] = found
    return found


class SharedDict(dict[str, Any]):
    """A dict shared by every cached object with the same one: a pod's spec as the cache keeps it (the node's
    name: one per node, not per pod), a condition (the Ready conditions of pods ready in the same second are
    equal), an MPIJob's spec (the same in every job of one manifest). ~180-230 bytes per pod each, ~4 KiB
    per job otherwise. Nothing edits a cached object in place (the planner copies a template it changes)."""

    __slots__ = ("__weakref__",)


class SharedList(list[Any]):
    """A pod's conditions list, shared like SharedDict (most pods' is [Ready True since second S])."""

    __slots__ = ("__weakref__",)


# Shared dicts and lists, by their contents, as long as some cached object holds them (weak tables).
_DICTS: weakref.WeakValueDictionary[tuple[Any, ...], SharedDict] = weakref.WeakValueDictionary()
_LISTS: weakref.WeakValueDictionary[tuple[Any, ...], SharedList] = weakref.WeakValueDictionary()


def _leaf(values: Mapping[str, Any]) -> dict[str, Any]:
    """One copy of a dict whose values are all strings or None (anything else is kept as it is, unshared:
    True == 1 would make two different dicts one key)."""
    if not all(v is None or type(v) is str for v in values.values()):
        return dict(values)
    key = tuple((k, _shared(v)) for k, v in values.items())
    found = _DICTS.get(key)
    if found is None:
        found = SharedDict(key)
        _DICTS[key] = found
    return found


def _leaves(items: list[dict[str, Any]]) -> list[Any]:
    """One copy of a list of such dicts (see _leaf)."""
    leaves = [_leaf(item) for item in items]
    if not all(type(leaf) is SharedDict for leaf in leaves):
        return leaves
    key = tuple(tuple(leaf.items()) for leaf in leaves)
    found = _LISTS.get(key)
    if found is None:
        found = SharedList(leaves)
        _LISTS[key] = found
    return found


def _ours(body: Mapping[str, Any]) -> bool:
    """Labelled as the operator's, or controlled by an MPIJob: the reference operator (v0.8.2) labels the
    ConfigMap, Service, Secret and launcher Job it makes only `app: <job>`, and the planner decides whether a
    child is a job's by its controller reference (`is_owned_by`), so the cache must keep what it compares of
    those too (issue 30: an adopted job's ConfigMap cached without its data was patched forever)."""
    meta = body.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_OPERATOR_NAME) is not None:
        return True
    ref = controller_ref(meta)
    return ref is not None and ref.get("kind") == KIND and str(ref.get("apiVersion") or "").partition("/")[0] == GROUP


def _meta(body: Mapping[str, Any]) -> dict[str, Any]:
    """Annotations only of objects labelled as ours: the planner reads none of anyone else's (a foreign
    object only tells it that a name is taken), and they are often large (last-applied-configuration)."""
    meta = body.get("metadata") or {}
    keys = _META_KEYS if _ours(body) else tuple(k for k in _META_KEYS if k != "annotations")
    out = {k: meta[k] for k in keys if k in meta}
    # Timestamps too: objects made together share their creation second.
    for key in ("namespace", "creationTimestamp", "deletionTimestamp"):
        if key in out:
            out[key] = _shared(out[key])
    if "labels" in out:
        out["labels"] = _shared_dict(out["labels"])
    if isinstance(out.get("ownerReferences"), list):
        out["ownerReferences"] = _owner_refs(out["ownerReferences"])
    return out


def mpijob(body: Mapping[str, Any]) -> dict[str, Any]:
    """Our own objects: everything but managedFields (often the largest part, never read) and kubectl's
    last-applied copy of the manifest (as large as the spec, never read)."""
    out = dict(body)
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and any(k in annotations for k in _UNREAD_ANNOTATIONS):
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in _UNREAD_ANNOTATIONS}
    out["metadata"] = meta
    if isinstance(body.get("spec"), dict):
        out["spec"] = _shared_spec(body["spec"])
    return out


# MPIJob specs by their JSON text, as long as some cached job holds them (a weak table).
_SPECS: weakref.WeakValueDictionary[bytes, SharedDict] = weakref.WeakValueDictionary()


def _shared_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """One copy of an MPIJob spec for every cached job with the same one (jobs made from one manifest differ
    in their names, not in their specs: ~4 KiB per job otherwise). Keyed by the JSON text, which is exact
    (1 and true, 1 and 1.0 differ) and ordered as the API server sends it."""
    try:
        key = orjson.dumps(spec)
    except TypeError:  # not JSON (never from the API server): kept as it is
        tree: dict[str, Any] = _shared_tree(spec)
        return tree
    found = _SPECS.get(key)
    if found is None:
        found = SharedDict(_shared_tree(spec))
        _SPECS[key] = found
    return found


def pod(body: Mapping[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    return {
        "metadata": _meta(body),
        "spec": _leaf({"nodeName": spec.get("nodeName")}),
        "status": {
            "phase": _shared(status.get("phase")),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "podIP": status.get("podIP"),
            "conditions": _leaves(
                [c for c in status.get("conditions") or [] if c.get("type") in ("Ready", "DisruptionTarget")]
            ),
        },
    }


def node(body: Mapping[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    return {
        "metadata": _meta(body),
        "spec": {"taints": spec.get("taints") or [], "unschedulable": bool(spec.get("unschedulable"))},
    }


def batch_job(body: Mapping[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    template = spec.get("template") or {}
    return {
        "metadata": _meta(body),
        "spec": {
            "suspend": spec.get("suspend"),
            # The resume patch must keep the template labels the Job's (generated) selector matches.
            "selector": spec.get("selector") or {},
            "template": {
                "metadata": (template.get("metadata") or {}) if _ours(body) else {},
                # The resume patch replaces the node selector, so it must know the keys to remove.
                "spec": {"nodeSelector": (template.get("spec") or {}).get("nodeSelector")},
            },
        },
        "status": body.get("status") or {},
    }


def owned_object(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Services, ConfigMaps, PDBs, ServiceAccounts, Roles, RoleBindings, PodGroups: the contents only for
    ours. (Secrets are not watched at all.)"""
    out: dict[str, Any] = {"metadata": _meta(body)}
    if _ours(body) and kind != "Secret":
        for key in ("spec", "data", "rules", "subjects", "roleRef"):
            if key in body:
                out[key] = body[key]
        if kind == "ConfigMap" and isinstance(out.get("data"), dict):
            out["data"] = _compared_only(out["data"])
    return out


def _compared_only(data: dict[str, Any]) -> dict[str, Any]:
    return {k: Digest(v) if k in _COMPARED_ONLY and type(v) is str else v for k, v in data.items()}
