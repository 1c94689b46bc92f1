"""What the planner sees: one MPIJob and the objects around it, read from the cache at one moment.

Objects are plain Kubernetes JSON dicts, exactly as the API server returns them, so the snapshot is cheap to
build from the watch cache and easy to write in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mpijob.api.constants import DEFAULT_TERMINATION_TAINTS
from mpijob.api.models import MANAGED_BY_US
from mpijob.planner.status import get_condition, is_true

Obj = dict[str, Any]


@dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings that change what the planner decides."""

    # Appended to host names ("<pod>.<job>.<ns>.svc.<domain>") when set, and used in DNS search paths.
    cluster_domain: str = ""
    termination_taints: tuple[str, ...] = DEFAULT_TERMINATION_TAINTS
    # A cordoned node (spec.unschedulable) counts as terminating: drains start with a cordon.
    cordon_is_termination: bool = True
    # Elastic launchers read their host list from the API (per-job ServiceAccount, Role, RoleBinding);
    # off: from the projected files only, and no RBAC objects are made.
    api_discovery: bool = True
    # Gang scheduler (the --gang-scheduling flag): "" off, "volcano", or the schedulerName of a
    # scheduler-plugins scheduler running coscheduling. See planner/podgroups.py.
    gang_scheduler: str = ""
    # The `spec.runPolicy.managedBy` value that names this operator, and whether jobs without one are ours.
    # Defaults are the reference operator's, so manifests move unchanged; to run beside the reference
    # operator, pick another name and stop claiming unset jobs (docs/migration.md).
    controller_name: str = MANAGED_BY_US
    claim_unmanaged: bool = True

    def manages(self, managed_by: str | None) -> bool:
        return managed_by == self.controller_name if managed_by else self.claim_unmanaged


@dataclass(frozen=True)
class Snapshot:
    job: Obj
    now: datetime
    # Pods whose controller owner is this job (workers, and a launcher pod only if someone made one).
    owned_pods: Sequence[Obj] = ()
    # Every pod of the job's namespace by name: to tell a foreign pod from a free worker name.
    pods_by_name: Mapping[str, Obj] = field(default_factory=dict)
    # The batch Job named <job>-launcher, owned or not, and the pods it owns.
    launcher: Obj | None = None
    launcher_pods: Sequence[Obj] = ()
    service: Obj | None = None
    config_map: Obj | None = None
    pdb: Obj | None = None
    # The launcher's discovery access, named <job>-launcher (owned or not).
    service_account: Obj | None = None
    role: Obj | None = None
    role_binding: Obj | None = None
    # Nodes by name. A node a worker is bound to that is missing here has been deleted.
    nodes: Mapping[str, Obj] = field(default_factory=dict)
    # The PodGroup named like the job (owned or not), when gang scheduling is on.
    pod_group: Obj | None = None
    config: OperatorConfig = field(default_factory=OperatorConfig)
    # Live reads of objects missing from the cache, by (kind, name): True = the API server said 404 (really
    # gone), False = it exists (the cache is behind). Absence from the cache alone decides nothing.
    absence_checks: Mapping[tuple[str, str], bool] = field(default_factory=dict)

    # Exclusive creates of this job (the SSH Secret) the operator made, by (kind, name): the uid it created,
    # or None when the name was taken (AlreadyExists). The operator does not watch Secrets (issue 8, rule 12).
    created: Mapping[tuple[str, str], str | None] = field(default_factory=dict)

    def confirmed_absent(self, kind: str, name: str) -> bool:
        return self.absence_checks.get((kind, name)) is True


def meta(obj: Obj) -> Obj:
    value: Obj = obj.get("metadata") or {}
    return value


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid", ""))


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def controller_uid(obj: Obj) -> str | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def is_owned_by(obj: Obj, owner: Obj) -> bool:
    """`owner` is `obj`'s controller. Owner references are namespace-local: one across namespaces (a uid
    copied into another namespace's object) is ignored."""
    ns = meta(obj).get("namespace")
    return controller_uid(obj) == uid_of(owner) and (ns is None or ns == meta(owner).get("namespace"))


def is_terminating(obj: Obj) -> bool:
    return meta(obj).get("deletionTimestamp") is not None


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
