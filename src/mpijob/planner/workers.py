"""Worker decisions: which workers to keep, mark as leaving, delete or create; and the spec patch that
records node-termination and external-removal decisions in the MPIJob itself. The static job's rules are
here (`plan_static`); the elastic job's steps are in elastic.py, on the helpers below.

Vocabulary:
- *listed*: named in spec.elasticPolicy.workersToDelete.
- *leaving*: carries the leaving-since annotation: out of discovery, pod deleted after the grace period.
- *kept*: a worker that counts toward Worker replicas: not listed, not leaving, not terminating, not failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mpijob.api import constants
from mpijob.api.models import MPIJobSpec, NodeTerminationPolicy
from mpijob.planner.actions import Emit
from mpijob.planner.ranking import rank_victims
from mpijob.planner.regrow import Regrow
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    annotations_of,
    condition,
    is_owned_by,
    is_terminating,
    labels_of,
    name_of,
    parse_time,
    pod_node,
    pod_phase,
)
from mpijob.planner.status import is_finished

# Bad workersToDelete names spelled out in the one Warning that reports them.
BAD_NAMES_SHOWN = 10


@dataclass(frozen=True)
class Leave:
    pod: Obj
    reason: str


@dataclass(frozen=True)
class Signal:
    pod: Obj
    node: str
    signal: str
    # The pod itself is being killed (`pod_signal`), whatever its node: reported per signal, not per node.
    disruption: bool = False


@dataclass(frozen=True)
class WorkerPlan:
    """What the worker rules decided, for the planner to turn into writes."""

    # Spec changes to record first (None: nothing to record).
    new_replicas: int | None = None
    new_workers_to_delete: list[str] | None = None
    events: tuple[Emit, ...] = ()
    signals: tuple[Signal, ...] = ()
    to_leave: tuple[Leave, ...] = ()
    to_delete: tuple[Obj, ...] = ()
    to_create: tuple[int, ...] = ()
    kept: tuple[Obj, ...] = ()
    leaving: tuple[str, ...] = ()
    # Names in the hostfile (kept + created) and in discover_hosts.sh (kept and Running), by index.
    hostfile_names: tuple[str, ...] = ()
    discovery_names: tuple[str, ...] = ()
    foreign_names: tuple[str, ...] = ()
    requeue_after: float | None = None
    # Serving workers on a cordoned node kept in service (not listed) so that a soft signal never takes the
    # job below minReplicas; as many replacements are created first (make before break).
    held: tuple[str, ...] = ()
    # Workers that started leaving because they crashed (replacement backoff; see elastic.new_failures).
    failures: int = 0
    # Regrow (regrow.py): MPIJob annotations for the spec patch (the target), probe workers to create (indexes)
    # and to delete (timed out, or no longer needed), and the decision itself (its status and Events).
    job_annotations: dict[str, str | None] | None = None
    probes_to_create: tuple[int, ...] = ()
    probes_to_delete: tuple[Obj, ...] = ()
    regrow: Regrow | None = None


def workers_of(snapshot: Snapshot) -> list[Obj]:
    """Pods this job controls that are workers: by role label, or, without one, by a worker's name."""
    return list(snapshot.workers)


def index_of(job_name: str, pod: Obj) -> int:
    index = constants.worker_index(job_name, name_of(pod))
    return -1 if index is None else index


def node_signal(snapshot: Snapshot, node: str | None) -> str | None:
    """Why a node is going away, or None. A node missing from the cache counts as deleted only once a live
    read confirmed it (see `absences_to_confirm`)."""
    if node is None or not snapshot.config.node_signals:
        return None
    obj = snapshot.nodes.get(node)
    if obj is None:
        return "deleted" if snapshot.confirmed_absent("Node", node) else None
    if is_terminating(obj):
        return "deleted"
    spec = obj.get("spec") or {}
    for taint in spec.get("taints") or []:
        if taint.get("key") in snapshot.config.termination_taints:
            return f"taint {taint.get('key')}"
    if snapshot.config.cordon_is_termination and spec.get("unschedulable"):
        return "cordoned"
    return None


# Signals that only say a node *may* go: a cordon (drains, but also maintenance and debugging start with one).
# Every other signal is hard, the per-pod one (`pod_signal`) too: that pod is killed whatever the job does.
SOFT_SIGNALS = frozenset({"cordoned"})

# The leaving reason of a worker whose own pod is being killed (`pod_signal`): its leaving-reason annotation
# and its metrics label.
DISRUPTED = "disruption-target"
# The pod condition the component about to kill a pod sets on it first (Kubernetes 1.26+, GA in 1.31), with
# why: EvictionByEvictionAPI (a drain, `kubectl drain`, an autoscaler), PreemptionByScheduler,
# DeletionByTaintManager (a NoExecute taint), DeletionByPodGC, TerminationByKubelet (a graceful node shutdown,
# a node-pressure eviction).
DISRUPTION_TARGET = "DisruptionTarget"
# status.reason of a pod the kubelet stopped in a graceful node shutdown, for kubelets that set no condition:
# "Shutdown" (1.21), "Terminated" with a message naming the node shutdown (1.22+); "NodeShutdown": refused
# at admission, the node was shutting down.
NODE_SHUTDOWN_REASONS = frozenset({"Shutdown", "NodeShutdown"})


def pod_signal(pod: Obj) -> str | None:
    """Why this pod is being killed whatever its node says, or None: a DisruptionTarget condition with status
    True (any reason), or the kubelet's graceful node shutdown. A hard signal: the pod leaves discovery in the
    plan that first sees it, before its process is gone."""
    target = condition(pod, DISRUPTION_TARGET)
    if target is not None and target.get("status") == "True":
        reason = target.get("reason")
        return f"{DISRUPTION_TARGET} {reason}" if isinstance(reason, str) and reason else DISRUPTION_TARGET
    status = pod.get("status") or {}
    reason = status.get("reason")
    message = str(status.get("message") or "").lower()
    if reason in NODE_SHUTDOWN_REASONS or (reason == "Terminated" and "node shutdown" in message):
        return f"node shutdown ({reason})"
    return None


def node_lost(snapshot: Snapshot, pod: Obj) -> bool:
    """The worker is lost to its node or to a disruption, not to a crash: its pod is being killed
    (`pod_signal`) or its node carries a signal (`node_signal`). Never counted as a failure (rule 7)."""
    return pod_signal(pod) is not None or node_signal(snapshot, pod_node(pod)) is not None


def hold_soft_signals(
    signals: list[Signal], serving: list[Obj], min_replicas: int, job_name: str
) -> tuple[list[Signal], list[Obj]]:
    """Splits the signals into those acted on now and the soft ones held back: a soft signal may take the
    serving workers down to minReplicas, never below; below it, replacements must run first. Only a hard
    signal (node deleted, a termination taint, out-of-service) removes serving workers below the floor."""
    soft = [s for s in signals if s.signal in SOFT_SIGNALS and pod_phase(s.pod) == "Running"]
    if not soft:
        return signals, []
    hard_serving = sum(1 for s in signals if s.signal not in SOFT_SIGNALS and pod_phase(s.pod) == "Running")
    allowed = max(0, len(serving) - hard_serving - min_replicas)
    ranked = rank_victims([s.pod for s in soft], lambda p: index_of(job_name, p), lambda _: True)
    hold = {name_of(p) for p in ranked[allowed:]}
    return [s for s in signals if name_of(s.pod) not in hold], [s.pod for s in soft if name_of(s.pod) in hold]


# Live reads asked for in one plan; the rest are asked for by the next one (bounded work per reconcile).
MAX_CONFIRMATIONS = 16


def absences_to_confirm(snapshot: Snapshot, spec: MPIJobSpec) -> list[tuple[str, str]]:
    """(kind, name) of objects missing from the cache whose absence would drive a destructive, replica-lowering
    or request-dropping decision and that no live read has answered yet: the node of a live worker of an
    elastic job (node deleted -> scale-in, immediate delete), a worker that was serving at the last status
    write (vanished -> counted as lost in a ScaleIn job), and a workersToDelete name that may be a worker
    the cache does not show yet (`may_be_uncached_worker`: absent -> dropped as "no such pod")."""
    policy = spec.elastic_policy
    if policy is None:
        return []
    needed: list[tuple[str, str]] = []
    workers = workers_of(snapshot)
    names = {name_of(p) for p in workers}
    if not spec.run_policy.suspend:
        for pod in workers if snapshot.config.node_signals else ():
            node = pod_node(pod)
            if node is None or is_terminating(pod) or node in snapshot.nodes:
                continue
            if ("Node", node) not in snapshot.absence_checks and ("Node", node) not in needed:
                needed.append(("Node", node))
        if policy.node_termination_policy is NodeTerminationPolicy.SCALE_IN:
            listed = set(policy.workers_to_delete)
            for name in snapshot.last_status.status.discovered_hosts:
                if name in names or name in listed:
                    continue
                if constants.worker_index(name_of(snapshot.job), name) is None:
                    continue  # not a name of ours: never counted, nothing to confirm
                if ("Pod", name) not in snapshot.absence_checks:
                    needed.append(("Pod", name))
    needed += _listed_to_confirm(snapshot, policy.workers_to_delete, workers)
    return needed[:MAX_CONFIRMATIONS]


def _listed_to_confirm(snapshot: Snapshot, listed: Sequence[str], workers: Sequence[Obj]) -> list[tuple[str, str]]:
    """Listed names that may be workers the cache does not show yet, asked for in one round per reconcile
    (also while suspended, or the request would wait for the resume): an unanswered one only stays listed
    (nothing else depends on it), so the plan goes on once a round was answered, and a long list of stale
    names is worked through MAX_CONFIRMATIONS per reconcile rather than blocking every plan."""
    if not listed:
        return []
    status = snapshot.last_status.status
    if is_finished(status):
        return []  # a finished job acts on no removal request; reading for one would repeat every reconcile
    recorded = {*status.discovered_hosts, *status.leaving_workers, *(name_of(p) for p in workers)}
    last_index = allocated_up_to(snapshot, workers)
    candidates = [
        name
        for name in dict.fromkeys(listed)
        if name not in recorded and may_be_uncached_worker(snapshot, name, last_index)
    ]
    if any(("Pod", name) in snapshot.absence_checks for name in candidates):
        return []
    return [("Pod", name) for name in candidates]


def readable_last_index(value: int | None) -> int | None:
    """status.lastWorkerIndex read strictly: anything but an integer in [0, MAX_WORKER_INDEX] (a status
    writer's typo, a huge number that would make worker names invalid) is ignored (None)."""
    return value if value is not None and 0 <= value <= constants.MAX_WORKER_INDEX else None


def highest_worker_index(job_name: str, workers: Sequence[Obj]) -> int:
    """The highest index among `workers` named like this job's workers; -1 for none."""
    return max((i for p in workers if (i := constants.worker_index(job_name, name_of(p))) is not None), default=-1)


def allocated_up_to(snapshot: Snapshot, workers: Sequence[Obj]) -> int:
    """The highest worker index this job has allocated as far as it knows (-1 for none): the readable
    status.lastWorkerIndex or the highest index of an existing worker, whichever is higher."""
    recorded = readable_last_index(snapshot.last_status.status.last_worker_index)
    return max(-1 if recorded is None else recorded, highest_worker_index(name_of(snapshot.job), workers))


def may_be_uncached_worker(snapshot: Snapshot, name: str, last_index: int) -> bool:
    """Whether a workersToDelete name that no pod in the cache holds may still be a worker of this job that
    the cache does not show yet (created moments ago): named like this job's workers, with an index the job
    has allocated (`lastWorkerIndex` is in the status before the create goes out). Such a name stays listed
    until the pod shows up or a live read confirms it absent; any other name can never be a worker of this
    job and is dropped at once (`describe_bad_name`)."""
    if name in snapshot.pods_by_name:
        return False
    index = constants.worker_index(name_of(snapshot.job), name)
    return index is not None and index <= last_index


def leaving_since(pod: Obj, default: datetime) -> datetime:
    # Never later than now: a time in the future (edited by hand) would keep the worker leaving forever.
    since = parse_time(annotations_of(pod).get(constants.ANNOTATION_LEAVING_SINCE)) or default
    return min(since, default)


def unreadable_leaving_since(pod: Obj, now: datetime) -> bool:
    since = parse_time(annotations_of(pod).get(constants.ANNOTATION_LEAVING_SINCE))
    return since is None or since > now


def is_foreign(snapshot: Snapshot, job_name: str, index: int) -> bool:
    """The worker name for `index` is held by a pod that is not ours (a direct lookup, no scan)."""
    pod = snapshot.pods_by_name.get(constants.worker_name(job_name, index))
    return pod is not None and not is_owned_by(pod, snapshot.job)


def foreign_indexes(snapshot: Snapshot, job_name: str, upto: int) -> list[int]:
    return [i for i in range(upto) if is_foreign(snapshot, job_name, i)]


def describe_bad_name(snapshot: Snapshot, name: str) -> str:
    other = snapshot.pods_by_name.get(name)
    if "/" in name:
        return "names a pod in another namespace; only this job's workers can be listed"
    if other is None:
        return "no such pod"
    if labels_of(other).get(constants.LABEL_JOB_NAME) == name_of(snapshot.job) and (
        labels_of(other).get(constants.LABEL_JOB_ROLE) == constants.ROLE_LAUNCHER
    ):
        return "is the launcher, not a worker"
    if not is_owned_by(other, snapshot.job):
        return "is not a pod of this job"
    return "is not a worker of this job"


def plan_static(snapshot: Snapshot, spec: MPIJobSpec, *, suspended: bool) -> WorkerPlan:
    """Upstream semantics: indexes 0..replicas-1; a missing index is recreated, higher ones deleted."""
    job_name = name_of(snapshot.job)
    replicas = spec.worker_replicas
    workers = workers_of(snapshot)
    live = [p for p in workers if not is_terminating(p)]
    to_delete = []
    for pod in live:
        index = constants.worker_index(job_name, name_of(pod))
        if suspended or index is None or index >= replicas:
            to_delete.append(pod)
    present = {index_of(job_name, p) for p in workers}
    foreign = set(foreign_indexes(snapshot, job_name, replicas))
    deleted = {name_of(p) for p in to_delete}
    kept = sorted((p for p in live if name_of(p) not in deleted), key=lambda p: index_of(job_name, p))
    return WorkerPlan(
        to_delete=tuple(to_delete),
        to_create=() if suspended else tuple(i for i in range(replicas) if i not in present and i not in foreign),
        kept=tuple(kept),
        hostfile_names=tuple(constants.worker_name(job_name, i) for i in range(replicas)),
        discovery_names=tuple(name_of(p) for p in kept if pod_phase(p) == "Running"),
        foreign_names=tuple(constants.worker_name(job_name, i) for i in sorted(foreign)),
    )
