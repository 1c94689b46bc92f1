"""plan(snapshot) -> actions: every decision of the operator, with no I/O.

Actions come out in a safe order: decisions are recorded in the API before they are acted on (spec patch,
then leaving annotations, then the ConfigMap that takes workers out of discovery, then deletions), so a
crash at any point leaves a state from which the next reconcile continues the same way.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pydantic import ValidationError

from mpijob.api import constants, rules
from mpijob.api.models import (
    API_VERSION,
    CleanPodPolicy,
    HostDiscovery,
    LauncherCreationPolicy,
    MPIJobSpec,
)
from mpijob.planner import children, discovery, podgroups
from mpijob.planner import status as conditions
from mpijob.planner.actions import NOTHING, ConfirmAbsence, Create, Delete, Emit, Patch, Plan, Write
from mpijob.planner.elastic import plan_elastic
from mpijob.planner.hostfile import discover_hosts_script, hostfile
from mpijob.planner.snapshot import (
    Obj,
    Snapshot,
    annotations_of,
    condition,
    condition_true,
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
from mpijob.planner.workers import FINISHED_PHASES, WorkerPlan, absences_to_confirm, plan_static, workers_of


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
# A worker whose node turns out to be terminating within this long of its creation "landed on a terminating
# node" (a replacement the scheduler put on a node about to go): it counts toward the backoff like a
# failure. Workers that served longer and lose their node (an ordinary spot reclaim) do not.
LANDED_WITHIN_SECONDS = 120.0
# While a Secret named like the job's SSH Secret that the operator did not create blocks the job, the create
# is retried this often (the operator does not watch Secrets, so it is not told when the name frees up).
SECRET_RETRY_SECONDS = 60.0
SLOW_START_CREATES = 16
MAX_CREATES_PER_RECONCILE = 500


def create_budget(existing_workers: int) -> int:
    """How many worker pods one reconcile may create: 16 at first, then about twice what exists."""
    return min(MAX_CREATES_PER_RECONCILE, max(SLOW_START_CREATES, 2 * existing_workers))


# Worker names "<job>-worker-<index>" stay DNS labels (<= 63) for names up to 50 characters.
MAX_WORKER_INDEX = 99_999


@dataclass
class _Draft:
    """The plan being made, phase by phase (see `Plan`); frozen into a Plan at the end."""

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
    wake: list[float] = field(default_factory=list)
    # Objects with our children's names that this job does not own ("Kind name"), for ResourceConflict.
    conflicts: list[str] = field(default_factory=list)
    # The SSH Secret's name is held by a Secret we did not create.
    secret_taken: bool = False

    def freeze(self) -> Plan:
        """The ConfigMap patch that drops hosts is what the launcher reads first; only when it drops none do
        the launcher nudges that drop hosts (the file fallback) go first."""
        urgent = [w for w in self.dropping_hosts if _kind(w) == "ConfigMap"] or self.dropping_hosts
        return Plan(
            leave_discovery=tuple(urgent),
            record=tuple(self.record),
            mark=tuple(self.mark),
            discovery=tuple(w for w in self.discovery if not any(w is u for u in urgent)),
            announce=tuple(self.announce),
            children=tuple(self.children),
            secret=tuple(self.secret),
            status=tuple(self.status),
            delete=tuple(self.delete),
            create=tuple(self.create),
            finish=tuple(self.finish),
            requeue_after=min(self.wake) if self.wake else None,
        )


def _kind(write: Write) -> str:
    return str(write.obj["kind"]) if isinstance(write, Create) else write.kind


class _Planner:
    """One plan of a valid job. Its inputs are read-only (Final); it builds two things: the new status
    (`status`, compared with `old_status` at the end) and the plan by phase (`draft`). The worker decisions
    themselves come from the pure steps of workers.py and elastic.py."""

    def __init__(self, snapshot: Snapshot, spec: MPIJobSpec) -> None:
        self.snapshot: Final = snapshot
        self.spec: Final = spec
        self.job: Final = snapshot.job
        self.name: Final = name_of(snapshot.job)
        self.now: Final = format_time(snapshot.now)
        self.old_status: Final[dict[str, Any]] = copy.deepcopy(snapshot.job.get("status") or {})
        # Pods of a launcher Job we do not own say nothing about this job.
        launcher = snapshot.launcher
        owned = launcher is not None and is_owned_by(launcher, self.job)
        self.launcher_pods: Final = snapshot.launcher_pods if owned else ()
        self.workers: Final = workers_of(snapshot)
        self.status: dict[str, Any] = copy.deepcopy(self.old_status)
        self.draft = _Draft()

    # -- helpers -----------------------------------------------------------------------------------
    def emit(self, type_: str, reason: str, message: str) -> None:
        self.draft.announce.append(Emit(type_, reason, message))

    def condition(self, kind: str, value: bool, reason: str, message: str, event: str | None = "Normal") -> None:
        flipped = conditions.set_condition(self.status, kind, value, reason, message, self.now)
        if flipped and value and event:
            # Announced after the status write succeeds, so a retried reconcile does not repeat it.
            self.draft.status_events.append(Emit(event, reason, message))

    @staticmethod
    def creation(obj: Obj, *, ssh: bool = False, exclusive: bool = False) -> Create:
        """A create, with the Event that announces it (posted only if the object was really created)."""
        kind = obj["kind"]
        made = Emit("Normal", f"SuccessfulCreate{kind}", f"Created {kind} {obj['metadata']['name']}")
        return Create(obj, generate_ssh_keys=ssh, exclusive=exclusive, announce=(made,))

    def create_child(self, obj: Obj) -> None:
        self.draft.children.append(self.creation(obj))

    def delete_pod(self, pod: Obj, why: str) -> None:
        gone = Emit("Normal", "SuccessfulDeletePod", f"Deleted pod {name_of(pod)}: {why}")
        self.draft.delete.append(Delete("v1", "Pod", name_of(pod), uid=uid_of(pod), announce=(gone,)))

    def owned_or_conflict(self, obj: Obj | None, kind: str, name: str) -> bool | None:
        """True: ours; None: absent; False: someone else's (recorded as a conflict, never touched)."""
        if obj is None:
            return None
        if is_owned_by(obj, self.job):
            return True
        self.draft.conflicts.append(f"{kind} {name}")
        return False

    def replacement_backoff(self, decided: WorkerPlan) -> WorkerPlan:
        """No churn: workers that keep failing (or keep landing on a terminating node) are replaced with a
        per-job exponential backoff. The first
        BACKOFF_AFTER - 1 failures are replaced at once; then each new failure waits 10 s, 20 s, ... up to
        5 min after the last failure. The count is forgotten after 10 quiet minutes. Both live in the status,
        so a restart does not reset them."""
        failed_now = sum(1 for leave in decided.to_leave if pod_phase(leave.pod) == "Failed") + sum(
            1 for s in decided.signals if self.landed_on_terminating_node(s.pod)
        )
        raw = self.status.get("recentWorkerFailures")
        count = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= 10**6 else 0
        last = parse_time(self.status.get("lastWorkerFailureTime"))
        if failed_now:
            count += failed_now
            last = self.snapshot.now
            self.status["recentWorkerFailures"] = count
            self.status["lastWorkerFailureTime"] = self.now
        elif (count or raw is not None) and (
            last is None or (self.snapshot.now - last).total_seconds() >= BACKOFF_RESET_SECONDS
        ):
            self.status.pop("recentWorkerFailures", None)
            self.status.pop("lastWorkerFailureTime", None)
            return decided
        if count < BACKOFF_AFTER or not decided.to_create or last is None:
            return decided
        delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(count - BACKOFF_AFTER, 16))
        left = (last - self.snapshot.now).total_seconds() + delay
        if left <= 0:
            return decided
        self.draft.wake.append(left)
        return replace(decided, to_create=())

    def landed_on_terminating_node(self, pod: Obj) -> bool:
        born = parse_time(meta(pod).get("creationTimestamp"))
        return born is not None and 0 <= (self.snapshot.now - born).total_seconds() <= LANDED_WITHIN_SECONDS

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

    def last_worker_index(self) -> int:
        """status.lastWorkerIndex, read strictly: anything but an integer in [0, MAX_WORKER_INDEX] (a status
        writer's typo, a huge number that would make worker names invalid) is ignored; the highest index
        of an existing worker takes its place, and the next status write corrects it."""
        value = self.status.get("lastWorkerIndex")
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_WORKER_INDEX:
            return value
        if value is not None:
            del self.status["lastWorkerIndex"]
            taken = [i for p in self.workers if (i := constants.worker_index(self.name, name_of(p))) is not None]
            if taken:
                self.status["lastWorkerIndex"] = max(taken)
        return -1 if "lastWorkerIndex" not in self.status else int(self.status["lastWorkerIndex"])

    def api_discovery(self) -> bool:
        ep = self.spec.elastic_policy
        return ep is not None and ep.host_discovery is HostDiscovery.API and self.snapshot.config.api_discovery

    # -- the plan ------------------------------------------------------------------------------------
    def run(self) -> Plan:
        if conditions.is_true(self.status, conditions.INVALID_SPEC):
            # A bad edit was fixed: the job goes on from where it was.
            conditions.set_condition(
                self.status, conditions.INVALID_SPEC, False, "SpecFixed", "the spec is valid again", self.now
            )
            self.draft.status_events.append(Emit("Normal", "SpecFixed", "the spec is valid again; resuming"))
        if not self.status.get("conditions"):
            self.condition(
                conditions.CREATED,
                True,
                "MPIJobCreated",
                f"MPIJob {meta(self.job).get('namespace')}/{self.name} is created.",
            )
        if not conditions.is_finished(self.status):
            # Checked first: a job whose launcher already finished gets no new workers or children.
            self.detect_finish()
        if conditions.is_finished(self.status):
            self.finished()
        else:
            self.active()
        self.write_status()
        return self.draft.freeze()

    def active(self) -> None:
        """A job that has not finished: its workers' decisions, then its children, launcher and status. The
        order the writes go out in is Plan.PHASES, whatever the order of the calls here."""
        suspended = self.spec.run_policy.suspend
        self.suspension(suspended)
        self.ensure_service()
        decided = self.decide_workers(suspended)
        self.record_worker_decisions(decided)
        self.mark_leaving(decided)
        listed = self.ensure_config_map(decided)
        self.nudge_launcher(listed)
        self.announce_decisions(decided)
        self.ensure_secret()
        self.ensure_pdb()
        self.ensure_pod_group(wanted=not suspended)
        decided = self.worker_writes(decided, suspended)
        ready, account = self.ensure_discovery_access()
        if ready:
            self.ensure_launcher(decided, account)
        self.worker_status(decided)
        self.conflict_condition()

    def suspension(self, suspended: bool) -> None:
        was_suspended = conditions.is_true(self.status, conditions.SUSPENDED)
        if suspended:
            self.condition(conditions.SUSPENDED, True, "MPIJobSuspended", "MPIJob suspended")
            self.condition(conditions.RUNNING, False, "MPIJobSuspended", "MPIJob suspended", event=None)
        elif was_suspended:
            self.condition(conditions.SUSPENDED, False, "MPIJobResumed", "MPIJob resumed")
            self.draft.status_events.append(Emit("Normal", "MPIJobResumed", "MPIJob resumed"))
            self.status["startTime"] = self.now
        if not suspended and not self.status.get("startTime"):
            self.status["startTime"] = self.now

    def decide_workers(self, suspended: bool) -> WorkerPlan:
        if self.spec.elastic_policy is None:
            return plan_static(self.snapshot, self.spec, suspended=suspended)
        return plan_elastic(
            self.snapshot,
            self.spec,
            suspended=suspended,
            last_index=self.last_worker_index(),
            previous=conditions.read_status(self.old_status),
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
            self.status["lastWorkerIndex"] = max([*decided.to_create, self.last_worker_index()])
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

    def ensure_service(self) -> None:
        desired = children.service(self.job, self.spec)
        current = self.snapshot.service
        owned = self.owned_or_conflict(current, "Service", self.name)
        # Discovery phase, first: the Service makes the host names the ConfigMap lists resolve.
        if owned is None:
            self.draft.discovery.append(self.creation(desired))
        elif owned and current is not None:
            spec = current.get("spec") or {}
            want = desired["spec"]
            if (
                spec.get("selector") != want["selector"]
                or bool(spec.get("publishNotReadyAddresses")) != want["publishNotReadyAddresses"]
            ):
                self.draft.discovery.append(
                    Patch(
                        "v1",
                        "Service",
                        self.name,
                        {
                            "spec": {
                                "selector": _merge_patch_to(spec.get("selector") or {}, want["selector"]),
                                "publishNotReadyAddresses": want["publishNotReadyAddresses"],
                            }
                        },
                    )
                )

    def ensure_config_map(self, decided: WorkerPlan) -> str:
        """The hostfile, discover_hosts.sh and the discovery list; returns the list."""
        domain = self.snapshot.config.cluster_domain
        slots = self.spec.slots_per_worker
        launcher_host = (
            children.worker_host(self.job, constants.launcher_name(self.name), domain)
            if self.spec.run_launcher_as_worker
            else None
        )
        hosts = [children.worker_host(self.job, n, domain) for n in decided.hostfile_names]
        discovered = [children.worker_host(self.job, n, domain) for n in decided.discovery_names]
        name = constants.config_map_name(self.name)
        current = self.snapshot.config_map
        namespace = str(meta(self.job).get("namespace"))
        listed = discovery.desired_payload(
            ((current or {}).get("data") or {}).get(constants.DISCOVERED_HOSTS_KEY) if current is not None else None,
            namespace,
            self.name,
            ([launcher_host] if launcher_host else []) + discovered,
            slots,
            self.now,
        )
        if self.spec.elastic_policy is not None:
            script = discovery.script(namespace, self.name, uid_of(self.job), use_api=self.api_discovery())
        else:
            # Static jobs keep the reference's plain script: their hosts only change while they start.
            script = discover_hosts_script(discovered, slots, launcher_host)
        data = {
            constants.HOSTFILE_KEY: hostfile(hosts, slots, self.spec.mpi_implementation, launcher_host),
            constants.DISCOVER_HOSTS_KEY: script,
            constants.DISCOVERED_HOSTS_KEY: listed,
        }
        owned = self.owned_or_conflict(current, "ConfigMap", name)
        if owned is None:
            self.draft.discovery.append(self.creation(children.config_map(self.job, data)))
        elif owned and current is not None and current.get("data") != data:
            patch = Patch(
                "v1",
                "ConfigMap",
                name,
                # Only the keys that changed (the script rarely does); keys we do not write are nulled: a
                # merge patch keeps what it does not name.
                {"data": _changed_keys(current.get("data") or {}, data)},
                resource_version=meta(current).get("resourceVersion"),
            )
            self.draft.discovery.append(patch)
            if set(discovery.listed_hosts(current.get("data") or {})) - set(discovery.listed_hosts(data)):
                self.draft.dropping_hosts.append(patch)
        self.status["discoveredHosts"] = list(decided.discovery_names)
        return listed

    def nudge_launcher(self, listed: str) -> None:
        """The discovery list in an annotation of each live launcher pod, which a downwardAPI volume projects
        into it: the kubelet syncs a pod as soon as its annotations change, so the launcher's file fallback
        follows within about a second instead of the ConfigMap volume's ~1 min resync. Written only when it
        differs (a steady job writes nothing)."""
        if self.spec.elastic_policy is None:
            return
        for pod in self.launcher_pods:
            if is_terminating(pod) or pod_phase(pod) in FINISHED_PHASES:
                continue
            current = annotations_of(pod).get(constants.ANNOTATION_DISCOVERED_HOSTS)
            if current != listed:
                patch = Patch(
                    "v1",
                    "Pod",
                    name_of(pod),
                    {"metadata": {"annotations": {constants.ANNOTATION_DISCOVERED_HOSTS: listed}}},
                )
                self.draft.discovery.append(patch)
                before = discovery.listed_hosts({constants.DISCOVERED_HOSTS_KEY: current or ""})
                if set(before) - set(discovery.listed_hosts({constants.DISCOVERED_HOSTS_KEY: listed})):
                    self.draft.dropping_hosts.append(patch)

    def ensure_discovery_access(self) -> tuple[bool, str | None]:
        """The launcher's read access to its discovery list: a ServiceAccount (unless the user chose one), a
        Role that can `get` only this job's ConfigMap, and a RoleBinding. Returns whether the launcher may be
        created, and the account it should run as. Objects with these names that this job does not own are
        never used: a foreign ServiceAccount holds the launcher back (it would run as someone else), a foreign
        Role is never bound (our binding would grant whatever it grants)."""
        name = constants.discovery_rbac_name(self.name)
        rbac = "rbac.authorization.k8s.io/v1"
        role, binding = self.snapshot.role, self.snapshot.role_binding
        if not self.api_discovery():
            # Turned off: the grant goes. The ServiceAccount stays: a launcher may be running as it.
            for obj, kind in ((binding, "RoleBinding"), (role, "Role")):
                if obj is not None and is_owned_by(obj, self.job):
                    self.draft.children.append(Delete(rbac, kind, name, uid=uid_of(obj)))
            return True, None
        account = children.user_service_account(self.spec)
        if account is None:
            account = name
            owned_sa = self.owned_or_conflict(self.snapshot.service_account, "ServiceAccount", name)
            if owned_sa is False:
                return False, None
            if owned_sa is None:
                self.create_child(children.discovery_service_account(self.job))
        owned_role = self.owned_or_conflict(role, "Role", name)
        if owned_role is None:
            self.create_child(children.discovery_role(self.job))
        elif owned_role and role is not None and role.get("rules") != children.discovery_rules(self.job):
            self.draft.children.append(Patch(rbac, "Role", name, {"rules": children.discovery_rules(self.job)}))
        owned_binding = self.owned_or_conflict(binding, "RoleBinding", name)
        desired = children.discovery_role_binding(self.job, account)
        if owned_role is False:
            if owned_binding and binding is not None:
                self.draft.children.append(Delete(rbac, "RoleBinding", name, uid=uid_of(binding)))
        elif owned_binding is None:
            self.create_child(desired)
        elif owned_binding and binding is not None:
            if binding.get("roleRef") != desired["roleRef"]:
                # roleRef is immutable: replace the binding (created again by the next reconcile).
                self.draft.children.append(Delete(rbac, "RoleBinding", name, uid=uid_of(binding)))
            elif binding.get("subjects") != desired["subjects"]:
                self.draft.children.append(Patch(rbac, "RoleBinding", name, {"subjects": desired["subjects"]}))
        return True, account

    def ensure_secret(self) -> None:
        """The SSH Secret, without reading Secrets (issue 8, rule 12: no get/list/watch of Secrets): the
        operator creates it and treats AlreadyExists as someone else's Secret (fail closed: pods would
        mount a key pair another party knows). Which Secret is ours follows from the status:
        - `sshSecretUID` set: the uid of the one we created;
        - no `sshSecretUID` and no conditions: a new job: create it (exclusive);
        - no `sshSecretUID` but conditions: the status write that follows a successful create (it comes
          right after it in the same batch) ran but the uid was not recorded yet (a restart), or an operator
          version that did not record it created the Secret: ours, unless that version reported it foreign;
        - `sshSecretUID` empty: a create found the name taken; retried every SECRET_RETRY_SECONDS.
        The only ambiguous case is a crash between a successful create and the status write right after it:
        the next create then finds the name taken, and the job reports ResourceConflict (fail closed)."""
        name = constants.secret_name(self.name)
        recorded = self.old_status.get("sshSecretUID")
        if isinstance(recorded, str) and recorded:
            return
        if ("Secret", name) in self.snapshot.created:
            uid = self.snapshot.created[("Secret", name)]
            self.status["sshSecretUID"] = uid or ""
            if not uid:
                self.draft.secret_taken = True
                self.draft.conflicts.append(f"Secret {name}")
                self.draft.wake.append(SECRET_RETRY_SECONDS)
            return
        earlier = recorded is None and self.old_status.get("conditions")
        if earlier and not _reported_foreign_secret(self.old_status, name):
            return
        # The status write right after the create then says "created" (no sshSecretUID, with conditions),
        # also when retrying after a conflict ("" would otherwise survive a restart before the uid is recorded).
        self.status.pop("sshSecretUID", None)
        self.draft.secret.append(self.creation(children.ssh_secret(self.job), ssh=True, exclusive=True))

    def ensure_pdb(self) -> None:
        ep = self.spec.elastic_policy
        name = constants.pdb_name(self.name)
        current = self.snapshot.pdb
        owned = self.owned_or_conflict(current, "PodDisruptionBudget", name)
        if ep is None:
            if owned and current is not None:
                self.draft.children.append(Delete("policy/v1", "PodDisruptionBudget", name, uid=uid_of(current)))
            return
        if owned is None:
            self.create_child(children.pdb(self.job, ep.min_replicas))
        elif owned and current is not None and (current.get("spec") or {}).get("minAvailable") != ep.min_replicas:
            self.draft.children.append(
                Patch("policy/v1", "PodDisruptionBudget", name, {"spec": {"minAvailable": ep.min_replicas}})
            )

    def ensure_pod_group(self, *, wanted: bool) -> None:
        """The gang scheduler's PodGroup: there while the job runs, gone when suspended or finished."""
        actions, conflict = podgroups.plan_pod_group(
            self.job, self.spec, self.snapshot.pod_group, self.snapshot.config.gang_scheduler, wanted=wanted
        )
        if conflict:
            self.draft.conflicts.append(f"PodGroup {self.name}")
        for action in actions:
            if isinstance(action, Create):
                self.create_child(action.obj)
            else:
                self.draft.children.append(action)

    def ensure_launcher(self, decided: WorkerPlan, account: str | None) -> None:
        spec = self.spec
        name = constants.launcher_name(self.name)
        current = self.snapshot.launcher
        owned = self.owned_or_conflict(current, "Job", name)
        if owned is False:
            return
        if current is None:
            if self.foreign_children():
                return
            ready = len(decided.kept) >= spec.worker_replicas and all(pod_ready(p) for p in decided.kept)
            if spec.launcher_creation_policy is LauncherCreationPolicy.AT_STARTUP or (ready and not decided.to_create):
                # After the workers (which follow the status write), as the reference creates them.
                launcher = children.launcher_job(self.job, spec, discovery_account=account)
                tmpl = launcher["spec"]["template"]
                podgroups.decorate(tmpl["metadata"], tmpl["spec"], self.name, self.snapshot.config.gang_scheduler)
                self.draft.create.append(self.creation(launcher))
            return
        launcher_suspended = bool((current.get("spec") or {}).get("suspend"))
        if spec.run_policy.suspend and not launcher_suspended:
            self.draft.children.append(Patch("batch/v1", "Job", name, {"spec": {"suspend": True}}))
        elif not spec.run_policy.suspend and launcher_suspended:
            # Resume as Kueue expects: clear startTime (so the template may change), sync the scheduling
            # directives Kueue set on the MPIJob while suspended, then unsuspend.
            if (current.get("status") or {}).get("startTime"):
                self.draft.children.append(
                    Patch("batch/v1", "Job", name, {"status": {"startTime": None}}, subresource="status")
                )
            self.draft.children.append(Patch("batch/v1", "Job", name, self.resume_patch(current)))

    def resume_patch(self, current: Obj) -> Obj:
        want = children.launcher_scheduling_directives(self.spec)
        tmpl = (current.get("spec") or {}).get("template") or {}
        cur_meta = tmpl.get("metadata") or {}
        default = children.default_labels(self.name, constants.ROLE_LAUNCHER)

        def replace_map(old: dict[str, Any] | None, new: dict[str, Any] | None, keep: dict[str, str]) -> dict[str, Any]:
            merged: dict[str, Any] = {k: None for k in (old or {}) if k not in keep}
            merged.update(new or {})
            merged.update(keep)
            return merged

        # Our labels, and those the Job's selector matches (the API server generates the selector and its
        # template labels, batch.kubernetes.io/controller-uid etc.; dropping them makes the patch invalid).
        selector = ((current.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        keep_labels = {
            k: v
            for k, v in (cur_meta.get("labels") or {}).items()
            if k in default or k == constants.LABEL_REPLICA_INDEX or k in selector
        }
        gang = self.snapshot.config.gang_scheduler
        keep_labels.update(podgroups.group_labels(self.name, gang))
        want["annotations"] = {**(want["annotations"] or {}), **podgroups.group_annotations(self.name, gang)}
        return {
            "spec": {
                "suspend": False,
                "template": {
                    "metadata": {
                        "labels": replace_map(cur_meta.get("labels"), want["labels"], keep_labels),
                        "annotations": replace_map(cur_meta.get("annotations"), want["annotations"], {}),
                    },
                    "spec": {
                        # A map: keys of an earlier admission (e.g. another Kueue flavor) must go.
                        "nodeSelector": replace_map(
                            ((tmpl.get("spec") or {}).get("nodeSelector")), want["nodeSelector"], {}
                        ),
                        "tolerations": want["tolerations"],
                        "schedulingGates": want["schedulingGates"],
                    },
                },
            }
        }

    def worker_status(self, decided: WorkerPlan) -> None:
        workers = self.workers
        live = [p for p in workers if not is_terminating(p)]
        running = [p for p in decided.kept if pod_phase(p) == "Running"]
        worker_status: dict[str, Any] = {
            "active": len(running),
            "ready": sum(1 for p in decided.kept if pod_ready(p)),
            "selector": children.worker_selector(self.name),
        }
        failed = sum(1 for p in live if pod_phase(p) == "Failed")
        succeeded = sum(1 for p in live if pod_phase(p) == "Succeeded")
        if failed:
            worker_status["failed"] = failed
        if succeeded:
            worker_status["succeeded"] = succeeded
        statuses = self.status.setdefault("replicaStatuses", {})
        statuses["Worker"] = worker_status
        statuses["Launcher"] = self.launcher_status()
        self.status["leavingWorkers"] = sorted(decided.leaving)

        if self.spec.run_policy.suspend:
            return
        launcher_running = any(pod_phase(p) == "Running" for p in self.launcher_pods)
        ep = self.spec.elastic_policy
        enough = (
            len(running) >= ep.min_replicas
            if ep
            else len(running) == self.spec.worker_replicas and not decided.to_create
        )
        if ep is not None:
            self.floor_condition(len(running), ep.min_replicas)
        if launcher_running and enough:
            self.condition(
                conditions.RUNNING,
                True,
                "MPIJobRunning",
                f"MPIJob {meta(self.job).get('namespace')}/{self.name} is running.",
            )
        elif conditions.is_true(self.status, conditions.RUNNING):
            why = "launcher is not running" if not launcher_running else "not enough workers are running"
            self.condition(conditions.RUNNING, False, "MPIJobNotRunning", why, event=None)

    def floor_condition(self, running: int, floor: int) -> None:
        """Says when a job that was running cannot hold its floor (workers lost faster than replaced, or
        replacements that cannot be placed), and when it holds it again."""
        below = running < floor
        if below and (
            conditions.is_true(self.old_status, conditions.RUNNING)
            or conditions.is_true(self.status, conditions.BELOW_MIN_REPLICAS)
        ):
            message = f"{running} of minReplicas {floor} workers are running"
            # No Event: a worker lost at the floor dips below it until its replacement runs; that is normal.
            self.condition(conditions.BELOW_MIN_REPLICAS, True, "BelowMinReplicas", message, event=None)
        elif not below and conditions.is_true(self.status, conditions.BELOW_MIN_REPLICAS):
            self.condition(
                conditions.BELOW_MIN_REPLICAS, False, "MinReplicasRunning", f"{running} workers are running", event=None
            )

    def launcher_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        active = sum(1 for p in self.launcher_pods if pod_phase(p) == "Running")
        if active:
            out["active"] = active
        job_status = (self.snapshot.launcher or {}).get("status") or {}
        for key in ("failed", "succeeded"):
            if job_status.get(key):
                out[key] = job_status[key]
        return out

    def conflict_condition(self) -> None:
        if self.draft.conflicts:
            message = (
                f"{'; '.join(sorted(set(self.draft.conflicts)))}: exists and is not owned by this MPIJob; "
                "it is left untouched. Delete or rename it."
                + (
                    " No worker or launcher is created until then (they would use its configuration)."
                    if self.foreign_children()
                    else ""
                )
            )
            if conditions.set_condition(self.status, conditions.RESOURCE_CONFLICT, True, "NotOwned", message, self.now):
                self.draft.status_events.append(Emit("Warning", "ResourceConflict", message))
        elif conditions.get_condition(self.status, conditions.RESOURCE_CONFLICT) is not None:
            conditions.set_condition(
                self.status, conditions.RESOURCE_CONFLICT, False, "Resolved", "no conflicting objects", self.now
            )

    def detect_finish(self) -> None:
        launcher = self.snapshot.launcher
        if launcher is not None and is_owned_by(launcher, self.job):
            if condition_true(launcher, "Complete"):
                done = (launcher.get("status") or {}).get("completionTime") or self.now
                self.status["completionTime"] = done
                self.condition(
                    conditions.SUCCEEDED,
                    True,
                    "MPIJobSucceeded",
                    f"MPIJob {meta(self.job).get('namespace')}/{self.name} successfully completed.",
                )
                return
            if condition_true(launcher, "Failed"):
                cond = condition(launcher, "Failed") or {}
                reason = str(cond.get("reason") or "MPIJobFailed")
                message = str(cond.get("message") or "launcher Job failed")
                failed_pods = [p for p in self.launcher_pods if pod_phase(p) == "Failed"]
                if reason == "BackoffLimitExceeded" and failed_pods:
                    last = max(failed_pods, key=lambda p: str(meta(p).get("creationTimestamp", "")))
                    pst = last.get("status") or {}
                    reason = f"{reason}/{pst.get('reason') or 'Error'}"
                    if pst.get("message"):
                        message = f"{message}: {pst['message']}"
                self.status["completionTime"] = self.now
                self.condition(conditions.FAILED, True, reason, message, event="Warning")
                return
        if self.spec.elastic_policy is None:
            evicted = [
                p
                for p in self.workers
                if pod_phase(p) == "Failed" and (p.get("status") or {}).get("reason") == "Evicted"
            ]
            if evicted:
                total = len(self.workers)
                self.status["completionTime"] = self.now
                self.condition(
                    conditions.FAILED,
                    True,
                    "MPIJobEvicted",
                    f"{len(evicted)}/{total} workers are evicted",
                    event="Warning",
                )

    def finished(self) -> None:
        # Running is cleared when the job finishes (reference #787).
        if conditions.get_condition(self.status, conditions.RUNNING) is None or conditions.is_true(
            self.status, conditions.RUNNING
        ):
            conditions.set_condition(
                self.status, conditions.RUNNING, False, "MPIJobFinished", "MPIJob finished", self.now
            )
        if not self.status.get("completionTime"):
            self.status["completionTime"] = self.now
        self.status.setdefault("replicaStatuses", {})["Launcher"] = self.launcher_status()
        self.ensure_pod_group(wanted=False)
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
        worker_status = self.status["replicaStatuses"].get("Worker")
        if worker_status is not None:
            worker_status["active"] = sum(1 for p in remaining if pod_phase(p) == "Running")
            worker_status["ready"] = sum(1 for p in remaining if pod_ready(p))
        ttl = self.spec.run_policy.ttl_seconds_after_finished
        done = parse_time(self.status.get("completionTime"))
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

    def write_status(self) -> None:
        self.status.setdefault("replicaStatuses", {})
        patch = _status_patch(self.job, self.old_status, self.status, self.now)
        if patch is not None:
            # Announced with the status write, so a retried reconcile does not repeat them.
            self.draft.status.append(replace(patch, announce=tuple(self.draft.status_events)))


def _reported_foreign_secret(status: dict[str, Any], secret: str) -> bool:
    """An operator version that watched Secrets said this job's Secret name was taken by someone else."""
    cond = conditions.get_condition(status, conditions.RESOURCE_CONFLICT) or {}
    return cond.get("status") == "True" and f"Secret {secret}" in str(cond.get("message") or "")


def _status_patch(job: Obj, old: dict[str, Any], new: dict[str, Any], now: str) -> Patch | None:
    """The status write, only when the status changed (a steady job writes nothing), optimistic on the
    job's resourceVersion. Sets `state` (and `lastReconcileTime` when writing) on `new`."""
    new["state"] = conditions.state(new)
    if new == old:
        return None
    new["lastReconcileTime"] = now
    return Patch(
        API_VERSION,
        "MPIJob",
        name_of(job),
        {"status": _merge_patch_to(old, new)},
        resource_version=meta(job).get("resourceVersion"),
        subresource="status",
    )


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of a flat map from `old` to `new` that names only what differs."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    patch.update({key: value for key, value in new.items() if old.get(key) != value})
    return patch


def _merge_patch_to(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new`, with a null for every key of `old` it lacks: a JSON merge patch keeps keys it does not name, so
    a count that dropped to zero (omitted) would otherwise stay behind and the status would never converge."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        patch[key] = _merge_patch_to(before, value) if isinstance(before, dict) and isinstance(value, dict) else value
    return patch


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
    status = snapshot.job.get("status") or {}
    launcher = snapshot.launcher
    return (
        bool(status.get("startTime"))
        or bool(snapshot.owned_pods)
        or (launcher is not None and is_owned_by(launcher, snapshot.job))
    )


def _invalid_edit(snapshot: Snapshot, errors: list[str]) -> Plan:
    """A started job whose spec became invalid: said in a condition and a Warning naming the field, and
    nothing else. It is neither finished nor cleaned up (a typo must not end a week of training); its pods
    are left alone; fixing the spec resumes it where it was."""
    old = copy.deepcopy(snapshot.job.get("status") or {})
    status = copy.deepcopy(old)
    now = format_time(snapshot.now)
    message = "; ".join(errors) + "; the job is left as it was until the spec is fixed"
    flipped = conditions.set_condition(status, conditions.INVALID_SPEC, True, "InvalidSpecEdit", message, now)
    # Only the condition changes: `state` and everything else keep what the last valid plan wrote.
    status["state"] = old.get("state", conditions.state(old))
    if status == old:
        return NOTHING
    status["lastReconcileTime"] = now
    patch = Patch(
        API_VERSION,
        "MPIJob",
        name_of(snapshot.job),
        {"status": _merge_patch_to(old, status)},
        resource_version=meta(snapshot.job).get("resourceVersion"),
        subresource="status",
        announce=(Emit("Warning", "ValidationError", message),) if flipped else (),
    )
    return Plan(status=(patch,))


def _invalid(snapshot: Snapshot, errors: list[str]) -> Plan:
    """An invalid job is marked Failed with a message naming the field, and nothing is created."""
    old = copy.deepcopy(snapshot.job.get("status") or {})
    status = copy.deepcopy(old)
    now = format_time(snapshot.now)
    message = "; ".join(errors)
    if not status.get("conditions"):
        conditions.set_condition(status, conditions.CREATED, True, "MPIJobCreated", "MPIJob is created.", now)
    flipped = conditions.set_condition(status, conditions.FAILED, True, "InvalidSpec", message, now)
    status.setdefault("completionTime", now)
    patch = _status_patch(snapshot.job, old, status, now)
    if patch is None:
        return NOTHING
    # Announced with the status write, like every state change.
    return Plan(status=(replace(patch, announce=(Emit("Warning", "ValidationError", message),) if flipped else ()),))
