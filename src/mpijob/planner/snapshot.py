"""What the planner sees: one MPIJob and the objects around it, read from the cache at one moment.

Objects are plain Kubernetes JSON dicts, exactly as the API server returns them, so the snapshot is cheap to
build from the watch cache and easy to write in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from mpijob.api.constants import DEFAULT_TERMINATION_TAINTS, LABEL_JOB_ROLE, ROLE_WORKER, worker_index
from mpijob.api.models import MANAGED_BY_US
from mpijob.api.objects import (
    Obj,
    annotations_of,
    condition,
    condition_true,
    controller_uid,
    format_time,
    is_owned_by,
    is_terminating,
    labels_of,
    meta,
    name_of,
    parse_time,
    pod_node,
    pod_phase,
    pod_ready,
    resource_version,
    uid_of,
)
from mpijob.planner.status import StatusRead, read_status_fields

# The accessors live in api/objects.py; re-exported for callers that import them from here.
__all__ = [
    "Obj",
    "OperatorConfig",
    "Snapshot",
    "annotations_of",
    "condition",
    "condition_true",
    "controller_uid",
    "format_time",
    "is_owned_by",
    "is_terminating",
    "labels_of",
    "meta",
    "name_of",
    "parse_time",
    "pod_node",
    "pod_phase",
    "pod_ready",
    "resource_version",
    "uid_of",
]


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
    # What the operator may do (runtime/permissions.py, asked at start-up). Without nodes: no node signals
    # (their informer is not started); without PDBs: elastic jobs get none; without the launcher's RBAC
    # kinds: no discovery access is made or cleaned up (api_discovery is off too). `permissions_message`
    # says what is off to each elastic job ("" when nothing is).
    node_signals: bool = True
    disruption_budgets: bool = True
    discovery_access: bool = True
    permissions_message: str = ""
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
    # Set by the runtime while its spin guard holds the job back (what the repeated writes were waiting for):
    # the ReconcileStalled condition the runtime wrote stays; None clears it (job_status.stall_cleared).
    held_back: str | None = None
    # Seconds since the runtime first saw the job (this run of the operator, on its monotonic clock: the
    # server clock `now` steps by up to a second); None: long known (plan.py:_settling).
    seen_for: float | None = None

    @cached_property
    def workers(self) -> tuple[Obj, ...]:
        """The job's worker pods (workers.workers_of); computed once per snapshot, which the plan reads
        several times."""
        job_name = name_of(self.job)
        found = []
        for pod in self.owned_pods:
            if not is_owned_by(pod, self.job):
                continue
            role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_ROLE)
            if role == ROLE_WORKER or (role is None and worker_index(job_name, name_of(pod)) is not None):
                found.append(pod)
        return tuple(found)

    @cached_property
    def last_status(self) -> StatusRead:
        """The job's last status, read once per snapshot for every part of the plan that only reads it (the
        plan read it four times). Never changed: the status a plan builds is a read of its own."""
        return read_status_fields(self.job.get("status"))

    def confirmed_absent(self, kind: str, name: str) -> bool:
        return self.absence_checks.get((kind, name)) is True
