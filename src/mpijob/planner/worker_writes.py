"""The worker decisions of a valid, unfinished job, and the writes that carry them out, by phase (see `Plan`):
the spec patch that records them (record), the leaving annotations (mark), their Events (announce), and the
deletes and creates of worker pods (delete, create) with the replacement backoff and the slow start.

The decisions themselves are the pure steps of workers.py (static jobs) and elastic.py; each function here
takes the plan's PlanContext and adds to its draft, like child_writes.py does for the other objects."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from mpijob.api import constants
from mpijob.api.models import API_VERSION
from mpijob.api.objects import is_leaving
from mpijob.planner import children, podgroups, regrow
from mpijob.planner.actions import LEAVING, PROBE_CREATED, PROBE_TIMED_OUT, PROBES_BOUND, WORKER_LOST, Patch, Tag
from mpijob.planner.backoff import replacement_backoff
from mpijob.planner.draft import PlanContext
from mpijob.planner.elastic import plan_elastic
from mpijob.planner.snapshot import (
    annotations_of,
    format_time,
    is_terminating,
    name_of,
    parse_time,
    resource_version,
)
from mpijob.planner.workers import (
    WorkerPlan,
    highest_worker_index,
    leaving_since,
    plan_static,
    readable_last_index,
)

SLOW_START_CREATES = 16
MAX_CREATES_PER_RECONCILE = 500
# Leaving marks and pod deletes one reconcile may send (a 10,000-worker job suspended or scaled down must not
# send 20,000 writes from one reconcile, out of the operator's one QPS budget); the rest follow in the next
# reconciles, woken by the pods' watch events and, at the latest, after BUDGET_REQUEUE_SECONDS.
MAX_MARKS_PER_RECONCILE = 500
MAX_DELETES_PER_RECONCILE = 500
BUDGET_REQUEUE_SECONDS = 1.0
# Leaving workers the launcher's annotation names (the soonest first): an annotation must stay well under the
# API server's 256 KiB for all of a pod's annotations.
MAX_LEAVING_LISTED = 1000


def create_budget(existing_workers: int) -> int:
    """How many worker pods one reconcile may create: 16 at first, then about twice what exists."""
    return min(MAX_CREATES_PER_RECONCILE, max(SLOW_START_CREATES, 2 * existing_workers))


def last_worker_index(ctx: PlanContext) -> int:
    """status.lastWorkerIndex, read strictly: anything but an integer in [0, MAX_WORKER_INDEX] (a status
    writer's typo, a huge number that would make worker names invalid) is ignored; the highest index
    of an existing worker takes its place, and the next status write corrects it."""
    value = ctx.draft.new_status.last_worker_index
    readable = readable_last_index(value)
    if readable is not None:
        return readable
    if value is not None or "lastWorkerIndex" in ctx.previous.invalid:
        highest = highest_worker_index(ctx.name, ctx.workers)
        ctx.draft.new_status.last_worker_index = None if highest < 0 else highest
    return -1 if ctx.draft.new_status.last_worker_index is None else ctx.draft.new_status.last_worker_index


def decide(ctx: PlanContext, suspended: bool) -> WorkerPlan:
    """Which workers to keep, mark as leaving, delete or create, and what to record in the spec."""
    if ctx.spec.elastic_policy is None:
        return plan_static(ctx.snapshot, ctx.spec, suspended=suspended)
    return plan_elastic(
        ctx.snapshot,
        ctx.spec,
        suspended=suspended,
        last_index=last_worker_index(ctx),
        previous=ctx.previous.status,
    )


def within_budget(ctx: PlanContext, decided: WorkerPlan) -> WorkerPlan:
    """The decisions, with at most MAX_MARKS_PER_RECONCILE leaving marks and MAX_DELETES_PER_RECONCILE
    deletes; the next reconcile decides the rest again. Workers with a signal (their node's, or their pod's own
    DisruptionTarget) are marked first. A worker that leaves now is deleted only with its mark (a deleted
    worker always carries its leaving time); all leavers are out of discovery at once, whatever the budget
    (one write)."""
    signalled = {name_of(signal.pod) for signal in decided.signals}
    leaves = sorted(decided.to_leave, key=lambda leave: name_of(leave.pod) not in signalled)
    marked = leaves[:MAX_MARKS_PER_RECONCILE]
    unmarked = {name_of(leave.pod) for leave in leaves[len(marked) :]}
    deletes = [pod for pod in decided.to_delete if name_of(pod) not in unmarked]
    bounded = replace(decided, to_leave=tuple(marked), to_delete=tuple(deletes[:MAX_DELETES_PER_RECONCILE]))
    if unmarked or len(deletes) > MAX_DELETES_PER_RECONCILE:
        ctx.draft.requeue_after.append(BUDGET_REQUEUE_SECONDS)
    return bounded


def record_decisions(ctx: PlanContext, decided: WorkerPlan) -> None:
    """The spec patch (phase record) for replicas lowered and names listed by node terminations and lost
    workers; optimistic on the job's resourceVersion, so a concurrent edit makes the plan be made again.
    It carries the Events of those decisions (NodeTerminating, WorkerLost, ...): they are posted when the
    decision is recorded, even if a later write of the batch fails (a mark's 409 when the kubelet updated
    the pod): the next plan reads the names as listed and would never say why they were."""
    patch: dict[str, Any] = {}
    if decided.new_replicas is not None:
        patch.setdefault("spec", {})["mpiReplicaSpecs"] = {"Worker": {"replicas": decided.new_replicas}}
    if decided.new_workers_to_delete is not None:
        patch.setdefault("spec", {})["elasticPolicy"] = {"workersToDelete": decided.new_workers_to_delete}
    if decided.job_annotations is not None:
        # The regrow target, recorded with the replicas it goes with (regrow.read_target), in the same write.
        patch["metadata"] = {"annotations": dict(decided.job_annotations)}
    if patch:
        ctx.draft.record.append(
            Patch(
                API_VERSION,
                "MPIJob",
                ctx.name,
                patch,
                resource_version=resource_version(ctx.job),
                announce=decided.events,
                tags=_record_tags(ctx, decided),
            )
        )


def _record_tags(ctx: PlanContext, decided: WorkerPlan) -> tuple[Tag, ...]:
    """What the spec patch says to the metrics: workers lost (names it lists newly whose pods are gone
    already: someone else removed them), and probes bound (Worker replicas raised with the regrow target)."""
    tags: list[Tag] = []
    listed = set(ctx.spec.elastic_policy.workers_to_delete if ctx.spec.elastic_policy else ())
    added = [n for n in decided.new_workers_to_delete or () if n not in listed]
    if any(ctx.snapshot.pods_by_name.get(n) is None for n in added):
        tags.append(Tag(WORKER_LOST))
    worker = ((ctx.job.get("spec") or {}).get("mpiReplicaSpecs") or {}).get("Worker") or {}
    replicas, raised = worker.get("replicas"), decided.new_replicas
    regrow_keys = {constants.ANNOTATION_REGROW_TARGET, constants.ANNOTATION_REGROW_REPLICAS}
    bound = raised - replicas if isinstance(raised, int) and isinstance(replicas, int) else 0
    if bound > 0 and regrow_keys & set(decided.job_annotations or ()):
        tags.append(Tag(PROBES_BOUND, count=bound))
    return tuple(tags)


def leaving_deadlines(ctx: PlanContext, decided: WorkerPlan) -> dict[str, str]:
    """When the operator deletes each leaving worker of an elastic job that is not being deleted yet (RFC 3339
    UTC): its leaving time plus scaleInGracePeriodSeconds, as `elastic.deletions` decides; now for one
    marked and deleted in this plan (not serving). A deletion can come sooner (its node is deleted), never
    later; the pod's own terminationGracePeriodSeconds follow it."""
    policy = ctx.spec.elastic_policy
    if policy is None:
        return {}
    grace = timedelta(seconds=policy.scale_in_grace_period_seconds)
    now = ctx.snapshot.now.replace(microsecond=0)  # as ctx.now, the leaving-since written now
    marked = {name_of(leave.pod) for leave in decided.to_leave}
    deleted = {name_of(pod) for pod in decided.to_delete}
    deadlines: dict[str, str] = {}
    for pod in ctx.workers:
        name = name_of(pod)
        if is_terminating(pod):
            continue
        if name in marked:
            deadlines[name] = format_time(now if name in deleted else now + grace)
        elif is_leaving(pod):
            deadlines[name] = format_time(leaving_since(pod, now) + grace)
    return deadlines


def recorded_deadlines(ctx: PlanContext, deadlines: dict[str, str]) -> dict[str, str]:
    """What the launcher is told of the leaving workers' deadlines: only those recorded on the pods. That is
    the one this plan's marks write (they go before the nudge, `Draft._urgent`, and a failed mark stops the
    batch), else the one on the pod. A worker with neither (a mark cut by the budget, a pod deleted now) is
    not told: a due time that the pod does not say could differ from the one a later pass records."""
    written = {
        patch.name: patch.patch["metadata"]["annotations"][constants.ANNOTATION_LEAVING_DEADLINE]
        for patch in ctx.draft.mark
        if constants.ANNOTATION_LEAVING_DEADLINE in patch.patch["metadata"]["annotations"]
    }
    recorded: dict[str, str] = {}
    for pod in ctx.workers:
        name = name_of(pod)
        value = written.get(name) or annotations_of(pod).get(constants.ANNOTATION_LEAVING_DEADLINE)
        if name in deadlines and value is not None and parse_time(value) is not None:
            recorded[name] = value
    return recorded


def launcher_leaving(deadlines: dict[str, str]) -> str | None:
    """The launcher's leaving-workers annotation: a JSON object, the soonest MAX_LEAVING_LISTED; None (no
    annotation) when no worker is leaving."""
    if not deadlines:
        return None
    soonest = sorted(deadlines.items(), key=lambda item: (item[1], item[0]))[:MAX_LEAVING_LISTED]
    return json.dumps(dict(sorted(soonest)), separators=(",", ":"))


def mark_leaving(ctx: PlanContext, decided: WorkerPlan, deadlines: dict[str, str]) -> None:
    """The leaving annotations (since now, why, and for an elastic job when the pod is deleted) on each worker
    that leaves; optimistic, so a worker that changed since the snapshot is decided again on fresh data."""
    for leave in decided.to_leave:
        annotations = {
            constants.ANNOTATION_LEAVING_SINCE: ctx.now,
            constants.ANNOTATION_LEAVING_REASON: leave.reason,
        }
        if name_of(leave.pod) in deadlines:
            annotations[constants.ANNOTATION_LEAVING_DEADLINE] = deadlines[name_of(leave.pod)]
        ctx.draft.mark.append(
            Patch(
                "v1",
                "Pod",
                name_of(leave.pod),
                {"metadata": {"annotations": annotations}},
                resource_version=resource_version(leave.pod),
                tags=(Tag(LEAVING, leave.reason),),
            )
        )


def correct_deadlines(ctx: PlanContext, decided: WorkerPlan, deadlines: dict[str, str]) -> None:
    """A worker marked earlier whose deadline annotation is not the one due (marked by an operator version that
    wrote none, scaleInGracePeriodSeconds edited since, a hand edit) gets the right one; within the marks'
    budget. Not for a worker deleted in this plan (it gets SIGTERM now). A steady job writes nothing here: every
    leaving worker already carries its deadline."""
    skip = {name_of(leave.pod) for leave in decided.to_leave} | {name_of(pod) for pod in decided.to_delete}
    budget = MAX_MARKS_PER_RECONCILE - len(decided.to_leave)
    for pod in ctx.workers:
        name = name_of(pod)
        due = deadlines.get(name)
        if due is None or name in skip or annotations_of(pod).get(constants.ANNOTATION_LEAVING_DEADLINE) == due:
            continue
        if budget <= 0:
            ctx.draft.requeue_after.append(BUDGET_REQUEUE_SECONDS)
            return
        budget -= 1
        annotations = {constants.ANNOTATION_LEAVING_DEADLINE: due}
        patch = {"metadata": {"annotations": annotations}}
        ctx.draft.mark.append(Patch("v1", "Pod", name, patch, resource_version=resource_version(pod)))


def announce_decisions(ctx: PlanContext, decided: WorkerPlan) -> None:
    """One Event per decision: workers leaving because of a node are named by its NodeTerminating Event, those
    whose pod is being killed by a WorkersDisrupted Event, the others in one WorkersLeaving Event."""
    if not ctx.draft.record:
        ctx.draft.announce += decided.events  # else they go with the record (record_decisions)
    announced = {name_of(signal.pod) for signal in decided.signals}
    leaving = [leave for leave in decided.to_leave if name_of(leave.pod) not in announced]
    if leaving:
        ctx.emit(
            "Normal",
            "WorkersLeaving",
            f"workers {', '.join(name_of(leave.pod) for leave in leaving)} left discovery "
            f"({', '.join(sorted({leave.reason for leave in leaving}))})",
        )


def delete_and_create(ctx: PlanContext, decided: WorkerPlan, suspended: bool) -> WorkerPlan:
    """Deletes and creates of worker pods (phases delete and create: after the status write, which records
    discoveredHosts, leavingWorkers and lastWorkerIndex first). Returns the decisions with the creates
    that really go out."""
    for pod in decided.to_delete:
        ctx.delete_pod(pod, "suspended" if suspended else "leaving the job")
    for pod in decided.probes_to_delete:
        late = decided.regrow is not None and name_of(pod) in _timed_out(decided)
        why = regrow.TIMED_OUT if late else "regrow probe no longer needed"
        ctx.delete_pod(pod, why, tags=(Tag(PROBE_TIMED_OUT),) if late else ())
    if ctx.foreign_children():
        # Fail closed: a worker would mount someone else's discover_hosts.sh or SSH key.
        decided = replace(decided, to_create=())
    decided = replacement_backoff(ctx, decided)
    # Slow start, as ReplicaSets do: a job cannot flood the API server (or a quota) with creates; each
    # reconcile may create about twice as many workers as exist, and the next one (woken by their watch
    # events) more.
    decided = replace(decided, to_create=decided.to_create[: create_budget(len(ctx.workers))])
    if ctx.foreign_children():
        decided = replace(decided, probes_to_create=())
    config = ctx.snapshot.config
    for index in decided.to_create:
        pod = children.worker_pod(ctx.job, ctx.spec, index, config.cluster_domain)
        podgroups.decorate(pod["metadata"], pod["spec"], ctx.name, config.gang_scheduler)
        ctx.draft.create.append(ctx.creation(pod))
    create_probes(ctx, decided)
    made = (*decided.to_create, *decided.probes_to_create)
    if made:
        ctx.draft.new_status.last_worker_index = max([*made, last_worker_index(ctx)])
    for name in decided.foreign_names:
        ctx.draft.conflicts.append(f"Pod {name}")
    if decided.requeue_after is not None:
        ctx.draft.requeue_after.append(decided.requeue_after)
    return decided


def _timed_out(decided: WorkerPlan) -> set[str]:
    status = decided.regrow.status if decided.regrow is not None else None
    return set(status.last_timed_out) if status is not None else set()


def create_probes(ctx: PlanContext, decided: WorkerPlan) -> None:
    """Regrow's probe workers (regrow.py): ordinary workers plus the probe annotation (when it was made), which
    keeps them out of Worker replicas until they are bound; and status.regrow with its Events, naming only the
    probes that really go out."""
    config = ctx.snapshot.config
    for index in decided.probes_to_create:
        pod = children.worker_pod(ctx.job, ctx.spec, index, config.cluster_domain)
        pod["metadata"].setdefault("annotations", {})[constants.ANNOTATION_REGROW_PROBE] = ctx.now
        podgroups.decorate(pod["metadata"], pod["spec"], ctx.name, config.gang_scheduler)
        ctx.draft.create.append(replace(ctx.creation(pod), tags=(Tag(PROBE_CREATED),)))
    if decided.regrow is None:
        ctx.draft.new_status.regrow = None
        return
    status, events = regrow.settle(
        decided.regrow, decided.probes_to_create, ctx.name, ctx.now, suspended=ctx.spec.run_policy.suspend
    )
    ctx.draft.new_status.regrow = status
    ctx.draft.status_events.extend(events)
