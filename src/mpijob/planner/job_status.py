"""The job's status: the Created and SpecFixed conditions, suspension, worker and launcher counts, the Running
and BelowMinReplicas conditions, the ResourceConflict condition, finishing, and the status write (only when
something changed).

Each function edits `ctx.draft.new_status` (the JobStatus being built) of one PlanContext; `write_status`
turns the difference from the last status into the one status write."""

from __future__ import annotations

from dataclasses import replace

from mpijob.api import constants
from mpijob.api.models import ReplicaStatus
from mpijob.planner import children
from mpijob.planner import status as conditions
from mpijob.planner.actions import Action, Emit
from mpijob.planner.draft import PlanContext, status_patch
from mpijob.planner.snapshot import (
    Obj,
    condition,
    condition_true,
    is_owned_by,
    is_terminating,
    meta,
    pod_phase,
    pod_ready,
)
from mpijob.planner.workers import WorkerPlan


def spec_fixed(ctx: PlanContext) -> None:
    """A bad edit was fixed: said in the InvalidSpec condition and an Event; the job goes on from where it was."""
    if conditions.is_true(ctx.draft.new_status, conditions.INVALID_SPEC):
        conditions.set_condition(
            ctx.draft.new_status, conditions.INVALID_SPEC, False, "SpecFixed", "the spec is valid again", ctx.now
        )
        ctx.draft.status_events.append(Emit("Normal", "SpecFixed", "the spec is valid again; resuming"))


def created(ctx: PlanContext) -> None:
    """The Created condition, on a job's first plan."""
    if not ctx.draft.new_status.conditions:
        ctx.condition(
            conditions.CREATED,
            True,
            constants.JOB_CREATED_REASON,
            f"MPIJob {meta(ctx.job).get('namespace')}/{ctx.name} is created.",
        )


def stall_cleared(ctx: PlanContext) -> None:
    """The ReconcileStalled condition (written by `stalled`) goes False once the runtime no longer holds the
    job back: its plans changed, or it found nothing to write."""
    if ctx.snapshot.held_back is None and conditions.is_true(ctx.draft.new_status, conditions.RECONCILE_STALLED):
        conditions.set_condition(
            ctx.draft.new_status, conditions.RECONCILE_STALLED, False, "Progressing", "plans make progress", ctx.now
        )


def stalled(job: Obj, message: str, now: str) -> list[Action]:
    """What the runtime's spin guard writes, once, when it holds a job back: the ReconcileStalled condition
    saying what the job waits for, announced by one Warning Event (posted alone when the condition already
    says so, e.g. after a restart). Not a plan: the plan is what repeats."""
    status = conditions.read_status(job.get("status") or {})
    conditions.set_condition(status, conditions.RECONCILE_STALLED, True, "SameWritesRepeated", message, now)
    warning = Emit("Warning", "ReconcileStalled", message)
    patch = status_patch(job, job.get("status") or {}, status, now)
    return [warning] if patch is None else [replace(patch, announce=(warning,))]


def suspension(ctx: PlanContext, suspended: bool) -> None:
    was_suspended = conditions.is_true(ctx.draft.new_status, conditions.SUSPENDED)
    if suspended:
        ctx.condition(conditions.SUSPENDED, True, "MPIJobSuspended", "MPIJob suspended")
        ctx.condition(conditions.RUNNING, False, "MPIJobSuspended", "MPIJob suspended", event=None)
    elif was_suspended:
        ctx.condition(conditions.SUSPENDED, False, "MPIJobResumed", "MPIJob resumed")
        ctx.draft.status_events.append(Emit("Normal", "MPIJobResumed", "MPIJob resumed"))
        ctx.draft.new_status.start_time = ctx.now
    if not suspended and not ctx.draft.new_status.start_time:
        ctx.draft.new_status.start_time = ctx.now


def worker_status(ctx: PlanContext, decided: WorkerPlan) -> None:
    workers = ctx.workers
    live = [p for p in workers if not is_terminating(p)]
    running = [p for p in decided.kept if pod_phase(p) == "Running"]
    # Zero failed or succeeded is left out (None), zero active or ready is said.
    worker_status = ReplicaStatus(
        active=len(running),
        ready=sum(1 for p in decided.kept if pod_ready(p)),
        selector=children.worker_selector(ctx.name),
        failed=sum(1 for p in live if pod_phase(p) == "Failed") or None,
        succeeded=sum(1 for p in live if pod_phase(p) == "Succeeded") or None,
    )
    statuses = {**ctx.draft.new_status.replica_statuses, "Worker": worker_status, "Launcher": launcher_status(ctx)}
    ctx.draft.new_status.replica_statuses = statuses
    ctx.draft.new_status.leaving_workers = sorted(decided.leaving)

    if ctx.spec.run_policy.suspend:
        return
    launcher_running = any(pod_phase(p) == "Running" for p in ctx.launcher_pods)
    ep = ctx.spec.elastic_policy
    enough = (
        len(running) >= ep.min_replicas if ep else len(running) == ctx.spec.worker_replicas and not decided.to_create
    )
    if ep is not None:
        floor_condition(ctx, len(running), ep.min_replicas)
    if launcher_running and enough:
        ctx.condition(
            conditions.RUNNING,
            True,
            "MPIJobRunning",
            f"MPIJob {meta(ctx.job).get('namespace')}/{ctx.name} is running.",
        )
    elif conditions.is_true(ctx.draft.new_status, conditions.RUNNING):
        why = "launcher is not running" if not launcher_running else "not enough workers are running"
        ctx.condition(conditions.RUNNING, False, "MPIJobNotRunning", why, event=None)


def floor_condition(ctx: PlanContext, running: int, floor: int) -> None:
    """Says when a job that was running cannot hold its floor (workers lost faster than replaced, or
    replacements that cannot be placed), and when it holds it again."""
    below = running < floor
    if below and (
        conditions.is_true(ctx.previous.status, conditions.RUNNING)
        or conditions.is_true(ctx.draft.new_status, conditions.BELOW_MIN_REPLICAS)
    ):
        message = f"{running} of minReplicas {floor} workers are running"
        # No Event: a worker lost at the floor dips below it until its replacement runs; that is normal.
        ctx.condition(conditions.BELOW_MIN_REPLICAS, True, "BelowMinReplicas", message, event=None)
    elif not below and conditions.is_true(ctx.draft.new_status, conditions.BELOW_MIN_REPLICAS):
        ctx.condition(
            conditions.BELOW_MIN_REPLICAS, False, "MinReplicasRunning", f"{running} workers are running", event=None
        )


def launcher_status(ctx: PlanContext) -> ReplicaStatus:
    """Only the counts that are not zero."""
    job_status = (ctx.snapshot.launcher or {}).get("status") or {}
    return ReplicaStatus(
        active=sum(1 for p in ctx.launcher_pods if pod_phase(p) == "Running") or None,
        failed=job_status.get("failed") or None,
        succeeded=job_status.get("succeeded") or None,
    )


def conflict_condition(ctx: PlanContext) -> None:
    if ctx.draft.conflicts:
        message = (
            f"{'; '.join(sorted(set(ctx.draft.conflicts)))}: exists and is not owned by this MPIJob; "
            "it is left untouched. Delete or rename it."
            + (
                " No worker or launcher is created until then (they would use its configuration)."
                if ctx.foreign_children()
                else ""
            )
        )
        if conditions.set_condition(
            ctx.draft.new_status, conditions.RESOURCE_CONFLICT, True, "NotOwned", message, ctx.now
        ):
            ctx.draft.status_events.append(Emit("Warning", "ResourceConflict", message))
    elif conditions.get_condition(ctx.draft.new_status, conditions.RESOURCE_CONFLICT) is not None:
        conditions.set_condition(
            ctx.draft.new_status, conditions.RESOURCE_CONFLICT, False, "Resolved", "no conflicting objects", ctx.now
        )


def permissions_condition(ctx: PlanContext) -> None:
    """An elastic job is told which of its features are off because the operator may not use them (an install
    that kept the reference's ClusterRole), once, with an Event; and when they are on again."""
    message = ctx.snapshot.config.permissions_message
    status = ctx.draft.new_status
    if ctx.spec.elastic_policy is not None and message:
        if conditions.set_condition(
            status, conditions.PERMISSIONS_MISSING, True, "PermissionsMissing", message, ctx.now
        ):
            ctx.draft.status_events.append(Emit("Warning", "PermissionsMissing", message))
    elif conditions.is_true(status, conditions.PERMISSIONS_MISSING):
        granted = "the operator may use every elastic feature" if message == "" else "the job is not elastic"
        conditions.set_condition(status, conditions.PERMISSIONS_MISSING, False, "PermissionsGranted", granted, ctx.now)


def detect_finish(ctx: PlanContext) -> None:
    launcher = ctx.snapshot.launcher
    if launcher is not None and is_owned_by(launcher, ctx.job):
        if condition_true(launcher, "Complete"):
            done = (launcher.get("status") or {}).get("completionTime") or ctx.now
            ctx.draft.new_status.completion_time = done
            ctx.condition(
                conditions.SUCCEEDED,
                True,
                "MPIJobSucceeded",
                f"MPIJob {meta(ctx.job).get('namespace')}/{ctx.name} successfully completed.",
            )
            return
        if condition_true(launcher, "Failed"):
            cond = condition(launcher, "Failed") or {}
            reason = str(cond.get("reason") or "MPIJobFailed")
            message = str(cond.get("message") or "launcher Job failed")
            failed_pods = [p for p in ctx.launcher_pods if pod_phase(p) == "Failed"]
            if reason == "BackoffLimitExceeded" and failed_pods:
                last = max(failed_pods, key=lambda p: str(meta(p).get("creationTimestamp", "")))
                pst = last.get("status") or {}
                reason = f"{reason}/{pst.get('reason') or 'Error'}"
                if pst.get("message"):
                    message = f"{message}: {pst['message']}"
            ctx.draft.new_status.completion_time = ctx.now
            ctx.condition(conditions.FAILED, True, reason, message, event="Warning")
            return
    if ctx.spec.elastic_policy is None:
        evicted = [
            p for p in ctx.workers if pod_phase(p) == "Failed" and (p.get("status") or {}).get("reason") == "Evicted"
        ]
        if evicted:
            total = len(ctx.workers)
            ctx.draft.new_status.completion_time = ctx.now
            ctx.condition(
                conditions.FAILED,
                True,
                "MPIJobEvicted",
                f"{len(evicted)}/{total} workers are evicted",
                event="Warning",
            )


def write_status(ctx: PlanContext) -> None:
    ctx.draft.new_status.replica_statuses = dict(ctx.draft.new_status.replica_statuses)  # always written, if empty
    patch = status_patch(ctx.job, ctx.old_status, ctx.draft.new_status, ctx.now)
    if patch is not None:
        # Announced with the status write, so a retried reconcile does not repeat them.
        ctx.draft.status.append(replace(patch, announce=tuple(ctx.draft.status_events)))
