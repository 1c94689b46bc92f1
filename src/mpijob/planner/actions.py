"""What the planner asks the executor to do. Plain data; the executor applies them in order and stops at
the first failure, so the planner orders them to be safe at every prefix (record first, then act)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Create:
    obj: Obj
    # A Secret whose SSH key pair the executor generates (key generation is I/O-free but random, and the
    # planner stays deterministic).
    generate_ssh_keys: bool = False
    # AlreadyExists is a conflict, not a no-op: the executor stops the batch there and reports the outcome
    # (the created object's uid, or None for AlreadyExists) in `Outcome.created`, for the next plan. Used
    # for the SSH Secret, which the operator cannot read back (no get/list/watch of Secrets).
    exclusive: bool = False


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch. With resource_version set, the write fails on a concurrent change (409)."""

    api_version: str
    kind: str
    name: str
    patch: Obj
    resource_version: str | None = None
    subresource: str | None = None


@dataclass(frozen=True)
class Delete:
    api_version: str
    kind: str
    name: str
    # Precondition: only delete this very object (never a newer one with the same name).
    uid: str | None = None
    propagation: str | None = None


@dataclass(frozen=True)
class Emit:
    """A Kubernetes Event on the MPIJob."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class RequeueAfter:
    seconds: float


@dataclass(frozen=True)
class Defer:
    """Stop here and reconcile the job again later, behind the other queued jobs: the writes before it are
    urgent (workers leaving discovery), the rest can wait. The next plan recomputes the rest from fresh data."""


@dataclass(frozen=True)
class ConfirmAbsence:
    """A live read the planner needs before deciding: the cache lacks this object, and a destructive or
    replica-lowering decision depends on its absence (a cold cache, a watch not delivered yet, a watch gap).
    The runtime GETs it and passes the answer to the next plan in `Snapshot.absence_checks`; a plan that
    asks for confirmation writes nothing."""

    kind: str  # "Node" (cluster-scoped) or "Pod" (in the job's namespace)
    name: str


Action = Create | Patch | Delete | Emit | RequeueAfter | ConfirmAbsence | Defer
