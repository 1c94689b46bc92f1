"""Worker decisions: which workers to keep, mark as leaving, delete or create; and the spec patch that
records node-termination and external-removal decisions in the MPIJob itself.

Vocabulary:
- *listed*: named in spec.elasticPolicy.workersToDelete.
- *leaving*: carries the leaving-since annotation: out of discovery, pod deleted after the grace period.
- *kept*: a worker that counts toward Worker replicas: not listed, not leaving, not terminating, not failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mpijob.api import constants as c
from mpijob.api.models import MPIJobSpec, NodeTerminationPolicy
from mpijob.planner.discovery import listed_hosts
from mpijob.planner.hostfile import host_fqdn
from mpijob.planner.indexes import new_indexes
from mpijob.planner.ranking import rank_victims
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    annotations_of,
    is_owned_by,
    is_terminating,
    labels_of,
    name_of,
    parse_time,
    pod_node,
    pod_phase,
)

FINISHED_PHASES = ("Failed", "Succeeded")
# Bad workersToDelete names spelled out in the one Warning that reports them.
BAD_NAMES_SHOWN = 10


@dataclass
class Leave:
    pod: Obj
    reason: str


@dataclass
class Signal:
    pod: Obj
    node: str
    signal: str


@dataclass
class WorkerPlan:
    # Spec changes to record first (None: nothing to record).
    new_replicas: int | None = None
    new_workers_to_delete: list[str] | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    to_leave: list[Leave] = field(default_factory=list)
    to_delete: list[Obj] = field(default_factory=list)
    to_create: list[int] = field(default_factory=list)
    kept: list[Obj] = field(default_factory=list)
    leaving: list[str] = field(default_factory=list)
    # Names in the hostfile (kept + created) and in discover_hosts.sh (kept and Running), by index.
    hostfile_names: list[str] = field(default_factory=list)
    discovery_names: list[str] = field(default_factory=list)
    foreign_names: list[str] = field(default_factory=list)
    wake_after: float | None = None
    # Serving workers on a cordoned node kept in service (not listed) so that a soft signal never takes the
    # job below minReplicas; as many replacements are created first (make before break).
    held: list[str] = field(default_factory=list)


def workers_of(snapshot: Snapshot) -> list[Obj]:
    job_name = name_of(snapshot.job)
    return [
        p
        for p in snapshot.owned_pods
        if is_owned_by(p, snapshot.job)
        and (
            labels_of(p).get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER
            or (labels_of(p).get(c.LABEL_JOB_ROLE) is None and c.worker_index(job_name, name_of(p)) is not None)
        )
    ]


def index_of(job_name: str, pod: Obj) -> int:
    index = c.worker_index(job_name, name_of(pod))
    return -1 if index is None else index


def node_signal(snapshot: Snapshot, node: str | None) -> str | None:
    """Why a node is going away, or None. A node missing from the cache counts as deleted only once a live
    read confirmed it (see `absences_to_confirm`)."""
    if node is None:
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
SOFT_SIGNALS = frozenset({"cordoned"})


def _hold_soft_signals(
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
    """(kind, name) of objects missing from the cache whose absence would drive a destructive or
    replica-lowering decision and that no live read has answered yet: the node of a live worker of an
    elastic job (node deleted -> scale-in, immediate delete), and a worker that was serving at the last
    status write (vanished -> counted as lost in a ScaleIn job)."""
    policy = spec.elastic_policy
    if policy is None or spec.run_policy.suspend:
        return []
    needed: list[tuple[str, str]] = []
    workers = workers_of(snapshot)
    for pod in workers:
        node = pod_node(pod)
        if node is None or is_terminating(pod) or node in snapshot.nodes:
            continue
        if ("Node", node) not in snapshot.absence_checks and ("Node", node) not in needed:
            needed.append(("Node", node))
    if policy.node_termination_policy is NodeTerminationPolicy.SCALE_IN:
        names = {name_of(p) for p in workers}
        listed = set(policy.workers_to_delete)
        for name in (snapshot.job.get("status") or {}).get("discoveredHosts") or []:
            if not isinstance(name, str) or name in names or name in listed:
                continue
            if c.worker_index(name_of(snapshot.job), name) is None:
                continue  # not a name of ours: never counted, nothing to confirm
            if ("Pod", name) not in snapshot.absence_checks:
                needed.append(("Pod", name))
    return needed[:MAX_CONFIRMATIONS]


def _is_leaving(pod: Obj) -> bool:
    return c.ANNOTATION_LEAVING_SINCE in annotations_of(pod)


def _leaving_since(pod: Obj, default: datetime) -> datetime:
    # Never later than now: a time in the future (edited by hand) would keep the worker leaving forever.
    since = parse_time(annotations_of(pod).get(c.ANNOTATION_LEAVING_SINCE)) or default
    return min(since, default)


def _bad_since(pod: Obj, now: datetime) -> bool:
    since = parse_time(annotations_of(pod).get(c.ANNOTATION_LEAVING_SINCE))
    return since is None or since > now


def _still_discovered(snapshot: Snapshot, pod_name: str) -> bool:
    """Whether our (owned) discover_hosts.sh, as last written, still lists this worker."""
    cm = snapshot.config_map
    if cm is None or not is_owned_by(cm, snapshot.job):
        return False
    job = snapshot.job["metadata"]
    host = host_fqdn(pod_name, job["name"], job.get("namespace", ""), snapshot.config.cluster_domain)
    return host in listed_hosts(cm.get("data") or {})


def _is_foreign(snapshot: Snapshot, job_name: str, index: int) -> bool:
    """The worker name for `index` is held by a pod that is not ours (a direct lookup, no scan)."""
    pod = snapshot.pods_by_name.get(c.worker_name(job_name, index))
    return pod is not None and not is_owned_by(pod, snapshot.job)


def _foreign_indexes(snapshot: Snapshot, job_name: str, upto: int) -> list[int]:
    return [i for i in range(upto) if _is_foreign(snapshot, job_name, i)]


def _describe_bad_name(snapshot: Snapshot, name: str) -> str:
    other = snapshot.pods_by_name.get(name)
    if "/" in name:
        return "names a pod in another namespace; only this job's workers can be listed"
    if other is None:
        return "no such pod"
    if labels_of(other).get(c.LABEL_JOB_NAME) == name_of(snapshot.job) and (
        labels_of(other).get(c.LABEL_JOB_ROLE) == c.ROLE_LAUNCHER
    ):
        return "is the launcher, not a worker"
    if not is_owned_by(other, snapshot.job):
        return "is not a pod of this job"
    return "is not a worker of this job"


def plan_workers(
    snapshot: Snapshot, spec: MPIJobSpec, *, suspended: bool, last_index: int, previously_leaving: list[str]
) -> WorkerPlan:
    if spec.elastic_policy is None:
        return _plan_static(snapshot, spec, suspended=suspended)
    return _plan_elastic(
        snapshot, spec, suspended=suspended, last_index=last_index, previously_leaving=previously_leaving
    )


def _plan_static(snapshot: Snapshot, spec: MPIJobSpec, *, suspended: bool) -> WorkerPlan:
    """Upstream semantics: indexes 0..replicas-1; a missing index is recreated, higher ones deleted."""
    job_name = name_of(snapshot.job)
    replicas = spec.worker_replicas
    workers = workers_of(snapshot)
    result = WorkerPlan()
    live = [p for p in workers if not is_terminating(p)]
    for pod in live:
        index = c.worker_index(job_name, name_of(pod))
        if suspended or index is None or index >= replicas:
            result.to_delete.append(pod)
    present = {index_of(job_name, p) for p in workers}
    foreign = set(_foreign_indexes(snapshot, job_name, replicas))
    result.foreign_names = [c.worker_name(job_name, i) for i in sorted(foreign)]
    if not suspended:
        result.to_create = [i for i in range(replicas) if i not in present and i not in foreign]
    deleted = {name_of(p) for p in result.to_delete}
    result.kept = sorted((p for p in live if name_of(p) not in deleted), key=lambda p: index_of(job_name, p))
    result.hostfile_names = [c.worker_name(job_name, i) for i in range(replicas)]
    result.discovery_names = [name_of(p) for p in result.kept if pod_phase(p) == "Running"]
    return result


def _plan_elastic(
    snapshot: Snapshot, spec: MPIJobSpec, *, suspended: bool, last_index: int, previously_leaving: list[str]
) -> WorkerPlan:
    policy = spec.elastic_policy
    assert policy is not None
    job_name = name_of(snapshot.job)
    now = snapshot.now
    workers = workers_of(snapshot)
    by_name = {name_of(p): p for p in workers}
    result = WorkerPlan()
    replicas = spec.worker_replicas
    # A Kueue-managed job keeps the Worker count Kueue admitted: lowering it would make Kueue suspend the
    # whole job. So ScaleIn acts as Replace there (the replacements stay Pending if there is no room, and
    # the quota stays held), and workers lost to someone else are replaced rather than scaled in.
    kueue_managed = bool(labels_of(snapshot.job).get(c.LABEL_KUEUE_QUEUE_NAME))
    termination_policy = policy.node_termination_policy
    if kueue_managed and termination_policy is NodeTerminationPolicy.SCALE_IN:
        termination_policy = NodeTerminationPolicy.REPLACE

    # 1. Clean workersToDelete: drop names that are gone (done) or were never this job's workers (warn).
    #    A gone worker that was in discovery at the last status write was ours too: removed by someone else
    #    (eviction, a delete with no grace) before the reconcile that listed it could mark it leaving.
    #    While the last status still counts it as serving (discoveredHosts), the name stays listed: the
    #    status write of this reconcile drops it from discovery, the next one drops it from the list. So a
    #    crash in between can never make step 2 count the same lost worker twice.
    previously_discovered = set((snapshot.job.get("status") or {}).get("discoveredHosts") or [])
    listed: list[str] = []
    removed: dict[str, list[str]] = {"gone": [], "being deleted": []}
    bad: list[str] = []
    for name in dict.fromkeys(policy.workers_to_delete):
        pod = by_name.get(name)
        if pod is None:
            if name in previously_discovered:
                listed.append(name)
                continue
            if name in previously_leaving:
                removed["gone"].append(name)
            else:
                bad.append(f"{name!r} {_describe_bad_name(snapshot, name)}")
            continue
        if is_terminating(pod) and (_is_leaving(pod) or name in previously_leaving):
            removed["being deleted"].append(name)
            continue
        listed.append(name)
    # One Event for the workers that finished leaving in this reconcile.
    for how, names in removed.items():
        if names:
            noun = "worker" if len(names) == 1 else "workers"
            verb = {"gone": "is gone" if len(names) == 1 else "are gone"}.get(
                how, "is being deleted" if len(names) == 1 else "are being deleted"
            )
            result.events.append(("Normal", "WorkerRemoved", f"{noun} {', '.join(names)} {verb}"))

    if bad:
        # One Event however many names are bad: a long junk list must not use up the API budget.
        shown = "; ".join(bad[:BAD_NAMES_SHOWN]) + (
            f"; and {len(bad) - BAD_NAMES_SHOWN} more" if len(bad) > BAD_NAMES_SHOWN else ""
        )
        result.events.append(
            (
                "Warning",
                "InvalidWorkerToDelete",
                f"spec.elasticPolicy.workersToDelete: {shown}; dropped from the list",
            )
        )

    # 2. Node-termination signals and workers removed by someone else (eviction, kubectl delete, failure).
    listed_set = set(listed)
    # Accounted for already: listed, marked leaving, or recorded as leaving in the last status (a pod that
    # was terminating when we listed it is never annotated, and its name leaves the list while it goes).
    unaccounted = [
        p
        for p in workers
        if name_of(p) not in listed_set and not _is_leaving(p) and name_of(p) not in previously_leaving
    ]
    external = [p for p in unaccounted if is_terminating(p) or pod_phase(p) in FINISHED_PHASES]
    # Serving at the last status write, now gone without our doing (deleted while we were down, or with
    # no grace period). Counted only once a live read confirmed it: absence from the cache alone may be a
    # watch gap or a cache behind (issue 8, rule 1).
    vanished = [
        n
        for n in sorted(previously_discovered)
        if n not in by_name and n not in listed_set and snapshot.confirmed_absent("Pod", n)
    ]
    if not suspended and termination_policy is not NodeTerminationPolicy.IGNORE:
        for pod in unaccounted:
            if pod in external:
                continue
            signal = node_signal(snapshot, pod_node(pod))
            if signal is not None:
                result.signals.append(Signal(pod, pod_node(pod) or "", signal))
        serving = [p for p in unaccounted if p not in external and pod_phase(p) == "Running"]
        result.signals, held = _hold_soft_signals(result.signals, serving, policy.min_replicas, job_name)
        result.held = [name_of(p) for p in held]
    new_replicas = replicas
    additions: list[str] = [s.pod["metadata"]["name"] for s in result.signals]
    if termination_policy is NodeTerminationPolicy.SCALE_IN and not suspended:
        additions += [name_of(p) for p in external] + vanished
        new_replicas = max(policy.min_replicas, replicas - len(additions)) if additions else replicas
        new_replicas = min(new_replicas, replicas)
    for node in dict.fromkeys(s.node for s in result.signals):
        names = [name_of(s.pod) for s in result.signals if s.node == node]
        signal = next(s.signal for s in result.signals if s.node == node)
        verb = {
            NodeTerminationPolicy.SCALE_IN: f"scaling in (Worker replicas {replicas} -> {new_replicas})",
            NodeTerminationPolicy.REPLACE: "replacing them elsewhere"
            + (" (Kueue-managed: Worker replicas stay as admitted)" if kueue_managed else ""),
        }[termination_policy]
        floor = ""
        if termination_policy is NodeTerminationPolicy.SCALE_IN and replicas - len(additions) < policy.min_replicas:
            floor = f"; minReplicas {policy.min_replicas} reached, the rest are replaced"
        result.events.append(
            (
                "Normal",
                "NodeTerminating",
                f"node {node} is terminating ({signal}): workers {', '.join(names)}: {verb}{floor}",
            )
        )
    if (external or vanished) and termination_policy is NodeTerminationPolicy.SCALE_IN and not suspended:
        lost = ", ".join([name_of(p) for p in external] + vanished)
        result.events.append(
            (
                "Normal",
                "WorkerLost",
                f"workers {lost} were removed by someone else; Worker replicas {replicas} -> {new_replicas}",
            )
        )
    final_list = listed + [n for n in additions if n not in listed_set]
    if final_list != list(policy.workers_to_delete):
        result.new_workers_to_delete = final_list
    if new_replicas != replicas:
        result.new_replicas = new_replicas
    replicas = new_replicas
    listed_set = set(final_list)

    # 3. Who leaves: listed workers, failed ones, the excess (ranked), all of them when suspended.
    def counts(pod: Obj) -> bool:
        return (
            name_of(pod) not in listed_set
            and not _is_leaving(pod)
            and not is_terminating(pod)
            and pod_phase(pod) not in FINISHED_PHASES
        )

    kept = [p for p in workers if counts(p)]
    for pod in workers:
        if _is_leaving(pod):
            # Marked, but our discover_hosts.sh still lists it: the crash came between the mark and the
            # discovery change. Mark it again, so the grace period counts from when it really left.
            # Or its time is unreadable or in the future (edited by hand): mark it again with a good one, or
            # it would count from "now" at every reconcile and never be deleted.
            redo = _still_discovered(snapshot, name_of(pod)) or _bad_since(pod, now)
            if redo and pod_phase(pod) == "Running" and not is_terminating(pod):
                reason = annotations_of(pod).get(c.ANNOTATION_LEAVING_REASON, "workersToDelete")
                result.to_leave.append(Leave(pod, reason))
            continue
        if is_terminating(pod):
            if name_of(pod) in listed_set or name_of(pod) in previously_leaving:
                result.leaving.append(name_of(pod))  # already on its way out: nothing to mark, leaving till gone
            continue
        if name_of(pod) in listed_set:
            result.to_leave.append(Leave(pod, "workersToDelete"))
        elif not counts(pod):
            result.to_leave.append(Leave(pod, f"worker {pod_phase(pod)}"))
    target = 0 if suspended else replicas
    # Held workers keep serving until as many replacements run: they are counted on top of the target.
    surge = 0 if suspended else len(result.held)
    if len(kept) > target + surge:
        ranked = rank_victims(kept, lambda p: index_of(job_name, p), lambda n: node_signal(snapshot, n) is not None)
        excess = ranked[: len(kept) - target - surge]
        result.to_leave += [Leave(p, "suspended" if suspended else "scale-down") for p in excess]
        gone = {name_of(p) for p in excess}
        kept = [p for p in kept if name_of(p) not in gone]

    # 4. Leaving workers are deleted once the grace period has passed; at once if they are not serving
    #    (not Running), their node is gone, or nothing else is left to wait for.
    grace = timedelta(seconds=policy.scale_in_grace_period_seconds)
    newly = {name_of(leave.pod) for leave in result.to_leave}
    for pod in workers:
        if name_of(pod) in result.leaving or not (_is_leaving(pod) or name_of(pod) in newly):
            continue
        result.leaving.append(name_of(pod))
        if is_terminating(pod):
            continue
        since = now if name_of(pod) in newly else _leaving_since(pod, now)
        immediate = pod_phase(pod) != "Running" or node_signal(snapshot, pod_node(pod)) == "deleted" or suspended
        due = since + grace
        if immediate or due <= now:
            result.to_delete.append(pod)
        else:
            wait = (due - now).total_seconds()
            result.wake_after = wait if result.wake_after is None else min(result.wake_after, wait)

    # Listed workers already gone show as leaving until the next reconcile drops their names (step 1).
    result.leaving += [n for n in final_list if n not in by_name]

    # 5. New workers for the deficit.
    taken = {index_of(job_name, p) for p in workers}
    ceiling = max([last_index, *taken], default=-1) + replicas + 1
    # A foreign name is skipped wherever new indexes go; those below the ceiling are reported.
    result.foreign_names = [c.worker_name(job_name, i) for i in _foreign_indexes(snapshot, job_name, ceiling)]
    if len(kept) < target + surge:
        # Foreign pods only block a name; they do not move Append's starting point.
        result.to_create = new_indexes(
            target + surge - len(kept),
            taken,
            lambda i: _is_foreign(snapshot, job_name, i),
            policy.index_policy,
            last_index,
        )
        if surge:
            result.events.append(
                (
                    "Normal",
                    "FloorHeld",
                    f"workers {', '.join(result.held)} are on a cordoned node; they keep serving until "
                    f"replacements run (minReplicas {policy.min_replicas})",
                )
            )
    result.kept = sorted(kept, key=lambda p: index_of(job_name, p))
    hosts = [(index_of(job_name, p), name_of(p)) for p in kept]
    hosts += [(i, c.worker_name(job_name, i)) for i in result.to_create]
    result.hostfile_names = [n for _, n in sorted(hosts)]
    result.discovery_names = [name_of(p) for p in result.kept if pod_phase(p) == "Running"]
    return result
