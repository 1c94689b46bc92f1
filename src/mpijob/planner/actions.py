"""What the planner asks the executor to do. Plain data; the executor applies them in order and stops at
the first failure, so the planner orders them to be safe at every prefix (record first, then act).

The order is defined once, in `Plan.PHASES`. Each write carries the Events that announce it (`announce`):
the executor posts them only when the write really happened (not for a create that found the object there,
nor a delete that found it gone). A write also carries the decisions it carries out (`tags`), for whoever
counts them (app/metrics.py counts the tags of the writes that landed): what was decided is said here,
once, not worked out again from the write's body.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar, overload

from mpijob.api.objects import Obj


@dataclass(frozen=True)
class Emit:
    """A Kubernetes Event on the MPIJob."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Tag:
    """A decision of the planner that a write carries out, named for the metrics (app/metrics.py). Not part
    of the write: two writes that differ only in their tags are the same write."""

    name: str  # one of the names below
    label: str = ""  # which: a condition's type, a leave reason
    count: int = 1  # how many (probes bound by one spec patch)


# A condition of the status write turns True (label: its type).
BECAME_TRUE = "became-true"
# The write marks a worker leaving (label: why, the leave reason it writes).
LEAVING = "leaving"
# The spec patch lists workers whose pods are gone already: someone else removed them.
WORKER_LOST = "worker-lost"
# Regrow (planner/regrow.py): a probe worker created, one deleted for getting no node in time, probes bound
# (counted in Worker replicas by the spec patch that raises them; count: how many).
PROBE_CREATED = "probe-created"
PROBE_TIMED_OUT = "probe-timed-out"
PROBES_BOUND = "probes-bound"


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
    announce: tuple[Emit, ...] = ()
    # The created object's uid goes into this field of the MPIJob status write that follows in the same
    # batch (the planner cannot know a uid before the create): recorded in that write, not in one more.
    uid_into_status: str | None = None
    tags: tuple[Tag, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch. With resource_version set, the write fails on a concurrent change (409)."""

    api_version: str
    kind: str
    name: str
    patch: Obj
    resource_version: str | None = None
    subresource: str | None = None
    announce: tuple[Emit, ...] = ()
    tags: tuple[Tag, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Delete:
    api_version: str
    kind: str
    name: str
    # Precondition: only delete this very object (never a newer one with the same name).
    uid: str | None = None
    propagation: str | None = None
    announce: tuple[Emit, ...] = ()
    tags: tuple[Tag, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class RequeueAfter:
    seconds: float


@dataclass(frozen=True)
class Defer:
    """Stop here and reconcile the job again later: the writes before it are urgent (workers leaving
    discovery), the rest can wait. The next plan recomputes the rest from fresh data (`Plan.urgent_rest`
    says whether that rest still drops hosts).

    `settle`: what follows is only `Plan.settle` (objects no pod or launcher waits for); the job's next pass
    comes behind every other job's ordinary work, so under a shared QPS budget these creates do not delay
    another job's pods."""

    settle: bool = False


@dataclass(frozen=True)
class ConfirmAbsence:
    """A live read the planner needs before deciding: the cache lacks this object, and a destructive or
    replica-lowering decision depends on its absence (a cold cache, a watch not delivered yet, a watch gap).
    The runtime GETs it and passes the answer to the next plan in `Snapshot.absence_checks`; a plan that
    asks for confirmation writes nothing."""

    kind: str  # "Node" (cluster-scoped) or "Pod" (in the job's namespace)
    name: str


Action = Create | Patch | Delete | Emit | RequeueAfter | ConfirmAbsence | Defer
Write = Create | Patch | Delete


@dataclass(frozen=True)
class Plan(Sequence[Action]):
    """One reconcile's decisions, by phase. Iterating it gives the actions in the one safe order (`PHASES`):
    every decision is recorded in the API before it is acted on, so a crash (or a 409) after any prefix leaves
    a state from which the next plan continues the same way.

    - leave_discovery: writes that take workers out of what the launcher reads (the ConfigMap's list, or the
      launcher pods' annotation); the launcher must see them first (a node may have seconds left). When other
      writes follow, a Defer comes after them: every affected job's list changes before any job's other writes.
    - record: the MPIJob spec patch (workersToDelete, Worker replicas) that records node-termination and
      lost-worker decisions.
    - mark: the leaving annotations on the workers that leave.
    - discovery: the ConfigMap (hostfile, script, list) and launcher nudges that add hosts or change nothing
      a launcher could act on wrongly.
    - announce: Events of the decisions above that are not one write's (WorkersLeaving, ...); those of the
      decisions the record makes (NodeTerminating, WorkerLost, ...) ride on its patch instead.
    - children: the job's other objects (Service, PDB, PodGroup, discovery RBAC, launcher Job changes).
    - secret: the SSH Secret's exclusive create, right before the status (see `child_writes.ensure_secret`).
    - status: the status write (its Events are announced with it).
    - delete: pods that go; after the status, which records why (leavingWorkers, discoveredHosts).
    - create: new workers and the launcher; after the status, which records lastWorkerIndex.
    - finish: the job's own deletion (ttlSecondsAfterFinished), after its final status.
    - settle: in a plan that creates pods or the launcher, the creates of objects nothing waits for (the
      PodDisruptionBudget, the discovery Role and its RoleBinding: discover_hosts.sh reads the projected
      files until the API answers), after a Defer(settle=True): they go out in a pass of their own, behind
      other jobs' ordinary passes (docs/design.md, "The order of work"). In any other plan they are
      ordinary children, written before that plan's status.
    - requeue_after: when to plan again at the latest (a grace period or backoff ending).
    - confirm: live reads needed before deciding; a plan that asks for them writes nothing.
    """

    PHASES: ClassVar[tuple[str, ...]] = (
        "leave_discovery",
        "record",
        "mark",
        "discovery",
        "announce",
        "children",
        "secret",
        "status",
        "delete",
        "create",
        "finish",
        "settle",
    )

    leave_discovery: tuple[Write, ...] = ()
    record: tuple[Patch, ...] = ()
    mark: tuple[Patch, ...] = ()
    discovery: tuple[Write, ...] = ()
    announce: tuple[Emit, ...] = ()
    children: tuple[Write, ...] = ()
    secret: tuple[Create, ...] = ()
    status: tuple[Patch, ...] = ()
    delete: tuple[Delete, ...] = ()
    create: tuple[Create, ...] = ()
    finish: tuple[Delete, ...] = ()
    settle: tuple[Create, ...] = ()
    requeue_after: float | None = None
    confirm: tuple[ConfirmAbsence, ...] = ()
    # Planned only as far as leave_discovery (`plan(..., urgent_first=True)`): the rest is planned by the
    # deferred pass, so a Defer follows the urgent writes whatever else this plan holds.
    partial: bool = False
    # The writes cut by the Defer still take hosts out of discovery (the launcher nudges behind a ConfigMap
    # patch, `Draft._urgent`): the job's next pass is queued at DISCOVERY (runtime/workqueue.py).
    urgent_rest: bool = False
    ordered: tuple[Action, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rest: list[Action] = [action for phase in self.PHASES[1:-1] for action in getattr(self, phase)]
        urgent: list[Action] = list(self.leave_discovery)
        if urgent and (self.partial or self.urgent_rest or self.settle or any(_is_write(a) for a in rest)):
            urgent.append(Defer())
        if self.requeue_after is not None:
            rest.append(RequeueAfter(max(0.0, self.requeue_after)))
        if self.settle and any(_is_write(a) for a in rest):
            rest.append(Defer(settle=True))
        object.__setattr__(self, "ordered", (*self.confirm, *urgent, *rest, *self.settle))

    def phases(self) -> Iterator[tuple[str, tuple[Action, ...]]]:
        """(phase name, its actions) in order, for tests and logs."""
        for item in fields(self):
            if item.name in self.PHASES:
                yield item.name, getattr(self, item.name)

    def urgent_positions(self) -> range:
        """Where leave_discovery's writes are in `ordered` (they go first, after the live reads)."""
        return range(len(self.confirm), len(self.confirm) + len(self.leave_discovery))

    def writes(self) -> list[Write]:
        return [action for action in self.ordered if isinstance(action, Create | Patch | Delete)]

    @overload
    def __getitem__(self, index: int) -> Action: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Action]: ...
    def __getitem__(self, index: int | slice) -> Action | Sequence[Action]:
        return self.ordered[index]

    def __len__(self) -> int:
        return len(self.ordered)


def _is_write(action: Action) -> bool:
    return isinstance(action, Create | Patch | Delete)


NOTHING = Plan()
