"""plan(snapshot) -> Plan: every decision of the operator, with no I/O.

The Plan's phases come out in one safe order (`Plan.PHASES`): decisions are recorded in the API before they
are acted on (spec patch, then leaving annotations, then discovery, then the status, then deletions and
creations), so a crash at any point leaves a state from which the next reconcile continues the same way.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from mpijob.api import constants, rules
from mpijob.api.models import (
    API_VERSION,
    CleanPodPolicy,
    MPIJobSpec,
)
from mpijob.planner import child_writes, children, job_status, podgroups
from mpijob.planner import status as conditions
from mpijob.planner.actions import NOTHING, ConfirmAbsence, Delete, Emit, Patch, Plan
from mpijob.planner.draft import PlanContext, merge_patch_to, status_patch
from mpijob.planner.elastic import plan_elastic
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    format_time,
    is_owned_by,
    is_terminating,
    meta,
    name_of,
    parse_time,
    pod_phase,
    pod_ready,
    uid_of,
)
from mpijob.planner.workers import FINISHED_PHASES, WorkerPlan, absences_to_confirm, plan_static


def validate(job: Obj) -> tuple[MPIJobSpec | None, list[str]]:
    """Parses the spec and checks the cross-field rules: the same definitions the CRD is generated from
    (models and `api/rules.py`), for objects an older CRD let through or edited while we were down."""
    errors = [f"{r.field_path.lstrip('.')}: {r.message}" for r in rules.broken(rules.ROOT_RULES, job)]
    raw = job.get("spec") or {}
    try:
        # Strict, from JSON, as the API server reads it: "2" or true for an integer is an error, not a 2 or a 1.
        spec = MPIJobSpec.model_validate_json(json.dumps(raw), strict=True)
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
    return spec, errors


# Replacement backoff for workers that keep failing (issue 8, rule 7).
BACKOFF_AFTER = 3
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 600.0
SLOW_START_CREATES = 16
MAX_CREATES_PER_RECONCILE = 500


def create_budget(existing_workers: int) -> int:
    """How many worker pods one reconcile may create: 16 at first, then about twice what exists."""
    return min(MAX_CREATES_PER_RECONCILE, max(SLOW_START_CREATES, 2 * existing_workers))


# Worker names "<job>-worker-<index>" stay DNS labels (<= 63) for names up to 50 characters.
MAX_WORKER_INDEX = 99_999


class _Planner(PlanContext):
    """The plan of a valid job: the worker decisions and their writes here, the other objects in
    child_writes.py, the status in job_status.py (functions of the PlanContext), the shared inputs and helpers
    in draft.py."""

    def replacement_backoff(self, decided: WorkerPlan) -> WorkerPlan:
        """No churn: workers that keep failing (or keep landing on a terminating node) are replaced with a
        per-job exponential backoff. The first
        BACKOFF_AFTER - 1 failures are replaced at once; then each new failure waits 10 s, 20 s, ... up to
        5 min after the last failure. The count is forgotten after 10 quiet minutes. Both live in the status,
        so a restart does not reset them."""
        failed_now = decided.failures  # counted by elastic.new_failures
        recorded = self.status.recent_worker_failures
        count = recorded if recorded is not None and recorded <= 10**6 else 0
        # Written, even if unreadable (then it goes at the next status write).
        written = recorded is not None or "recentWorkerFailures" in self.previous.invalid
        last = parse_time(self.status.last_worker_failure_time)
        if failed_now:
            count += failed_now
            last = self.snapshot.now
            self.status.recent_worker_failures = count
            self.status.last_worker_failure_time = self.now
        elif written and (last is None or (self.snapshot.now - last).total_seconds() >= BACKOFF_RESET_SECONDS):
            self.status.recent_worker_failures = None
            self.status.last_worker_failure_time = None
            return decided
        if count < BACKOFF_AFTER or not decided.to_create or last is None:
            return decided
        delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(count - BACKOFF_AFTER, 16))
        left = (last - self.snapshot.now).total_seconds() + delay
        if left <= 0:
            return decided
        self.draft.wake.append(left)
        return replace(decided, to_create=())

    def last_worker_index(self) -> int:
        """status.lastWorkerIndex, read strictly: anything but an integer in [0, MAX_WORKER_INDEX] (a status
        writer's typo, a huge number that would make worker names invalid) is ignored; the highest index
        of an existing worker takes its place, and the next status write corrects it."""
        value = self.status.last_worker_index
        if value is not None and 0 <= value <= MAX_WORKER_INDEX:
            return value
        if value is not None or "lastWorkerIndex" in self.previous.invalid:
            taken = [i for p in self.workers if (i := constants.worker_index(self.name, name_of(p))) is not None]
            self.status.last_worker_index = max(taken) if taken else None
        return -1 if self.status.last_worker_index is None else self.status.last_worker_index

    # -- the plan ------------------------------------------------------------------------------------
    def run(self) -> Plan:
        if conditions.is_true(self.status, conditions.INVALID_SPEC):
            # A bad edit was fixed: the job goes on from where it was.
            conditions.set_condition(
                self.status, conditions.INVALID_SPEC, False, "SpecFixed", "the spec is valid again", self.now
            )
            self.draft.status_events.append(Emit("Normal", "SpecFixed", "the spec is valid again; resuming"))
        if not self.status.conditions:
            self.condition(
                conditions.CREATED,
                True,
                "MPIJobCreated",
                f"MPIJob {meta(self.job).get('namespace')}/{self.name} is created.",
            )
        if not conditions.is_finished(self.status):
            # Checked first: a job whose launcher already finished gets no new workers or children.
            job_status.detect_finish(self)
        if conditions.is_finished(self.status):
            self.finished()
        else:
            self.active()
        job_status.write_status(self)
        return self.draft.freeze()

    def active(self) -> None:
        """A job that has not finished: its workers' decisions, then its children, launcher and status. The
        order the writes go out in is Plan.PHASES, whatever the order of the calls here."""
        suspended = self.spec.run_policy.suspend
        job_status.suspension(self, suspended)
        child_writes.ensure_service(self)
        decided = self.decide_workers(suspended)
        self.record_worker_decisions(decided)
        self.mark_leaving(decided)
        listed = child_writes.ensure_config_map(self, decided)
        child_writes.nudge_launcher(self, listed)
        self.announce_decisions(decided)
        child_writes.ensure_secret(self)
        child_writes.ensure_pdb(self)
        child_writes.ensure_pod_group(self, wanted=not suspended)
        decided = self.worker_writes(decided, suspended)
        ready, account = child_writes.ensure_discovery_access(self)
        if ready:
            child_writes.ensure_launcher(self, decided, account)
        job_status.worker_status(self, decided)
        job_status.conflict_condition(self)

    def decide_workers(self, suspended: bool) -> WorkerPlan:
        if self.spec.elastic_policy is None:
            return plan_static(self.snapshot, self.spec, suspended=suspended)
        return plan_elastic(
            self.snapshot,
            self.spec,
            suspended=suspended,
            last_index=self.last_worker_index(),
            previous=self.previous.status,
        )

    def mark_leaving(self, decided: WorkerPlan) -> None:
        """The leaving annotation (since now, and why) on each worker that leaves; optimistic, so a worker
        that changed since the snapshot is decided again on fresh data."""
        for leave in decided.to_leave:
            annotations = {
                constants.ANNOTATION_LEAVING_SINCE: self.now,
                constants.ANNOTATION_LEAVING_REASON: leave.reason,
            }
            self.draft.mark.append(
                Patch(
                    "v1",
                    "Pod",
                    name_of(leave.pod),
                    {"metadata": {"annotations": annotations}},
                    resource_version=meta(leave.pod).get("resourceVersion"),
                )
            )

    def announce_decisions(self, decided: WorkerPlan) -> None:
        """One Event per decision: workers leaving because of a node are named by its NodeTerminating Event,
        the others in one WorkersLeaving Event."""
        self.draft.announce += decided.events
        announced = {name_of(signal.pod) for signal in decided.signals}
        leaving = [leave for leave in decided.to_leave if name_of(leave.pod) not in announced]
        if leaving:
            self.emit(
                "Normal",
                "WorkersLeaving",
                f"workers {', '.join(name_of(leave.pod) for leave in leaving)} left discovery "
                f"({', '.join(sorted({leave.reason for leave in leaving}))})",
            )

    def worker_writes(self, decided: WorkerPlan, suspended: bool) -> WorkerPlan:
        """Deletes and creates of worker pods (phases delete and create: after the status write, which records
        discoveredHosts, leavingWorkers and lastWorkerIndex first). Returns the decisions with the creates
        that really go out."""
        for pod in decided.to_delete:
            self.delete_pod(pod, "suspended" if suspended else "leaving the job")
        if self.foreign_children():
            # Fail closed: a worker would mount someone else's discover_hosts.sh or SSH key.
            decided = replace(decided, to_create=())
        decided = self.replacement_backoff(decided)
        # Slow start, as ReplicaSets do: a job cannot flood the API server (or a quota) with creates; each
        # reconcile may create about as many workers as exist, and the next one (woken by their watch
        # events) more.
        decided = replace(decided, to_create=decided.to_create[: create_budget(len(self.workers))])
        config = self.snapshot.config
        for index in decided.to_create:
            pod = children.worker_pod(self.job, self.spec, index, config.cluster_domain)
            podgroups.decorate(pod["metadata"], pod["spec"], self.name, config.gang_scheduler)
            self.draft.create.append(self.creation(pod))
        if decided.to_create:
            self.status.last_worker_index = max([*decided.to_create, self.last_worker_index()])
        for name in decided.foreign_names:
            self.draft.conflicts.append(f"Pod {name}")
        if decided.wake_after is not None:
            self.draft.wake.append(decided.wake_after)
        return decided

    def record_worker_decisions(self, decided: WorkerPlan) -> None:
        patch: dict[str, Any] = {}
        if decided.new_replicas is not None:
            patch.setdefault("spec", {})["mpiReplicaSpecs"] = {"Worker": {"replicas": decided.new_replicas}}
        if decided.new_workers_to_delete is not None:
            patch.setdefault("spec", {})["elasticPolicy"] = {"workersToDelete": decided.new_workers_to_delete}
        if patch:
            self.draft.record.append(
                Patch(
                    API_VERSION,
                    "MPIJob",
                    self.name,
                    patch,
                    resource_version=meta(self.job).get("resourceVersion"),
                )
            )

    def finished(self) -> None:
        # Running is cleared when the job finishes (reference #787).
        if conditions.get_condition(self.status, conditions.RUNNING) is None or conditions.is_true(
            self.status, conditions.RUNNING
        ):
            conditions.set_condition(
                self.status, conditions.RUNNING, False, "MPIJobFinished", "MPIJob finished", self.now
            )
        if not self.status.completion_time:
            self.status.completion_time = self.now
        self.status.replica_statuses = {**self.status.replica_statuses, "Launcher": job_status.launcher_status(self)}
        child_writes.ensure_pod_group(self, wanted=False)
        policy = self.spec.run_policy.clean_pod_policy or CleanPodPolicy.NONE
        for pod in self.workers:
            if is_terminating(pod):
                continue
            if policy is CleanPodPolicy.ALL or (
                policy is CleanPodPolicy.RUNNING and pod_phase(pod) not in FINISHED_PHASES
            ):
                self.delete_pod(pod, f"job finished (cleanPodPolicy {policy.value})")
        # Keep the worker counts true after cleanup (the Ready column of `kubectl get`).
        deleted = {a.name for a in self.draft.delete}
        remaining = [p for p in self.workers if not is_terminating(p) and name_of(p) not in deleted]
        worker_status = self.status.replica_statuses.get("Worker")
        if worker_status is not None:
            worker_status.active = sum(1 for p in remaining if pod_phase(p) == "Running")
            worker_status.ready = sum(1 for p in remaining if pod_ready(p))
        ttl = self.spec.run_policy.ttl_seconds_after_finished
        done = parse_time(self.status.completion_time)
        if ttl is not None and done is not None:
            left = (done - self.snapshot.now).total_seconds() + ttl
            if left <= 0:
                # After the status write (see run): the final status and its Event go out first.
                expired = Emit("Normal", "MPIJobDeleted", f"ttlSecondsAfterFinished ({ttl}s) expired")
                self.draft.finish.append(
                    Delete(
                        API_VERSION,
                        "MPIJob",
                        self.name,
                        uid=uid_of(self.job),
                        propagation="Background",
                        announce=(expired,),
                    )
                )
            else:
                self.draft.wake.append(left)


def plan(snapshot: Snapshot) -> Plan:
    """Everything to do for one MPIJob now, by phase (see `Plan`). Idempotent: a converged job yields no write."""
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
    needed = absences_to_confirm(snapshot, spec)
    if needed:
        # Absence is not deletion: nothing is decided until a live read answered (issue 8, rule 1).
        return Plan(confirm=tuple(ConfirmAbsence(kind, name) for kind, name in needed))
    return _Planner(snapshot, spec).run()


def _started(snapshot: Snapshot) -> bool:
    """Whether the job ever ran or has anything running: then a bad spec is an edit, not a bad job."""
    launcher = snapshot.launcher
    return (
        bool(conditions.read_status(snapshot.job.get("status")).start_time)
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
    new = conditions.dump_status(status)
    if new == old:
        return NOTHING
    new["lastReconcileTime"] = now
    patch = Patch(
        API_VERSION,
        "MPIJob",
        name_of(snapshot.job),
        {"status": merge_patch_to(old, new)},
        resource_version=meta(snapshot.job).get("resourceVersion"),
        subresource="status",
        announce=(Emit("Warning", "ValidationError", message),) if flipped else (),
    )
    return Plan(status=(patch,))


def _invalid(snapshot: Snapshot, errors: list[str]) -> Plan:
    """An invalid job is marked Failed with a message naming the field, and nothing is created."""
    old = copy.deepcopy(snapshot.job.get("status") or {})
    status = conditions.read_status(old)
    now = format_time(snapshot.now)
    message = "; ".join(errors)
    if not status.conditions:
        conditions.set_condition(status, conditions.CREATED, True, "MPIJobCreated", "MPIJob is created.", now)
    flipped = conditions.set_condition(status, conditions.FAILED, True, "InvalidSpec", message, now)
    if status.completion_time is None:
        status.completion_time = now
    patch = status_patch(snapshot.job, old, status, now)
    if patch is None:
        return NOTHING
    # Announced with the status write, like every state change.
    return Plan(status=(replace(patch, announce=(Emit("Warning", "ValidationError", message),) if flipped else ()),))
