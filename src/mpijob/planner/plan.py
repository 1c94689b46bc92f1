"""plan(snapshot) -> Plan: every decision of the operator, with no I/O.

A plan checks the spec (an invalid one is reported and nothing else happens), asks for live reads before
any decision that absence from the cache would drive, and then, for a valid job, calls the parts in turn on
one PlanContext (draft.py): job_status.py (conditions, counts, the status write), worker_writes.py (the
worker decisions and their writes), child_writes.py (the other objects) and finish.py (a finished job).

The Plan's phases come out in one safe order (`Plan.PHASES`): decisions are recorded in the API before they
are acted on (spec patch, then leaving annotations, then discovery, then the status, then deletions and
creations), so a crash at any point leaves a state from which the next reconcile continues the same way.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from pydantic import ValidationError

from mpijob.api import jsoncodec, rules
from mpijob.api.constants import JOB_CREATED_REASON
from mpijob.api.models import MPIJobSpec
from mpijob.planner import child_writes, finish, job_status, restart, worker_writes
from mpijob.planner import status as conditions
from mpijob.planner.actions import NOTHING, ConfirmAbsence, Emit, Plan
from mpijob.planner.draft import PlanContext, status_patch, status_write
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    format_time,
    is_owned_by,
    is_terminating,
)
from mpijob.planner.workers import absences_to_confirm

# The Failed reason of a job refused at its first plan.
INVALID_SPEC_REASON = "InvalidSpec"

# How long a job created suspended is left alone after the operator first sees it (`_settling`).
SUSPENDED_SETTLE_SECONDS = 1.0


def validate(job: Obj) -> tuple[MPIJobSpec | None, list[str]]:
    """Parses the spec and checks the cross-field rules: the same definitions the CRD is generated from
    (models and `api/rules.py`), for objects an older CRD let through or edited while we were down."""
    errors = [f"{r.field_path.lstrip('.')}: {r.message}" for r in rules.broken(rules.ROOT_RULES, job)]
    raw = job.get("spec") or {}
    try:
        # Strict, from JSON, as the API server reads it: "2" or true for an integer is an error, not a 2 or a 1.
        spec = MPIJobSpec.model_validate_json(jsoncodec.dumps(raw), strict=True)
    except (TypeError, ValueError) as err:
        if not isinstance(err, ValidationError):
            return None, [*errors, f"spec: not JSON ({err})"]
        for e in err.errors():
            field = ".".join(str(p) for p in e["loc"])
            errors.append(f"spec.{field}: {e['msg']}")
        return None, errors
    errors += [f"spec{r.field_path}: {r.message}" for r in rules.broken(rules.SPEC_RULES, raw)]
    for kind, rspec in spec.mpi_replica_specs.items():
        # The CRD's template schema: at least one container.
        if not (rspec.template.get("spec") or {}).get("containers"):
            errors.append(f"spec.mpiReplicaSpecs.{kind}.template.spec.containers: at least one container")
    errors += _restart_errors(spec)
    return spec, errors


def _restart_errors(spec: MPIJobSpec) -> list[str]:
    """Restart mode runs the launcher container's command under mpijob-run: the image's entrypoint is not
    known here, so the command must be in the template."""
    if not restart.applies(spec.elastic_policy) or "Launcher" not in spec.mpi_replica_specs:
        return []
    containers = (spec.launcher.template.get("spec") or {}).get("containers") or []
    if containers and not (isinstance(containers[0], dict) and containers[0].get("command")):
        field = "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command"
        return [f"{field}: required with elasticPolicy.mode Restart (it runs under /etc/mpi/mpijob-run)"]
    return []


def plan(snapshot: Snapshot, *, urgent_first: bool = False) -> Plan:
    """Everything to do for one MPIJob now, by phase (see `Plan`). Idempotent: a converged job yields no write.

    `urgent_first` (as the operator plans: docs/design.md, "The order of work"): when workers leave
    discovery, plan only as far as those writes and a Defer (`Plan.partial`). The executor stops at that
    Defer anyway and the deferred pass plans the rest from fresh data, so the rest would be planned twice;
    in a spot taint's burst of hundreds of jobs, planning is most of the operator's time before the last
    launcher sees its list."""
    job = snapshot.job
    if is_terminating(job):
        return NOTHING
    managed_by = ((job.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
    if not snapshot.config.manages(managed_by):
        return NOTHING
    spec, errors = validate(job)
    if spec is None or errors:
        if _started(snapshot):
            return _invalid_edit(snapshot, errors)
        return _invalid(snapshot, errors)
    settling = _settling(snapshot, spec)
    if settling is not None:
        return Plan(requeue_after=settling)
    needed = absences_to_confirm(snapshot, spec)
    if needed:
        # Absence is not deletion: nothing is decided until a live read answered (issue 8, rule 1).
        return Plan(confirm=tuple(ConfirmAbsence(kind, name) for kind, name in needed))
    # A valid job: every part below adds to the one draft (see draft.py); nothing else carries state.
    ctx = PlanContext(snapshot, spec)
    job_status.spec_fixed(ctx)
    job_status.created(ctx)
    job_status.stall_cleared(ctx)
    if not conditions.is_finished(ctx.draft.new_status):
        # Checked first: a job whose launcher already finished gets no new workers or children.
        job_status.detect_finish(ctx)
    if conditions.is_finished(ctx.draft.new_status):
        finish.finished(ctx)
    elif not active(ctx, urgent_first):
        return ctx.draft.freeze_urgent()
    job_status.write_status(ctx)
    return ctx.draft.freeze()


def active(ctx: PlanContext, urgent_first: bool = False) -> bool:
    """A job that has not finished: its workers' decisions, then its children, launcher and status. The
    order the writes go out in is Plan.PHASES, whatever the order of the calls here. False: stopped after
    the writes that take hosts out of discovery (`urgent_first`), the rest not planned."""
    suspended = ctx.spec.run_policy.suspend
    job_status.suspension(ctx, suspended)
    child_writes.ensure_service(ctx)
    # Bounded work per reconcile: at most so many marks and deletes (creates: see create_budget).
    decided = worker_writes.within_budget(ctx, worker_writes.decide(ctx, suspended))
    worker_writes.record_decisions(ctx, decided)
    deadlines = worker_writes.leaving_deadlines(ctx, decided)
    worker_writes.mark_leaving(ctx, decided, deadlines)
    worker_writes.correct_deadlines(ctx, decided, deadlines)
    listed = child_writes.ensure_config_map(ctx, decided)
    told = worker_writes.recorded_deadlines(ctx, deadlines)
    child_writes.nudge_launcher(ctx, listed, worker_writes.launcher_leaving(told))
    if urgent_first and ctx.draft.dropping_hosts:
        return False
    worker_writes.announce_decisions(ctx, decided)
    child_writes.ensure_secret(ctx)
    child_writes.ensure_pdb(ctx)
    child_writes.ensure_pod_group(ctx, wanted=not suspended)
    decided = worker_writes.delete_and_create(ctx, decided, suspended)
    ready, account = child_writes.ensure_discovery_access(ctx)
    if ready:
        child_writes.ensure_launcher(ctx, decided, account)
    job_status.worker_status(ctx, decided)
    job_status.conflict_condition(ctx)
    job_status.permissions_condition(ctx)
    return True


def _settling(snapshot: Snapshot, spec: MPIJobSpec) -> float | None:
    """Seconds before the first pass of a job created suspended, or None: plan now. That pass writes the
    status (Created, Suspended), which changes the job's resourceVersion, so a client that creates a job
    suspended and then updates the object its create returned (the reference's e2e suite, "suspended on
    creation"; a queueing controller) would meet a 409 if the write came first. Nothing waits on a suspended
    job's objects; resuming it (a spec change) ends the wait at once. The reference leaves the same window
    by being slower (docs/design.md, "A job created suspended waits a second")."""
    if not spec.run_policy.suspend or snapshot.seen_for is None or snapshot.last_status.status.conditions:
        return None
    left = SUSPENDED_SETTLE_SECONDS - snapshot.seen_for
    return left if left > 0 else None


def _started(snapshot: Snapshot) -> bool:
    """Whether a valid plan ever accepted the job (or anything of it runs): then a bad spec is an edit, not a
    bad job. Read first from the job's own status, which the first valid plan writes (Created) before it
    creates anything: a job queued suspended (Kueue) has no start time, pods or launcher yet, and a launcher
    created moments ago may not be in the cache yet. Only a job refused at its first plan (Failed with
    reason InvalidSpec, written together with Created by `_invalid`) was never accepted."""
    launcher = snapshot.launcher
    status = snapshot.last_status.status
    failed = conditions.get_condition(status, conditions.FAILED)
    refused = failed is not None and failed.status == "True" and failed.reason == INVALID_SPEC_REASON
    return (
        (conditions.get_condition(status, conditions.CREATED) is not None and not refused)
        or bool(status.start_time)
        or bool(snapshot.owned_pods)
        or (launcher is not None and is_owned_by(launcher, snapshot.job))
    )


def _invalid_edit(snapshot: Snapshot, errors: list[str]) -> Plan:
    """A started job whose spec became invalid: said in a condition and a Warning naming the field, and
    nothing else. It is neither finished nor cleaned up (a typo must not end a week of training); its pods
    are left alone; fixing the spec resumes it where it was."""
    old = copy.deepcopy(snapshot.job.get("status") or {})
    status = conditions.read_status(old)
    now = format_time(snapshot.now)
    message = "; ".join(errors) + "; the job is left as it was until the spec is fixed"
    flipped = conditions.set_condition(status, conditions.INVALID_SPEC, True, "InvalidSpecEdit", message, now)
    # Only the condition changes: `state` and everything else keep what the last valid plan wrote.
    if status.state is None:
        status.state = conditions.state(conditions.read_status(old))
    patch = status_write(snapshot.job, old, status, now)
    if patch is None:
        return NOTHING
    return Plan(status=(replace(patch, announce=(Emit("Warning", "ValidationError", message),) if flipped else ()),))


def _invalid(snapshot: Snapshot, errors: list[str]) -> Plan:
    """An invalid job is marked Failed with a message naming the field, and nothing is created."""
    old = copy.deepcopy(snapshot.job.get("status") or {})
    status = conditions.read_status(old)
    now = format_time(snapshot.now)
    message = "; ".join(errors)
    if not status.conditions:
        conditions.set_condition(status, conditions.CREATED, True, JOB_CREATED_REASON, "MPIJob is created.", now)
    flipped = conditions.set_condition(status, conditions.FAILED, True, INVALID_SPEC_REASON, message, now)
    if status.completion_time is None:
        status.completion_time = now
    patch = status_patch(snapshot.job, old, status, now)
    if patch is None:
        return NOTHING
    # Announced with the status write, like every state change.
    return Plan(status=(replace(patch, announce=(Emit("Warning", "ValidationError", message),) if flipped else ()),))
