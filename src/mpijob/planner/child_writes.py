"""The job's objects besides its workers: Service, ConfigMap (hostfile, script, discovery list) and the launcher
nudge, the SSH Secret, PodDisruptionBudget, PodGroup, the launcher's discovery access, the launcher Job.

Each `ensure_*` takes the plan's PlanContext, compares one object with what it should be and adds the write
that closes the gap to its draft (none for a steady job); an object with the name that this job does not own
is reported, never touched."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mpijob.api import constants
from mpijob.api.models import JobStatus, LauncherCreationPolicy
from mpijob.api.objects import FINISHED_PHASES
from mpijob.planner import children, discovery, podgroups, restart
from mpijob.planner import status as conditions
from mpijob.planner.actions import Create, Delete, Emit, Patch
from mpijob.planner.draft import PlanContext, changed_keys, merge_patch_to
from mpijob.planner.hostfile import discover_hosts_script, hostfile
from mpijob.planner.snapshot import (
    Obj,
    annotations_of,
    is_owned_by,
    is_terminating,
    meta,
    name_of,
    pod_phase,
    pod_ready,
    resource_version,
    uid_of,
)
from mpijob.planner.workers import WorkerPlan

# While a Secret named like the job's SSH Secret that the operator did not create blocks the job, the create
# is retried this often (the operator does not watch Secrets, so it is not told when the name frees up).
SECRET_RETRY_SECONDS = 60.0


def ensure_service(ctx: PlanContext) -> None:
    desired = children.service(ctx.job, ctx.spec)
    current = ctx.snapshot.service
    owned = ctx.owned_or_conflict(current, "Service", ctx.name)
    # Discovery phase, first: the Service makes the host names the ConfigMap lists resolve.
    if owned is None:
        ctx.draft.discovery.append(ctx.creation(desired))
    elif owned and current is not None:
        spec = current.get("spec") or {}
        want = desired["spec"]
        if (
            spec.get("selector") != want["selector"]
            or bool(spec.get("publishNotReadyAddresses")) != want["publishNotReadyAddresses"]
        ):
            ctx.draft.discovery.append(
                Patch(
                    "v1",
                    "Service",
                    ctx.name,
                    {
                        "spec": {
                            "selector": merge_patch_to(spec.get("selector") or {}, want["selector"]),
                            "publishNotReadyAddresses": want["publishNotReadyAddresses"],
                        }
                    },
                    resource_version=resource_version(current),
                )
            )


def _addresses(ctx: PlanContext, names: tuple[str, ...], hosts: list[str]) -> dict[str, str]:
    """host -> pod IP of the listed workers, for the launcher's DNS check (discovery.py)."""
    ips = {name_of(p): (p.get("status") or {}).get("podIP") for p in ctx.snapshot.owned_pods}
    return {host: str(ips[n]) for n, host in zip(names, hosts, strict=True) if ips.get(n)}


def ensure_config_map(ctx: PlanContext, decided: WorkerPlan) -> str:
    """The hostfile, discover_hosts.sh and the discovery list; returns the list."""
    domain = ctx.snapshot.config.cluster_domain
    slots = ctx.spec.slots_per_worker
    launcher_host = (
        children.worker_host(ctx.job, constants.launcher_name(ctx.name), domain)
        if ctx.spec.run_launcher_as_worker
        else None
    )
    hosts = [children.worker_host(ctx.job, n, domain) for n in decided.hostfile_names]
    discovered = [children.worker_host(ctx.job, n, domain) for n in decided.discovery_names]
    name = constants.config_map_name(ctx.name)
    current = ctx.snapshot.config_map
    namespace = str(meta(ctx.job).get("namespace"))
    listed = discovery.desired_payload(
        ((current or {}).get("data") or {}).get(constants.DISCOVERED_HOSTS_KEY) if current is not None else None,
        namespace,
        ctx.name,
        ([launcher_host] if launcher_host else []) + discovered,
        slots,
        ctx.now,
        _addresses(ctx, decided.discovery_names, discovered),
    )
    if ctx.spec.elastic_policy is not None:
        script = discovery.script(namespace, ctx.name, uid_of(ctx.job), use_api=ctx.api_discovery())
    else:
        # Static jobs keep the reference's plain script: their hosts only change while they start.
        script = discover_hosts_script(discovered, slots, launcher_host)
    data = {
        constants.HOSTFILE_KEY: hostfile(hosts, slots, ctx.spec.mpi_implementation, launcher_host),
        constants.DISCOVER_HOSTS_KEY: script,
        constants.DISCOVERED_HOSTS_KEY: listed,
    }
    if restart.applies(ctx.spec.elastic_policy):
        data[constants.RUN_SCRIPT_KEY] = restart.RUN_SCRIPT
    owned = ctx.owned_or_conflict(current, "ConfigMap", name)
    if owned is None:
        ctx.draft.discovery.append(ctx.creation(children.config_map(ctx.job, data)))
    elif owned and current is not None and current.get("data") != data:
        patch = Patch(
            "v1",
            "ConfigMap",
            name,
            # Only the keys that changed (the script rarely does); keys we do not write are nulled: a
            # merge patch keeps what it does not name.
            {"data": changed_keys(current.get("data") or {}, data)},
            resource_version=resource_version(current),
        )
        ctx.draft.discovery.append(patch)
        if _drops_hosts(discovery.listed_hosts(current.get("data") or {}), listed):
            ctx.draft.dropping_hosts.append(patch)
    ctx.draft.new_status.discovered_hosts = list(decided.discovery_names)
    if restart.applies(ctx.spec.elastic_policy):
        _note_restart(ctx, decided)
    return listed


def _note_restart(ctx: PlanContext, decided: WorkerPlan) -> None:
    """Restart mode: a change of the list while the launcher runs restarts the MPI run (restart.py). Read
    against the last status write's list, so a pass cut short after the discovery writes (urgent first)
    still counts it at the status write that follows."""
    running = any(pod_phase(p) == "Running" and not is_terminating(p) for p in ctx.launcher_pods)
    previous = ctx.snapshot.last_status.status
    restarts, event = restart.note_restart(
        previous, previous.discovered_hosts, decided.discovery_names, running, ctx.now
    )
    ctx.draft.new_status.restarts = restarts
    if event is not None:
        ctx.draft.status_events.append(event)


def nudge_launcher(ctx: PlanContext, listed: str, leaving: str | None = None) -> None:
    """The discovery list in an annotation of each live launcher pod, which a downwardAPI volume projects
    into it: the kubelet syncs a pod as soon as its annotations change, so the launcher's file fallback
    follows within about a second instead of the ConfigMap volume's ~1 min resync. Beside it, the leaving
    workers and their deadlines (`worker_writes.launcher_leaving`; None removes it), in the same write.
    Written only when either differs (a steady job writes nothing). A nudge that drops hosts is urgent
    (`Draft._urgent` says when it goes first, and what goes with it)."""
    if ctx.spec.elastic_policy is None:
        return
    for pod in ctx.launcher_pods:
        if is_terminating(pod) or pod_phase(pod) in FINISHED_PHASES:
            continue
        current = annotations_of(pod).get(constants.ANNOTATION_DISCOVERED_HOSTS)
        changes: dict[str, str | None] = {}
        if current != listed:
            changes[constants.ANNOTATION_DISCOVERED_HOSTS] = listed
        if annotations_of(pod).get(constants.ANNOTATION_LEAVING_WORKERS) != leaving:
            changes[constants.ANNOTATION_LEAVING_WORKERS] = leaving
        if changes:
            patch = Patch(
                "v1",
                "Pod",
                name_of(pod),
                {"metadata": {"annotations": changes}},
                resource_version=resource_version(pod),
            )
            ctx.draft.discovery.append(patch)
            # No annotation yet: nothing was projected, so nothing is dropped.
            before = [] if current is None else discovery.listed_hosts({constants.DISCOVERED_HOSTS_KEY: current})
            if _drops_hosts(before, listed):
                ctx.draft.dropping_hosts.append(patch)


def ensure_discovery_access(ctx: PlanContext) -> tuple[bool, str | None]:
    """The launcher's read access to its discovery list: a ServiceAccount (unless the user chose one), a
    Role that can `get` only this job's ConfigMap, and a RoleBinding. Returns whether the launcher may be
    created, and the account it should run as. Objects with these names that this job does not own are
    never used: a foreign ServiceAccount holds the launcher back (it would run as someone else), a foreign
    Role is never bound (our binding would grant whatever it grants)."""
    name = constants.discovery_rbac_name(ctx.name)
    rbac = "rbac.authorization.k8s.io/v1"
    role, binding = ctx.snapshot.role, ctx.snapshot.role_binding
    if not ctx.api_discovery():
        # Turned off: the grant goes. The ServiceAccount stays: a launcher may be running as it.
        for obj, kind in ((binding, "RoleBinding"), (role, "Role")):
            if obj is not None and is_owned_by(obj, ctx.job):
                ctx.draft.children.append(Delete(rbac, kind, name, uid=uid_of(obj)))
        return True, None
    account = children.user_service_account(ctx.spec)
    if account is None:
        account = name
        owned_sa = ctx.owned_or_conflict(ctx.snapshot.service_account, "ServiceAccount", name)
        if owned_sa is False:
            return False, None
        if owned_sa is None:
            ctx.create_child(children.discovery_service_account(ctx.job))
    owned_role = ctx.owned_or_conflict(role, "Role", name)
    if owned_role is None:
        # Settle: until the Role and binding exist discover_hosts.sh reads the projected files (a 403 is
        # not a usable answer), so the launcher waits only for its ServiceAccount.
        ctx.create_child(children.discovery_role(ctx.job), settle=True)
    elif owned_role and role is not None and role.get("rules") != children.discovery_rules(ctx.job):
        rules = children.discovery_rules(ctx.job)
        ctx.draft.children.append(Patch(rbac, "Role", name, {"rules": rules}, resource_version=resource_version(role)))
    owned_binding = ctx.owned_or_conflict(binding, "RoleBinding", name)
    desired = children.discovery_role_binding(ctx.job, account)
    if owned_role is False:
        if owned_binding and binding is not None:
            ctx.draft.children.append(Delete(rbac, "RoleBinding", name, uid=uid_of(binding)))
    elif owned_binding is None:
        ctx.create_child(desired, settle=True)
    elif owned_binding and binding is not None:
        if binding.get("roleRef") != desired["roleRef"]:
            # roleRef is immutable: replace the binding (created again by the next reconcile).
            ctx.draft.children.append(Delete(rbac, "RoleBinding", name, uid=uid_of(binding)))
        elif binding.get("subjects") != desired["subjects"]:
            subjects = {"subjects": desired["subjects"]}
            ctx.draft.children.append(
                Patch(rbac, "RoleBinding", name, subjects, resource_version=resource_version(binding))
            )
    return True, account


def ensure_secret(ctx: PlanContext) -> None:
    """The SSH Secret, without reading Secrets (issue 8, rule 12: no get/list/watch of Secrets): the
    operator creates it and treats AlreadyExists as someone else's Secret (fail closed: pods would
    mount a key pair another party knows). Which Secret is ours follows from the status:
    - `sshSecretUID` set: the uid of the one we created;
    - no `sshSecretUID` and no conditions: a new job: create it (exclusive);
    - no `sshSecretUID` but conditions: an operator version that did not record the uid (or recorded it
      only in a later status write, before it went into the one right after the create) created the
      Secret: ours, unless that version reported it foreign;
    - `sshSecretUID` empty: a create found the name taken; retried every SECRET_RETRY_SECONDS.
    The only ambiguous case is a crash between a successful create and the status write right after it:
    the next create then finds the name taken, and the job reports ResourceConflict (fail closed)."""
    name = constants.secret_name(ctx.name)
    recorded = ctx.previous.status.ssh_secret_uid
    if recorded:
        return
    if ("Secret", name) in ctx.snapshot.created:
        uid = ctx.snapshot.created[("Secret", name)]
        ctx.draft.new_status.ssh_secret_uid = uid or ""
        if not uid:
            ctx.draft.secret_taken = True
            ctx.draft.conflicts.append(f"Secret {name}")
            ctx.draft.requeue_after.append(SECRET_RETRY_SECONDS)
        return
    # Present but not a string (a hand edit) is not "never recorded": the Secret is created again.
    never_recorded = recorded is None and "sshSecretUID" not in ctx.previous.invalid
    earlier = never_recorded and ctx.previous.status.conditions
    if earlier and not _reported_foreign_secret(ctx.previous.status, name):
        return
    # The status write right after the create then says "created" (no sshSecretUID, with conditions),
    # also when retrying after a conflict ("" would otherwise survive a restart before the uid is recorded).
    ctx.draft.new_status.ssh_secret_uid = None
    # The status write right after it records the new Secret's uid (filled in by the executor, which alone
    # learns it), so no second status write follows only for that.
    create = ctx.creation(children.ssh_secret(ctx.job), ssh=True, exclusive=True)
    announce = (*create.announce, *_shared_key_warning(ctx))
    ctx.draft.secret.append(replace(create, uid_into_status="sshSecretUID", announce=announce))


def _shared_key_warning(ctx: PlanContext) -> tuple[Emit, ...]:
    """Said once, with the Secret's creation: the roles whose pods get the private key 0644 (as the
    reference mounts it) and the field that would let it be 0600."""
    roles = children.shared_key_roles(ctx.spec)
    if not roles:
        return ()
    fields = " and ".join(f"spec.mpiReplicaSpecs.{r}.template.spec.securityContext.fsGroup" for r in roles)
    message = (
        f"The SSH private key is mounted 0644 at {ctx.spec.ssh_auth_mount_path} (readable by every user of "
        f"the container, as the reference operator mounts it): {fields} is not set and the container may run "
        "as a non-root user, who could not read a 0600 root-owned key. Set it to the user's group to have "
        "the key mounted 0600."
    )
    return (Emit("Warning", "SSHKeyNotPrivate", message),)


def ensure_pdb(ctx: PlanContext) -> None:
    ep = ctx.spec.elastic_policy
    name = constants.pdb_name(ctx.name)
    current = ctx.snapshot.pdb
    owned = ctx.owned_or_conflict(current, "PodDisruptionBudget", name)
    if ep is None or not ctx.snapshot.config.disruption_budgets:
        if owned and current is not None:
            ctx.draft.children.append(Delete("policy/v1", "PodDisruptionBudget", name, uid=uid_of(current)))
        return
    if owned is None:
        # Settle: it guards a running job against voluntary evictions; the pods do not wait for it.
        ctx.create_child(children.pdb(ctx.job, ep.min_replicas), settle=True)
    elif owned and current is not None and (current.get("spec") or {}).get("minAvailable") != ep.min_replicas:
        ctx.draft.children.append(
            Patch(
                "policy/v1",
                "PodDisruptionBudget",
                name,
                {"spec": {"minAvailable": ep.min_replicas}},
                resource_version=resource_version(current),
            )
        )


def ensure_pod_group(ctx: PlanContext, *, wanted: bool) -> None:
    """The gang scheduler's PodGroup: there while the job runs, gone when suspended or finished."""
    actions, conflict = podgroups.plan_pod_group(
        ctx.job, ctx.spec, ctx.snapshot.pod_group, ctx.snapshot.config.gang_scheduler, wanted=wanted
    )
    if conflict:
        ctx.draft.conflicts.append(f"PodGroup {ctx.name}")
    for action in actions:
        if isinstance(action, Create):
            ctx.create_child(action.obj)
        else:
            ctx.draft.children.append(action)


def ensure_launcher(ctx: PlanContext, decided: WorkerPlan, account: str | None) -> None:
    spec = ctx.spec
    name = constants.launcher_name(ctx.name)
    current = ctx.snapshot.launcher
    owned = ctx.owned_or_conflict(current, "Job", name)
    if owned is False:
        return
    if current is None:
        if ctx.foreign_children():
            return
        ready = len(decided.kept) >= spec.worker_replicas and all(pod_ready(p) for p in decided.kept)
        if spec.launcher_creation_policy is LauncherCreationPolicy.AT_STARTUP or (ready and not decided.to_create):
            # After the workers (which follow the status write), as the reference creates them.
            launcher = children.launcher_job(ctx.job, spec, discovery_account=account)
            tmpl = launcher["spec"]["template"]
            podgroups.decorate(tmpl["metadata"], tmpl["spec"], ctx.name, ctx.snapshot.config.gang_scheduler)
            ctx.draft.create.append(ctx.creation(launcher))
        return
    launcher_suspended = bool((current.get("spec") or {}).get("suspend"))
    version = resource_version(current)
    if spec.run_policy.suspend and not launcher_suspended:
        ctx.draft.children.append(Patch("batch/v1", "Job", name, {"spec": {"suspend": True}}, resource_version=version))
    elif not spec.run_policy.suspend and launcher_suspended:
        # Resume as Kueue expects: clear startTime (so the template may change), sync the scheduling
        # directives Kueue set on the MPIJob while suspended, then unsuspend.
        if (current.get("status") or {}).get("startTime"):
            # (The executor carries the version this write makes over to the next write to the Job.)
            ctx.draft.children.append(
                Patch(
                    "batch/v1",
                    "Job",
                    name,
                    {"status": {"startTime": None}},
                    resource_version=version,
                    subresource="status",
                )
            )
        ctx.draft.children.append(Patch("batch/v1", "Job", name, resume_patch(ctx, current), resource_version=version))


def resume_patch(ctx: PlanContext, current: Obj) -> Obj:
    want = children.launcher_scheduling_directives(ctx.spec)
    tmpl = (current.get("spec") or {}).get("template") or {}
    cur_meta = tmpl.get("metadata") or {}
    default = children.default_labels(ctx.name, constants.ROLE_LAUNCHER)

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
    gang = ctx.snapshot.config.gang_scheduler
    keep_labels.update(podgroups.group_labels(ctx.name, gang))
    want["annotations"] = {**(want["annotations"] or {}), **podgroups.group_annotations(ctx.name, gang)}
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


def _drops_hosts(before: list[str] | None, listed: str) -> bool:
    """Whether replacing a discovery list with `listed` drops a host; an unknown listing (None) may."""
    after = discovery.listed_hosts({constants.DISCOVERED_HOSTS_KEY: listed}) or []
    return before is None or bool(set(before) - set(after))


def _reported_foreign_secret(status: JobStatus, secret: str) -> bool:
    """An operator version that watched Secrets said this job's Secret name was taken by someone else."""
    cond = conditions.get_condition(status, conditions.RESOURCE_CONFLICT)
    return cond is not None and cond.status == "True" and f"Secret {secret}" in (cond.message or "")
