"""The plan of a finished job (its finish is detected by job_status.detect_finish): Running cleared, the
completion time, the pods cleaned up as cleanPodPolicy says, and the job deleted once
ttlSecondsAfterFinished has passed."""

from __future__ import annotations

from mpijob.api.models import API_VERSION, CleanPodPolicy
from mpijob.api.objects import FINISHED_PHASES
from mpijob.planner import child_writes, job_status, worker_writes
from mpijob.planner import status as conditions
from mpijob.planner.actions import Delete, Emit
from mpijob.planner.draft import PlanContext
from mpijob.planner.snapshot import is_terminating, name_of, parse_time, pod_phase, pod_ready, uid_of


def finished(ctx: PlanContext) -> None:
    status = ctx.draft.new_status
    # Running is cleared when the job finishes (reference #787).
    if conditions.get_condition(status, conditions.RUNNING) is None or conditions.is_true(status, conditions.RUNNING):
        conditions.set_condition(status, conditions.RUNNING, False, "MPIJobFinished", "MPIJob finished", ctx.now)
    if not status.completion_time:
        status.completion_time = ctx.now
    status.replica_statuses = {**status.replica_statuses, "Launcher": job_status.launcher_status(ctx)}
    child_writes.ensure_pod_group(ctx, wanted=False)
    clean_pods(ctx)
    expire(ctx)


def clean_pods(ctx: PlanContext) -> None:
    """Deletes the workers cleanPodPolicy names (none by default), and keeps the worker counts true after
    the cleanup (the Ready column of `kubectl get`)."""
    policy = ctx.spec.run_policy.clean_pod_policy or CleanPodPolicy.NONE
    running_only = policy is CleanPodPolicy.RUNNING
    doomed = [
        pod
        for pod in ctx.workers
        if not is_terminating(pod)
        and (policy is CleanPodPolicy.ALL or (running_only and pod_phase(pod) not in FINISHED_PHASES))
    ]
    # Bounded work per reconcile, as for an active job's deletes; the rest go in the next reconciles.
    for pod in doomed[: worker_writes.MAX_DELETES_PER_RECONCILE]:
        ctx.delete_pod(pod, f"job finished (cleanPodPolicy {policy.value})")
    if len(doomed) > worker_writes.MAX_DELETES_PER_RECONCILE:
        ctx.draft.requeue_after.append(worker_writes.BUDGET_REQUEUE_SECONDS)
    deleted = {a.name for a in ctx.draft.delete}
    remaining = [p for p in ctx.workers if not is_terminating(p) and name_of(p) not in deleted]
    worker_status = ctx.draft.new_status.replica_statuses.get("Worker")
    if worker_status is not None:
        worker_status.active = sum(1 for p in remaining if pod_phase(p) == "Running")
        worker_status.ready = sum(1 for p in remaining if pod_ready(p))


def expire(ctx: PlanContext) -> None:
    """ttlSecondsAfterFinished: the job is deleted (phase finish, after the status write, so the final
    status and its Event go out first) once it has passed, else the plan asks to look again then (requeue_after)."""
    ttl = ctx.spec.run_policy.ttl_seconds_after_finished
    done = parse_time(ctx.draft.new_status.completion_time)
    if ttl is None or done is None:
        return
    left = (done - ctx.snapshot.now).total_seconds() + ttl
    if left > 0:
        ctx.draft.requeue_after.append(left)
        return
    expired = Emit("Normal", "MPIJobDeleted", f"ttlSecondsAfterFinished ({ttl}s) expired")
    ctx.draft.finish.append(
        Delete(API_VERSION, "MPIJob", ctx.name, uid=uid_of(ctx.job), propagation="Background", announce=(expired,))
    )
