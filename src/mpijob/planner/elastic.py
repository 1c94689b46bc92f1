"""An elastic job's worker decisions, as small pure steps, each a function from frozen data to frozen data:

1. `read_record`       what earlier reconciles recorded (last status, our discovery list): read once, here;
2. `clean_listing`     spec.elasticPolicy.workersToDelete without the names that are done or never were ours;
3. `node_terminations` node signals, pods being killed (DisruptionTarget) and workers removed by someone else
                       -> names to list, Worker replicas;
4. `departures`        who leaves (listed, failed, excess, all when suspended) and who is deleted now;
5. `growth`            new worker indexes for the deficit;
6. `new_failures`      workers that start leaving because they crashed (not lost to their node).

`plan_elastic` runs them in that order and returns the WorkerPlan the planner turns into writes.
Vocabulary (see workers.py): listed, leaving, kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mpijob.api import constants
from mpijob.api.models import ElasticPolicy, JobStatus, MPIJobSpec, NodeTerminationPolicy
from mpijob.api.objects import (
    FINISHED_PHASES,
    Obj,
    annotations_of,
    is_leaving,
    is_terminating,
    labels_of,
    name_of,
    pod_node,
    pod_phase,
    pod_ready,
)
from mpijob.planner import joining, regrow, restart
from mpijob.planner.actions import Emit
from mpijob.planner.discovery import listed_hosts
from mpijob.planner.hostfile import host_fqdn
from mpijob.planner.indexes import new_indexes
from mpijob.planner.ranking import rank_victims
from mpijob.planner.snapshot import Snapshot, is_owned_by
from mpijob.planner.workers import (
    BAD_NAMES_SHOWN,
    DISRUPTED,
    Leave,
    Signal,
    WorkerPlan,
    allocated_up_to,
    describe_bad_name,
    foreign_indexes,
    hold_soft_signals,
    index_of,
    is_foreign,
    leaving_since,
    may_be_uncached_worker,
    node_lost,
    node_signal,
    pod_signal,
    unreadable_leaving_since,
    workers_of,
)


@dataclass(frozen=True)
class Record:
    """What earlier reconciles recorded and this one builds on. The only place the elastic steps read the
    last status or the discovery list we wrote."""

    # status.discoveredHosts: workers serving at the last status write.
    discovered: frozenset[str]
    # status.leavingWorkers: workers leaving at the last status write.
    leaving: frozenset[str]
    # status.lastWorkerIndex, read strictly (see worker_writes.last_worker_index).
    last_index: int
    # Workers our (owned) ConfigMap's discovery list still names, as last written; all of them while the
    # listing is unknown (a ConfigMap without the list: a leaving worker is marked again, from now).
    in_discovery: frozenset[str]


def read_record(snapshot: Snapshot, workers: Sequence[Obj], last_index: int, previous: JobStatus) -> Record:
    config_map = snapshot.config_map
    in_discovery: frozenset[str] = frozenset()
    if config_map is not None and is_owned_by(config_map, snapshot.job):
        hosts = listed_hosts(config_map.get("data") or {})
        job = snapshot.job["metadata"]
        domain = snapshot.config.cluster_domain
        in_discovery = frozenset(
            name_of(p)
            for p in workers
            # An unknown listing may name any worker (see discovery.listed_hosts).
            if hosts is None or host_fqdn(name_of(p), job["name"], job.get("namespace", ""), domain) in hosts
        )
    return Record(
        discovered=frozenset(previous.discovered_hosts),
        leaving=frozenset(previous.leaving_workers),
        last_index=last_index,
        in_discovery=in_discovery,
    )


@dataclass(frozen=True)
class Listing:
    """Step 2: the names that stay in workersToDelete, and the Events about those that went."""

    listed: tuple[str, ...]
    events: tuple[Emit, ...]
    # Listed names of workers the cache does not show but that may exist (see `may_be_uncached_worker`):
    # kept listed, not counted as leaving, until the pod shows up or a live read confirms it absent.
    pending: frozenset[str] = frozenset()


def clean_listing(snapshot: Snapshot, names: Sequence[str], by_name: Mapping[str, Obj], record: Record) -> Listing:
    """Drops names that are gone (done) or were never this job's workers (one Warning).

    Absence from the cache alone drops nothing that may be a worker of this job: a worker created moments
    ago that the cache does not show yet keeps its name listed (pending) until it shows up or a live read
    confirms it absent; only then is it "no such pod".

    A gone worker that was in discovery at the last status write was ours too: removed by someone else
    (eviction, a delete with no grace) before the reconcile that listed it could mark it leaving. While the
    last status still counts it as serving (discoveredHosts), the name stays listed: the status write of this
    reconcile drops it from discovery, the next one drops it from the list. So a crash in between can never
    make `node_terminations` count the same lost worker twice."""
    listed: list[str] = []
    gone: list[str] = []
    being_deleted: list[str] = []
    bad: list[str] = []
    pending: list[str] = []
    allocated = allocated_up_to(snapshot, list(by_name.values()))
    for name in dict.fromkeys(names):
        pod = by_name.get(name)
        if pod is None:
            if name in record.discovered:
                listed.append(name)
            elif name in record.leaving:
                gone.append(name)
            elif may_be_uncached_worker(snapshot, name, allocated) and not snapshot.confirmed_absent("Pod", name):
                listed.append(name)
                pending.append(name)
            else:
                bad.append(f"{name!r} {describe_bad_name(snapshot, name)}")
        elif is_terminating(pod) and (is_leaving(pod) or name in record.leaving):
            being_deleted.append(name)
        else:
            listed.append(name)
    # One Event for the workers that finished leaving in this reconcile.
    events: list[Emit] = []
    for names_, one, many in ((gone, "is gone", "are gone"), (being_deleted, "is being deleted", "are being deleted")):
        if names_:
            noun, verb = ("worker", one) if len(names_) == 1 else ("workers", many)
            events.append(Emit("Normal", "WorkerRemoved", f"{noun} {', '.join(names_)} {verb}"))
    if bad:
        # One Event however many names are bad: a long junk list must not use up the API budget.
        shown = "; ".join(bad[:BAD_NAMES_SHOWN]) + (
            f"; and {len(bad) - BAD_NAMES_SHOWN} more" if len(bad) > BAD_NAMES_SHOWN else ""
        )
        message = f"spec.elasticPolicy.workersToDelete: {shown}; dropped from the list"
        events.append(Emit("Warning", "InvalidWorkerToDelete", message))
    return Listing(tuple(listed), tuple(events), frozenset(pending))


@dataclass(frozen=True)
class Terminations:
    """Step 3: what node signals and workers removed by someone else decide, to be recorded in the spec."""

    signals: tuple[Signal, ...]
    # Serving workers on a cordoned node kept in service (not listed) so that a soft signal never takes the
    # job below minReplicas; as many replacements are created first (make before break).
    held: tuple[str, ...]
    workers_to_delete: tuple[str, ...]
    replicas: int
    events: tuple[Emit, ...]
    # Listed names whose workers the cache does not show yet (Listing.pending).
    pending: frozenset[str] = frozenset()


def effective_termination_policy(snapshot: Snapshot, policy: ElasticPolicy) -> NodeTerminationPolicy:
    """A Kueue-managed job keeps the Worker count Kueue admitted: lowering it would make Kueue suspend the
    whole job. So ScaleIn acts as Replace there (the replacements stay Pending if there is no room, and the
    quota stays held), and workers lost to someone else are replaced rather than scaled in."""
    kueue_managed = bool(labels_of(snapshot.job).get(constants.LABEL_KUEUE_QUEUE_NAME))
    if kueue_managed and policy.node_termination_policy is NodeTerminationPolicy.SCALE_IN:
        return NodeTerminationPolicy.REPLACE
    return policy.node_termination_policy


def node_terminations(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    workers: Sequence[Obj],
    by_name: Mapping[str, Obj],
    listing: Listing,
    record: Record,
    *,
    replicas: int,
    suspended: bool,
) -> Terminations:
    termination_policy = effective_termination_policy(snapshot, policy)
    kueue_managed = bool(labels_of(snapshot.job).get(constants.LABEL_KUEUE_QUEUE_NAME))
    job_name = name_of(snapshot.job)
    listed = set(listing.listed)
    # Accounted for already: listed, marked leaving, or recorded as leaving in the last status (a pod that
    # was terminating when we listed it is never annotated, and its name leaves the list while it goes).
    unaccounted = [
        p for p in workers if name_of(p) not in listed and not is_leaving(p) and name_of(p) not in record.leaving
    ]
    external = [p for p in unaccounted if is_terminating(p) or pod_phase(p) in FINISHED_PHASES]
    # By name, not `pod in external`: comparing pods pairwise made a mass failure quadratic (10,000 failed
    # workers: seconds of a blocked event loop, longer than the Lease's renew deadline).
    external_names = {name_of(p) for p in external}
    # Serving at the last status write, now gone without our doing (deleted while we were down, or with
    # no grace period). Counted only once a live read confirmed it: absence from the cache alone may be a
    # watch gap or a cache behind (issue 8, rule 1).
    vanished = [
        n
        for n in sorted(record.discovered)
        if n not in by_name and n not in listed and snapshot.confirmed_absent("Pod", n)
    ]
    signals: list[Signal] = []
    held: list[Obj] = []
    live = [p for p in unaccounted if name_of(p) not in external_names]
    ignored: list[Emit] = []
    if not suspended and termination_policy is not NodeTerminationPolicy.IGNORE:
        signals = _signals(snapshot, live)
        serving = [p for p in live if pod_phase(p) == "Running"]
        signals, held = hold_soft_signals(signals, serving, policy.min_replicas, job_name)
    elif not suspended:
        ignored = _ignored_disruptions(live, record)
    scale_in = termination_policy is NodeTerminationPolicy.SCALE_IN and not suspended
    additions = [name_of(s.pod) for s in signals]
    new_replicas = replicas
    if scale_in:
        additions += [name_of(p) for p in external] + vanished
        new_replicas = min(replicas, max(policy.min_replicas, replicas - len(additions))) if additions else replicas
    floor = _floor_note(termination_policy, policy, replicas - len(additions))
    # Under ScaleIn a worker someone else is killing is one fact whichever of the API server's writes this
    # plan sees (an eviction's DisruptionTarget, then its delete, then the pod gone): one WorkerLost Event.
    announced, lost = signals, []
    if scale_in:
        announced = [s for s in signals if not s.disruption]
        lost = [*(s.pod for s in signals if s.disruption), *external]
    events = [*_node_events(announced, termination_policy, kueue_managed, replicas, new_replicas, floor)]
    events += ignored
    if scale_in and (lost or vanished):
        events.append(_lost_event(lost, vanished, replicas, new_replicas, floor))
    return Terminations(
        signals=tuple(signals),
        held=tuple(name_of(p) for p in held),
        workers_to_delete=(*listing.listed, *(n for n in additions if n not in listed)),
        replicas=new_replicas,
        events=tuple(events),
        pending=listing.pending,
    )


def _signals(snapshot: Snapshot, workers: Sequence[Obj]) -> list[Signal]:
    """The signals of workers not accounted for yet: the pod's own first (`pod_signal`: it is being killed, a
    hard signal even on a cordoned node), else its node's (`node_signal`)."""
    signals: list[Signal] = []
    for pod in workers:
        node = pod_node(pod)
        own = pod_signal(pod)
        if own is not None:
            signals.append(Signal(pod, node or "", own, disruption=True))
        elif (signal := node_signal(snapshot, node)) is not None:
            signals.append(Signal(pod, node or "", signal))
    return signals


def _ignored_disruptions(workers: Sequence[Obj], record: Record) -> list[Emit]:
    """nodeTerminationPolicy Ignore decides nothing about a worker whose pod is being killed (no listing, no
    scale-in, no replacement until it is gone), but it still leaves discovery (plan_elastic): its process is
    about to go, and a host Horovod cannot reach fails the ring instead of leaving it. Said once, by the plan
    that takes it out of the list the last status recorded."""
    dropped = [p for p in workers if name_of(p) in record.discovered and pod_signal(p) is not None]
    events: list[Emit] = []
    for signal in dict.fromkeys(pod_signal(p) for p in dropped):
        names = ", ".join(name_of(p) for p in dropped if pod_signal(p) == signal)
        message = f"workers {names} are being disrupted ({signal}): out of discovery (nodeTerminationPolicy Ignore)"
        events.append(Emit("Normal", "WorkersDisrupted", message))
    return events


def _floor_note(termination_policy: NodeTerminationPolicy, policy: ElasticPolicy, left: int) -> str:
    if termination_policy is NodeTerminationPolicy.SCALE_IN and left < policy.min_replicas:
        return f"; minReplicas {policy.min_replicas} reached, the rest are replaced"
    return ""


def _lost_event(lost: Sequence[Obj], vanished: Sequence[str], replicas: int, new_replicas: int, floor: str) -> Emit:
    """WorkerLost: workers removed by someone else, each named with the signal its pod gives (an eviction, a
    preemption, a node shutdown) when the plan still sees it."""
    names = [name_of(p) + (f" ({why})" if (why := pod_signal(p)) else "") for p in lost] + list(vanished)
    message = f"workers {', '.join(names)} were removed by someone else; Worker replicas {replicas} -> {new_replicas}"
    return Emit("Normal", "WorkerLost", message + floor)


def _node_events(
    signals: Sequence[Signal],
    termination_policy: NodeTerminationPolicy,
    kueue_managed: bool,
    replicas: int,
    new_replicas: int,
    floor: str,
) -> list[Emit]:
    """One NodeTerminating Event per node, naming its workers and what happens to them; one WorkersDisrupted
    Event per kind of disruption of the pods themselves (`pod_signal`; Replace only, ScaleIn says WorkerLost)."""
    if termination_policy is NodeTerminationPolicy.SCALE_IN:
        verb = f"scaling in (Worker replicas {replicas} -> {new_replicas})"
    else:
        verb = "replacing them elsewhere" + (
            " (Kueue-managed: Worker replicas stay as admitted)" if kueue_managed else ""
        )
    events: list[Emit] = []
    on_nodes = [s for s in signals if not s.disruption]
    for node in dict.fromkeys(s.node for s in on_nodes):
        names = [name_of(s.pod) for s in on_nodes if s.node == node]
        signal = next(s.signal for s in on_nodes if s.node == node)
        message = f"node {node} is terminating ({signal}): workers {', '.join(names)}: {verb}{floor}"
        events.append(Emit("Normal", "NodeTerminating", message))
    disrupted = [s for s in signals if s.disruption]
    for signal in dict.fromkeys(s.signal for s in disrupted):
        names = [name_of(s.pod) for s in disrupted if s.signal == signal]
        message = f"workers {', '.join(names)} are being disrupted ({signal}): {verb}{floor}"
        events.append(Emit("Normal", "WorkersDisrupted", message))
    return events


@dataclass(frozen=True)
class Departures:
    """Step 4: who stays, who leaves now, who is on the way out, who is deleted now."""

    kept: tuple[Obj, ...]
    to_leave: tuple[Leave, ...]
    leaving: tuple[str, ...]
    to_delete: tuple[Obj, ...]
    requeue_after: float | None


def departures(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    workers: Sequence[Obj],
    terminations: Terminations,
    record: Record,
    *,
    suspended: bool,
) -> Departures:
    """Who leaves (`leavers`), then who of the leaving is deleted now (`deletions`)."""
    kept, to_leave, on_the_way_out = leavers(snapshot, workers, terminations, record, suspended=suspended)
    leaving, to_delete, requeue_after = deletions(
        snapshot, policy, workers, to_leave, on_the_way_out, terminations, suspended=suspended
    )
    job_name = name_of(snapshot.job)
    return Departures(
        kept=tuple(sorted(kept, key=lambda p: index_of(job_name, p))),
        to_leave=tuple(to_leave),
        leaving=tuple(leaving),
        to_delete=tuple(to_delete),
        requeue_after=requeue_after,
    )


def leavers(
    snapshot: Snapshot, workers: Sequence[Obj], terminations: Terminations, record: Record, *, suspended: bool
) -> tuple[list[Obj], list[Leave], list[str]]:
    """(kept, to mark leaving now, terminating and already on their way out). Leaving: listed workers, failed
    ones, the excess (ranked), all of them when suspended."""
    job_name = name_of(snapshot.job)
    listed = set(terminations.workers_to_delete)

    def counts(pod: Obj) -> bool:
        return (
            name_of(pod) not in listed
            and not is_leaving(pod)
            and not is_terminating(pod)
            and pod_phase(pod) not in FINISHED_PHASES
        )

    kept = [p for p in workers if counts(p)]
    to_leave: list[Leave] = []
    on_the_way_out: list[str] = []
    for pod in workers:
        name = name_of(pod)
        if is_leaving(pod):
            # Marked, but our discovery list still names it: the crash came between the mark and the
            # discovery change. Mark it again, so the grace period counts from when it really left.
            # Or its time is unreadable or in the future (edited by hand): mark it again with a good one, or
            # it would count from "now" at every reconcile and never be deleted.
            redo = name in record.in_discovery or unreadable_leaving_since(pod, snapshot.now)
            if redo and pod_phase(pod) == "Running" and not is_terminating(pod):
                reason = annotations_of(pod).get(constants.ANNOTATION_LEAVING_REASON, "workersToDelete")
                to_leave.append(Leave(pod, reason))
        elif is_terminating(pod):
            if name in listed or name in record.leaving:
                on_the_way_out.append(name)  # nothing to mark, leaving till gone
        elif name in listed:
            to_leave.append(Leave(pod, DISRUPTED if pod_signal(pod) else "workersToDelete"))
        elif not counts(pod):
            to_leave.append(Leave(pod, DISRUPTED if pod_signal(pod) else f"worker {pod_phase(pod)}"))
    target = 0 if suspended else terminations.replicas
    # Held workers keep serving until as many replacements run: they are counted on top of the target.
    surge = 0 if suspended else len(terminations.held)
    if len(kept) > target + surge:
        ranked = rank_victims(kept, lambda p: index_of(job_name, p), lambda n: node_signal(snapshot, n) is not None)
        excess = ranked[: len(kept) - target - surge]
        to_leave += [Leave(p, "suspended" if suspended else "scale-down") for p in excess]
        excess_names = {name_of(p) for p in excess}
        kept = [p for p in kept if name_of(p) not in excess_names]
    return kept, to_leave, on_the_way_out


def deletions(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    workers: Sequence[Obj],
    to_leave: Sequence[Leave],
    on_the_way_out: Sequence[str],
    terminations: Terminations,
    *,
    suspended: bool,
) -> tuple[list[str], list[Obj], float | None]:
    """(leaving, to delete now, seconds until the next is due). Leaving workers are deleted once the grace
    period has passed; at once if they are not serving (not Running), their node is gone, or nothing else is
    left to wait for."""
    now = snapshot.now
    grace = timedelta(seconds=policy.scale_in_grace_period_seconds)
    marked_now = {name_of(leave.pod) for leave in to_leave}
    leaving = list(on_the_way_out)
    seen = set(leaving)  # `name in leaving` made a mass departure quadratic
    to_delete: list[Obj] = []
    requeue_after: float | None = None
    for pod in workers:
        name = name_of(pod)
        if name in seen or not (is_leaving(pod) or name in marked_now):
            continue
        leaving.append(name)
        seen.add(name)
        if is_terminating(pod):
            continue
        since: datetime = now if name in marked_now else leaving_since(pod, now)
        immediate = pod_phase(pod) != "Running" or node_signal(snapshot, pod_node(pod)) == "deleted" or suspended
        due = since + grace
        if immediate or due <= now:
            to_delete.append(pod)
        else:
            wait = (due - now).total_seconds()
            requeue_after = wait if requeue_after is None else min(requeue_after, wait)
    # Listed workers already gone show as leaving until the next reconcile drops their names (step 2); not
    # those the cache does not show yet (a name recorded as leaving is dropped once its pod is absent).
    present = {name_of(p) for p in workers}
    leaving += [n for n in terminations.workers_to_delete if n not in present and n not in terminations.pending]
    return leaving, to_delete, requeue_after


@dataclass(frozen=True)
class Growth:
    """Step 5: new worker indexes for the deficit, and the names held by pods that are not ours."""

    to_create: tuple[int, ...]
    foreign_names: tuple[str, ...]
    events: tuple[Emit, ...]


def growth(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    workers: Sequence[Obj],
    terminations: Terminations,
    kept: Sequence[Obj],
    record: Record,
    *,
    suspended: bool,
) -> Growth:
    job_name = name_of(snapshot.job)
    target = 0 if suspended else terminations.replicas
    surge = 0 if suspended else len(terminations.held)
    taken = {index_of(job_name, p) for p in workers}
    # The scan for foreign names stops above the highest index we allocate, whatever a pod of ours is named
    # (one named "<job>-worker-1000000000000" by hand made it run for hours).
    highest = min(max([record.last_index, *taken], default=-1), constants.MAX_WORKER_INDEX)
    ceiling = highest + terminations.replicas + 1
    # A foreign name is skipped wherever new indexes go; those below the ceiling are reported.
    foreign = tuple(constants.worker_name(job_name, i) for i in foreign_indexes(snapshot, job_name, ceiling))
    if len(kept) >= target + surge:
        return Growth((), foreign, ())
    # Foreign pods only block a name; they do not move Append's starting point.
    to_create = new_indexes(
        target + surge - len(kept),
        taken,
        lambda i: is_foreign(snapshot, job_name, i),
        policy.index_policy,
        record.last_index,
    )
    events: tuple[Emit, ...] = ()
    if surge:
        message = (
            f"workers {', '.join(terminations.held)} are on a cordoned node; they keep serving until "
            f"replacements run (minReplicas {policy.min_replicas})"
        )
        events = (Emit("Normal", "FloorHeld", message),)
    return Growth(tuple(to_create), foreign, events)


def new_failures(snapshot: Snapshot, workers: Sequence[Obj], leaving: Departures, record: Record) -> int:
    """Step 6: how many workers count toward the replacement backoff now: those that start leaving (not
    leaving at the last status write, which records the count with leavingWorkers in one write) because they
    crashed: Failed, with no disruption of their own and no signal on their node. A worker lost to its node (a
    taint, out-of-service, a cordon, the node deleted) or to a disruption (DisruptionTarget: an eviction, a
    preemption, a graceful node shutdown) is never counted, however young (`node_lost`): waiting would not keep
    its replacement off a doomed node (tainted and cordoned nodes are unschedulable, a deleted one is gone),
    it would only keep the job below its floor. Read from durable state only (the pod, its node, the last
    status), so a reconcile cut before its status write is counted by the next one, once."""
    newly = set(leaving.leaving) - record.leaving
    return sum(1 for p in workers if name_of(p) in newly and pod_phase(p) == "Failed" and not node_lost(snapshot, p))


def plan_elastic(
    snapshot: Snapshot, spec: MPIJobSpec, *, suspended: bool, last_index: int, previous: JobStatus
) -> WorkerPlan:
    policy = spec.elastic_policy
    assert policy is not None
    job_name = name_of(snapshot.job)
    everyone = workers_of(snapshot)
    by_name = {name_of(p): p for p in everyone}
    # Probes looking for a node are regrow's alone (regrow.py): they count toward nothing until bound.
    requested = set(policy.workers_to_delete)
    probes = [p for p in everyone if regrow.is_probe(p) and name_of(p) not in requested]
    probe_names = {name_of(p) for p in probes}
    workers = [p for p in everyone if name_of(p) not in probe_names]
    record = read_record(snapshot, workers, last_index, previous)
    listing = clean_listing(snapshot, policy.workers_to_delete, by_name, record)
    terminations = node_terminations(
        snapshot, policy, workers, by_name, listing, record, replicas=spec.worker_replicas, suspended=suspended
    )
    terminations, target, raised = _regrow_target(snapshot, policy, spec, workers, terminations, suspended)
    leaving = departures(snapshot, policy, workers, terminations, record, suspended=suspended)
    grown = growth(snapshot, policy, everyone, terminations, leaving.kept, record, suspended=suspended)
    failures = new_failures(snapshot, workers, leaving, record)
    regrown = regrow.decide(
        snapshot,
        regrow.Inputs(
            policy=policy,
            on=regrow.applies(snapshot, policy),
            suspended=suspended,
            target=target,
            replicas=terminations.replicas,
            raised=raised,
            probes=probes,
            placed=not grown.to_create and all(pod_node(p) is not None for p in leaving.kept),
            taken={*(index_of(job_name, p) for p in everyone), *grown.to_create},
            last_index=last_index,
            previous=previous,
        ),
    )
    hosts = [(index_of(job_name, p), name_of(p)) for p in leaving.kept]
    # A worker whose pod is being killed is out of discovery whatever the policy (Ignore keeps it otherwise).
    undisrupted = [p for p in leaving.kept if pod_signal(p) is None]
    hosts += [(i, constants.worker_name(job_name, i)) for i in grown.to_create]
    # Ready, as the headless Service's DNS records are: Horovod is never offered a name that cannot resolve.
    serving = [p for p in undisrupted if pod_phase(p) == "Running" and pod_ready(p)]
    names = {name_of(p) for p in serving}
    starting = [p for p in undisrupted if name_of(p) not in names]
    joined = _held_back(snapshot, policy, serving, starting, record, previous)
    held = set(joined.held)
    requeues = [w for w in (leaving.requeue_after, regrown.requeue_after, joined.requeue_after) if w is not None]
    return WorkerPlan(
        new_replicas=terminations.replicas if terminations.replicas != spec.worker_replicas else None,
        new_workers_to_delete=(
            list(terminations.workers_to_delete)
            if list(terminations.workers_to_delete) != list(policy.workers_to_delete)
            else None
        ),
        events=(*listing.events, *terminations.events, *grown.events, *regrown.raised),
        signals=terminations.signals,
        to_leave=leaving.to_leave,
        to_delete=leaving.to_delete,
        to_create=grown.to_create,
        kept=leaving.kept,
        leaving=leaving.leaving,
        hostfile_names=tuple(n for _, n in sorted(hosts)),
        discovery_names=tuple(name_of(p) for p in serving if name_of(p) not in held),
        foreign_names=grown.foreign_names,
        requeue_after=min(requeues) if requeues else None,
        held=terminations.held,
        failures=failures,
        job_annotations=regrown.annotations,
        probes_to_create=regrown.to_create,
        probes_to_delete=regrown.to_delete,
        regrow=regrown,
    )


def _held_back(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    serving: Sequence[Obj],
    starting: Sequence[Obj],
    record: Record,
    previous: JobStatus,
) -> joining.Joining:
    """The Ready workers kept out of this listing: a round joins together (joining.py); in Restart mode the
    list is the MPI run's host set, and growth also waits for its restart (restart.py)."""
    joined = joining.hold_back(serving, starting, record.in_discovery, snapshot.now)
    if not restart.applies(policy):
        return joined
    candidates = [p for p in serving if name_of(p) not in joined.held]
    kept = restart.hold_growth(policy, candidates, starting, record.in_discovery, previous, snapshot.now)
    requeues = [w for w in (joined.requeue_after, kept.requeue_after) if w is not None]
    return joining.Joining((*joined.held, *kept.names), min(requeues) if requeues else None)


def _regrow_target(
    snapshot: Snapshot,
    policy: ElasticPolicy,
    spec: MPIJobSpec,
    workers: Sequence[Obj],
    terminations: Terminations,
    suspended: bool,
) -> tuple[Terminations, int, int]:
    """(terminations with Worker replicas raised for probes that got a node, the target, how many were counted).
    Probes are counted among the workers that count toward replicas (not listed, leaving, terminating,
    finished or held on a cordoned node)."""
    if not regrow.applies(snapshot, policy):
        return terminations, terminations.replicas, 0
    lowered = terminations.replicas < spec.worker_replicas
    target = regrow.read_target(
        snapshot, policy, spec.worker_replicas, lowered_from=spec.worker_replicas if lowered else None
    )
    if suspended:
        return terminations, target, 0
    gone = {*terminations.workers_to_delete, *terminations.held}
    countable = [
        p
        for p in workers
        if name_of(p) not in gone
        and not is_leaving(p)
        and not is_terminating(p)
        and pod_phase(p) not in FINISHED_PHASES
    ]
    raised = regrow.counted_probes(countable, terminations.replicas, target)
    if raised:
        terminations = replace(terminations, replicas=terminations.replicas + raised)
    return terminations, target, raised
