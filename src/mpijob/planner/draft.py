"""The plan being made (`Draft`: the status being built and the writes by phase, frozen into a `Plan`), and
what every part of the planner shares (`PlanContext`): the job's read-only inputs, the draft, and the helpers
that add writes with the Events that announce them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from mpijob.api.models import (
    API_VERSION,
    HostDiscovery,
    JobStatus,
    MPIJobSpec,
)
from mpijob.api.objects import is_true
from mpijob.planner import status as conditions
from mpijob.planner.actions import BECAME_TRUE, Create, Delete, Emit, Patch, Plan, Tag, Write
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    format_time,
    is_owned_by,
    name_of,
    resource_version,
    uid_of,
)
from mpijob.planner.workers import workers_of


@dataclass
class Draft:
    """The plan being made: the new status and the writes phase by phase (see `Plan`); frozen into a Plan at
    the end. The only mutable state of a plan."""

    # The status being built, from the last one read; written (`status`) if it differs from the last written.
    new_status: JobStatus
    record: list[Patch] = field(default_factory=list)
    mark: list[Patch] = field(default_factory=list)
    discovery: list[Write] = field(default_factory=list)
    # Discovery writes that drop hosts a launcher reads (moved to Plan.leave_discovery).
    dropping_hosts: list[Write] = field(default_factory=list)
    announce: list[Emit] = field(default_factory=list)
    children: list[Write] = field(default_factory=list)
    secret: list[Create] = field(default_factory=list)
    status: list[Patch] = field(default_factory=list)
    status_events: list[Emit] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    create: list[Create] = field(default_factory=list)
    finish: list[Delete] = field(default_factory=list)
    settle: list[Create] = field(default_factory=list)
    requeue_after: list[float] = field(default_factory=list)
    # Objects with our children's names that this job does not own ("Kind name"), for ResourceConflict.
    conflicts: list[str] = field(default_factory=list)
    # The SSH Secret's name is held by a Secret we did not create.
    secret_taken: bool = False

    def freeze_urgent(self) -> Plan:
        """Only the writes that take hosts out of discovery, then a Defer (`Plan.partial`): what `freeze`
        would put first, without planning the rest."""
        urgent = self._urgent()
        return Plan(leave_discovery=tuple(urgent), partial=True, urgent_rest=self._urgent_rest(urgent))

    def _urgent(self) -> list[Write]:
        """The ConfigMap patch that drops hosts is what the launcher reads first; only when it drops none do
        the launcher nudges that drop hosts (the file fallback) go first. Then this plan's record and marks
        go just before them, in their phase order: a nudge tells the leaving workers' deadlines
        (`worker_writes.launcher_leaving`), and those must be on the pods before the launcher hears them. If
        the Defer cut the marks, the next pass would mark the workers with deadlines from its own clock."""
        config_maps = [w for w in self.dropping_hosts if _kind(w) == "ConfigMap"]
        if config_maps or not self.dropping_hosts:
            return config_maps
        return [*self.record, *self.mark, *self.dropping_hosts]

    def _urgent_rest(self, urgent: list[Write]) -> bool:
        """Whether writes that drop hosts were left out of `urgent` (the nudges behind a ConfigMap patch)."""
        return len(urgent) < len(self.dropping_hosts)

    def freeze(self) -> Plan:
        urgent = self._urgent()
        taken = {id(w) for w in urgent}  # by identity: the same write object moved to leave_discovery

        def rest(writes: list[Any]) -> tuple[Any, ...]:
            return tuple(w for w in writes if id(w) not in taken)

        return Plan(
            leave_discovery=tuple(urgent),
            urgent_rest=self._urgent_rest(urgent),
            record=rest(self.record),
            mark=rest(self.mark),
            discovery=rest(self.discovery),
            announce=tuple(self.announce),
            # Objects nothing waits for wait only behind a pass that creates pods or the launcher (Plan.settle);
            # otherwise they are ordinary children, written before the status (so a Running job has them).
            children=tuple(self.children) if self.create else (*self.children, *self.settle),
            secret=tuple(self.secret),
            status=tuple(self.status),
            delete=tuple(self.delete),
            create=tuple(self.create),
            finish=tuple(self.finish),
            settle=tuple(self.settle) if self.create else (),
            requeue_after=min(self.requeue_after) if self.requeue_after else None,
        )


def _kind(write: Write) -> str:
    return str(write.obj["kind"]) if isinstance(write, Create) else write.kind


class PlanContext:
    """One plan of a valid job: its read-only inputs (Final), and the `draft` it builds (the new status,
    compared with `old_status` at the end, and the writes by phase). It holds no other state: the parts of
    a plan are module functions of it (job_status.py, worker_writes.py, backoff.py, child_writes.py,
    finish.py), called in turn by plan.py; the worker decisions themselves come from the pure steps of
    workers.py and elastic.py."""

    def __init__(self, snapshot: Snapshot, spec: MPIJobSpec) -> None:
        self.snapshot: Final = snapshot
        self.spec: Final = spec
        self.job: Final = snapshot.job
        self.name: Final = name_of(snapshot.job)
        self.now: Final = format_time(snapshot.now)
        # The last status as written (the status write is a merge patch from it; only read, never changed,
        # like all of the snapshot) and as read (typed).
        self.old_status: Final[dict[str, Any]] = snapshot.job.get("status") or {}
        self.previous: Final = snapshot.last_status
        # Pods of a launcher Job we do not own say nothing about this job.
        launcher = snapshot.launcher
        owned = launcher is not None and is_owned_by(launcher, self.job)
        self.launcher_pods: Final = snapshot.launcher_pods if owned else ()
        self.workers: Final = workers_of(snapshot)
        # A second read, not a deep copy of the first: the same model, in half the time of pydantic's copy.
        self.draft: Final = Draft(new_status=conditions.read_status_fields(self.old_status).status)

    def emit(self, type_: str, reason: str, message: str) -> None:
        self.draft.announce.append(Emit(type_, reason, message))

    def condition(self, kind: str, value: bool, reason: str, message: str, event: str | None = "Normal") -> None:
        flipped = conditions.set_condition(self.draft.new_status, kind, value, reason, message, self.now)
        if flipped and value and event:
            # Announced after the status write succeeds, so a retried reconcile does not repeat it.
            self.draft.status_events.append(Emit(event, reason, message))

    @staticmethod
    def creation(obj: Obj, *, ssh: bool = False, exclusive: bool = False) -> Create:
        """A create, with the Event that announces it (posted only if the object was really created)."""
        kind = obj["kind"]
        made = Emit("Normal", f"SuccessfulCreate{kind}", f"Created {kind} {obj['metadata']['name']}")
        return Create(obj, generate_ssh_keys=ssh, exclusive=exclusive, announce=(made,))

    def create_child(self, obj: Obj, *, settle: bool = False) -> None:
        """`settle`: nothing waits for it; created after this pass's pods and launcher (Plan.settle), with no
        Event: in a batch of their own its announcement would be one more request per job."""
        if settle:
            self.draft.settle.append(Create(obj))
        else:
            self.draft.children.append(self.creation(obj))

    def delete_pod(self, pod: Obj, why: str, tags: tuple[Tag, ...] = ()) -> None:
        gone = Emit("Normal", "SuccessfulDeletePod", f"Deleted pod {name_of(pod)}: {why}")
        self.draft.delete.append(Delete("v1", "Pod", name_of(pod), uid=uid_of(pod), announce=(gone,), tags=tags))

    def owned_or_conflict(self, obj: Obj | None, kind: str, name: str) -> bool | None:
        """True: ours; None: absent; False: someone else's (recorded as a conflict, never touched)."""
        if obj is None:
            return None
        if is_owned_by(obj, self.job):
            return True
        self.draft.conflicts.append(f"{kind} {name}")
        return False

    def foreign_children(self) -> list[str]:
        """Objects with the names of this job's Service, ConfigMap, Secret or launcher Job that it does not
        own. While any exists, no worker or launcher is created."""
        named = (
            ("Service", self.snapshot.service),
            ("ConfigMap", self.snapshot.config_map),
            ("Job", self.snapshot.launcher),
        )
        foreign = [kind for kind, obj in named if obj is not None and not is_owned_by(obj, self.job)]
        return [*foreign, "Secret"] if self.draft.secret_taken else foreign

    def api_discovery(self) -> bool:
        ep = self.spec.elastic_policy
        return ep is not None and ep.host_discovery is HostDiscovery.API and self.snapshot.config.api_discovery


def status_patch(job: Obj, old: dict[str, Any], status: JobStatus, now: str) -> Patch | None:
    """The status write (`status_write`) of `status` with its `state` set from its conditions. Sets `state`
    (and `lastReconcileTime` when writing) on `status`."""
    status.state = conditions.state(status)
    patch = status_write(job, old, status, now)
    if patch is not None:
        status.last_reconcile_time = now
    return patch


def status_write(job: Obj, old: dict[str, Any], status: JobStatus, now: str) -> Patch | None:
    """The write of `status` over the status read (`old`), only when it changed (a steady job writes
    nothing), stamped `lastReconcileTime` and optimistic on the job's resourceVersion. Tagged with the
    conditions it turns True (Created, Succeeded, Failed...: the metrics count them)."""
    new = conditions.dump_status(status)
    if new == old:
        return None
    new["lastReconcileTime"] = now
    kinds = dict.fromkeys(str(cond.get("type")) for cond in new.get("conditions") or ())
    return Patch(
        API_VERSION,
        "MPIJob",
        name_of(job),
        {"status": merge_patch_to(old, new)},
        resource_version=resource_version(job),
        subresource="status",
        tags=tuple(Tag(BECAME_TRUE, kind) for kind in kinds if is_true(new, kind) and not is_true(old, kind)),
    )


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of a flat map from `old` to `new` that names only what differs."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    patch.update({key: value for key, value in new.items() if old.get(key) != value})
    return patch


def merge_patch_to(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new`, with a null for every key of `old` it lacks: a JSON merge patch keeps keys it does not name, so
    a count that dropped to zero (omitted) would otherwise stay behind and the status would never converge."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        patch[key] = merge_patch_to(before, value) if isinstance(before, dict) and isinstance(value, dict) else value
    return patch
