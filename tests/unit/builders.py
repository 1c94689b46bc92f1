"""Small builders for planner tests: MPIJobs, pods, nodes and children as plain Kubernetes dicts, plus helpers
to pick actions out of a plan.

Pods and children are written by hand here (not with `mpijob.planner.children`) so the tests do not borrow
the code under test to describe the world.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from mpijob.api import constants as c
from mpijob.api.objects import get_condition, is_true
from mpijob.planner import discovery
from mpijob.planner.actions import Action, Create, Delete, Emit, Patch, RequeueAfter
from mpijob.planner.snapshot import Obj, OperatorConfig, Snapshot, format_time

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NS = "team-a"
JOB = "pi"
JOB_UID = "uid-pi"
API = "kubeflow.org/v2beta1"
SPOT_TAINT = "aws-node-termination-handler/spot-itn"


def at(seconds: float) -> datetime:
    """NOW plus some seconds."""
    return NOW + timedelta(seconds=seconds)


def ts(seconds: float = 0) -> str:
    return format_time(at(seconds))


# -- the MPIJob ------------------------------------------------------------------------------------------


def template(image: str = "mpioperator/mpi-pi:openmpi", **pod_spec: Any) -> Obj:
    return {"spec": {"containers": [{"name": "mpi", "image": image}], **pod_spec}}


def elastic(
    min_replicas: int = 1,
    max_replicas: int | None = None,
    *,
    workers_to_delete: Sequence[str] = (),
    node_termination_policy: str | None = None,
    grace: int | None = None,
    index_policy: str | None = None,
    regrow: Obj | None = None,
) -> Obj:
    policy: Obj = {"minReplicas": min_replicas}
    if regrow is not None:
        policy["regrow"] = dict(regrow)
    if max_replicas is not None:
        policy["maxReplicas"] = max_replicas
    if workers_to_delete:
        policy["workersToDelete"] = list(workers_to_delete)
    if node_termination_policy is not None:
        policy["nodeTerminationPolicy"] = node_termination_policy
    if grace is not None:
        policy["scaleInGracePeriodSeconds"] = grace
    if index_policy is not None:
        policy["indexPolicy"] = index_policy
    return policy


# For tests about shrinking alone: regrow (on by default) would grow the job back wherever the test's world
# places pods; regrow has its own tests (test_elastic_regrow.py).
NO_REGROW: Obj = {"enabled": False}


def mpijob(
    name: str = JOB,
    *,
    workers: int | None = 2,
    implementation: str | None = None,
    slots: int | None = None,
    elastic_policy: Obj | None = None,
    run_policy: Obj | None = None,
    launcher_as_worker: bool = False,
    launcher_creation_policy: str | None = None,
    launcher: Obj | None = None,
    worker: Obj | None = None,
    status: Obj | None = None,
    namespace: str = NS,
    uid: str | None = None,
    resource_version: str = "100",
) -> Obj:
    """An MPIJob as the API server returns it. `launcher`/`worker` override the replica specs wholesale."""
    specs: Obj = {
        "Launcher": launcher if launcher is not None else {"replicas": 1, "template": template()},
    }
    if worker is not None:
        specs["Worker"] = worker
    elif workers is not None:
        specs["Worker"] = {"replicas": workers, "template": template()}
    spec: Obj = {"mpiReplicaSpecs": specs}
    if implementation is not None:
        spec["mpiImplementation"] = implementation
    if slots is not None:
        spec["slotsPerWorker"] = slots
    if elastic_policy is not None:
        spec["elasticPolicy"] = elastic_policy
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    if launcher_as_worker:
        spec["runLauncherAsWorker"] = True
    if launcher_creation_policy is not None:
        spec["launcherCreationPolicy"] = launcher_creation_policy
    job: Obj = {
        "apiVersion": API,
        "kind": "MPIJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or (JOB_UID if name == JOB else f"uid-{name}"),
            "resourceVersion": resource_version,
            "creationTimestamp": ts(-3600),
        },
        "spec": spec,
    }
    if status is not None:
        job["status"] = status
    return job


def with_spec(job: Obj, **changes: Any) -> Obj:
    """A copy of the job with top-level spec fields replaced (camelCase keys)."""
    out = copy.deepcopy(job)
    out["spec"].update(changes)
    return out


def set_replicas(job: Obj, replicas: int) -> Obj:
    out = copy.deepcopy(job)
    out["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    return out


def set_workers_to_delete(job: Obj, names: Sequence[str]) -> Obj:
    out = copy.deepcopy(job)
    out["spec"]["elasticPolicy"]["workersToDelete"] = list(names)
    return out


def running_status(started: str | None = None) -> Obj:
    """Status of a job that has been created and is running (as an earlier reconcile would leave it)."""
    t = started or ts(-600)
    return {
        "conditions": [
            _cond("Created", "True", "MPIJobCreated", "created", t),
            _cond("Running", "True", "MPIJobRunning", "running", t),
        ],
        "startTime": t,
    }


def running_elastic_job(
    *,
    workers: int,
    min_replicas: int = 1,
    max_replicas: int = 8,
    policy: str | None = None,
    grace: int | None = None,
    to_delete: Sequence[str] = (),
    index_policy: str | None = None,
    regrow: Obj | None = None,
    last_index: int | None = None,
    discovered: bool = False,
) -> Obj:
    """The elastic job "pi", Running (`running_status`) with `workers` workers: the unit tests' one builder of
    it. `policy` is the nodeTerminationPolicy; `last_index` the status' lastWorkerIndex; `discovered` puts
    every worker in the status' discoveredHosts."""
    status = running_status()
    if last_index is not None:
        status["lastWorkerIndex"] = last_index
    if discovered:
        status["discoveredHosts"] = [f"pi-worker-{i}" for i in range(workers)]
    policy_block = elastic(
        min_replicas,
        max_replicas,
        workers_to_delete=to_delete,
        node_termination_policy=policy,
        grace=grace,
        index_policy=index_policy,
        regrow=regrow,
    )
    return mpijob(workers=workers, elastic_policy=policy_block, status=status)


def _cond(kind: str, status: str, reason: str, message: str, t: str) -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": t,
        "lastTransitionTime": t,
    }


# -- owned objects -----------------------------------------------------------------------------------------


def owner_ref(job: Obj, *, controller: bool = True) -> Obj:
    return {
        "apiVersion": API,
        "kind": "MPIJob",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _meta(name: str, owner: Obj | None, *, labels: Mapping[str, str] | None = None, rv: str = "10") -> Obj:
    m: Obj = {
        "name": name,
        "namespace": NS if owner is None else owner["metadata"].get("namespace", NS),
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "creationTimestamp": ts(-3000),
    }
    if labels:
        m["labels"] = dict(labels)
    if owner is not None:
        m["ownerReferences"] = [owner_ref(owner)]
    return m


def worker(
    job: Obj,
    index: int,
    *,
    node: str | None = "node-1",
    phase: str = "Running",
    ready: bool | None = None,
    annotations: Mapping[str, str] | None = None,
    terminating: bool = False,
    reason: str | None = None,
    message: str | None = None,
    disruption: str | None = None,
    labels: Mapping[str, str] | None = None,
    name: str | None = None,
    owner: Obj | None = None,
    rv: str = "10",
) -> Obj:
    """A worker pod of `job` (owned by `owner`, default the job). Ready defaults to phase == Running.
    `disruption`: the reason of a DisruptionTarget=True condition (the pod is about to be killed)."""
    job_name = job["metadata"]["name"]
    pod_name = name or c.worker_name(job_name, index)
    default_labels = {
        c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
        c.LABEL_JOB_NAME: job_name,
        c.LABEL_JOB_ROLE: c.ROLE_WORKER,
        c.LABEL_REPLICA_INDEX: str(index),
    }
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(pod_name, owner or job, labels=default_labels if labels is None else labels, rv=rv),
        "spec": {"hostname": pod_name, "subdomain": job_name, "containers": [{"name": "mpi"}]},
        "status": {"phase": phase},
    }
    if node:
        pod["spec"]["nodeName"] = node
    is_ready = phase == "Running" if ready is None else ready
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if is_ready else "False"}]
    if disruption is not None:
        pod["status"]["conditions"].append(disruption_target(disruption))
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    if terminating:
        pod["metadata"]["deletionTimestamp"] = ts(-1)
    if reason:
        pod["status"]["reason"] = reason
    if message:
        pod["status"]["message"] = message
    return pod


DISRUPTION_MESSAGES = {
    "TerminationByKubelet": "Pod was terminated in response to imminent node shutdown.",
    "EvictionByEvictionAPI": "Eviction API: evicting",
    "PreemptionByScheduler": "team-a/urgent: preempting to accommodate a higher priority pod",
    "DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
}


def disruption_target(reason: str, status: str = "True") -> Obj:
    """The pod condition a component about to kill a pod sets first (as the API server shows it)."""
    return {
        "type": "DisruptionTarget",
        "status": status,
        "reason": reason,
        "message": DISRUPTION_MESSAGES.get(reason, reason),
        "lastTransitionTime": ts(-1),
    }


def leaving(since: str, why: str = "workersToDelete", *, grace: int | None = None) -> dict[str, str]:
    """A leaving worker's annotations; with `grace` (an elastic job's scaleInGracePeriodSeconds) also the
    deadline the operator writes with them, since + grace."""
    marks = {c.ANNOTATION_LEAVING_SINCE: since, c.ANNOTATION_LEAVING_REASON: why}
    if grace is not None:
        deadline = datetime.fromisoformat(since.replace("Z", "+00:00")) + timedelta(seconds=grace)
        marks[c.ANNOTATION_LEAVING_DEADLINE] = format_time(deadline)
    return marks


def foreign_pod(
    name: str, *, owner_uid: str | None = "uid-someone-else", labels: Mapping[str, str] | None = None
) -> Obj:
    """A pod this job does not own (another controller's, or a bare pod when owner_uid is None)."""
    m = _meta(name, None, labels=labels)
    if owner_uid is not None:
        m["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other", "uid": owner_uid, "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": m,
        "spec": {"nodeName": "node-1", "containers": [{"name": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def node(name: str, *, taints: Iterable[str] = (), unschedulable: bool = False) -> Obj:
    n: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "1"},
        "spec": {},
    }
    if taints:
        n["spec"]["taints"] = [{"key": k, "effect": "NoSchedule"} for k in taints]
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def nodes(*names: str, **kw: Any) -> dict[str, Obj]:
    return {n: node(n, **kw) for n in names}


def service(job: Obj, *, owner: Obj | None = None) -> Obj:
    name = job["metadata"]["name"]
    labels = {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME, c.LABEL_JOB_NAME: name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, owner or job, labels=labels),
        "spec": {"clusterIP": "None", "selector": labels, "publishNotReadyAddresses": False},
    }


def config_map(job: Obj, data: Mapping[str, str] | None = None, *, owner: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(c.config_map_name(job["metadata"]["name"]), owner or job),
        "data": dict(data or {}),
    }


def secret(job: Obj, *, owner: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": _meta(c.secret_name(job["metadata"]["name"]), owner or job),
        "data": {"ssh-privatekey": "a2V5", "ssh-publickey": "cHVi"},
    }


def pdb(job: Obj, min_available: int, *, owner: Obj | None = None) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(c.pdb_name(job["metadata"]["name"]), owner or job),
        "spec": {"minAvailable": min_available},
    }


def launcher_access(job: Obj, *, owner: Obj | None = None, account: str | None = None) -> dict[str, Obj]:
    """The launcher's ServiceAccount, Role and RoleBinding as the API server would hold them (snap() kwargs)."""
    name = f"{job['metadata']['name']}-launcher"
    rbac = "rbac.authorization.k8s.io/v1"
    return {
        "service_account_obj": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, owner or job)},
        "role_obj": {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": _meta(name, owner or job),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [c.config_map_name(job["metadata"]["name"])],
                    "verbs": ["get"],
                }
            ],
        },
        "role_binding_obj": {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": _meta(name, owner or job),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": account or name, "namespace": job["metadata"]["namespace"]}
            ],
        },
    }


def launcher_job(
    job: Obj,
    *,
    owner: Obj | None = None,
    suspended: bool = False,
    conditions: Sequence[Obj] = (),
    status: Obj | None = None,
    template_spec: Obj | None = None,
    template_metadata: Obj | None = None,
) -> Obj:
    name = c.launcher_name(job["metadata"]["name"])
    st: Obj = dict(status or {})
    if conditions:
        st["conditions"] = list(conditions)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, owner or job),
        "spec": {
            "suspend": suspended,
            "template": {"metadata": template_metadata or {}, "spec": template_spec or {"containers": []}},
        },
        "status": st,
    }


def job_condition(kind: str, reason: str | None = None, message: str | None = None) -> Obj:
    cond: Obj = {"type": kind, "status": "True"}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def launcher_pod(
    launcher: Obj,
    suffix: str = "abcde",
    *,
    phase: str = "Running",
    reason: str | None = None,
    message: str | None = None,
    created: str | None = None,
) -> Obj:
    job_name = launcher["metadata"]["name"].removesuffix("-launcher")
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{launcher['metadata']['name']}-{suffix}",
            "namespace": launcher["metadata"]["namespace"],
            "uid": f"uid-launcher-pod-{suffix}",
            "resourceVersion": "5",
            "creationTimestamp": created or ts(-500),
            "labels": {
                c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
                c.LABEL_JOB_NAME: job_name,
                c.LABEL_JOB_ROLE: c.ROLE_LAUNCHER,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": launcher["metadata"]["name"],
                    "uid": launcher["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase},
    }
    if reason:
        pod["status"]["reason"] = reason
    if message:
        pod["status"]["message"] = message
    return pod


# -- snapshots ---------------------------------------------------------------------------------------------


def snap(
    job: Obj,
    pods: Sequence[Obj] = (),
    *,
    foreign: Sequence[Obj] = (),
    node_map: Mapping[str, Obj] | None = None,
    launcher: Obj | None = None,
    launcher_pods: Sequence[Obj] = (),
    service_obj: Obj | None = None,
    config_map_obj: Obj | None = None,
    secret_obj: Obj | None = None,
    pdb_obj: Obj | None = None,
    service_account_obj: Obj | None = None,
    role_obj: Obj | None = None,
    role_binding_obj: Obj | None = None,
    now: datetime = NOW,
    config: OperatorConfig | None = None,
    pod_group: Obj | None = None,
    checks: Mapping[tuple[str, str], bool] | None = None,
) -> Snapshot:
    """A snapshot: `pods` are the job's own pods, `foreign` pods of the namespace the job does not own.
    Nodes default to every node a pod is bound to (healthy), so no worker looks like it lost its node.
    The snapshot is the truth unless `checks` says otherwise: a node a pod is bound to that `node_map` lacks,
    and a name of the last discoveredHosts or of workersToDelete with no pod, come with a live read that
    confirmed them gone.
    Pass `checks={}` for a cache that lacks them with nothing confirmed yet."""
    all_pods = [*pods, *foreign, *launcher_pods]
    if node_map is None:
        node_map = {n: node(n) for p in all_pods if (n := (p.get("spec") or {}).get("nodeName"))}
    uid = job["metadata"]["uid"]
    owned = [p for p in pods if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]
    # The operator does not watch Secrets: an SSH Secret the job owns is one whose uid its status records;
    # a foreign one is what an exclusive create of that name answers (AlreadyExists).
    created: dict[tuple[str, str], str | None] = {}
    if secret_obj is not None:
        if any(r.get("uid") == uid for r in secret_obj["metadata"].get("ownerReferences") or []):
            job = {**job, "status": {**(job.get("status") or {}), "sshSecretUID": secret_obj["metadata"]["uid"]}}
        else:
            created[("Secret", secret_obj["metadata"]["name"])] = None
    return Snapshot(
        job=job,
        now=now,
        owned_pods=owned,
        pods_by_name={p["metadata"]["name"]: p for p in all_pods},
        launcher=launcher,
        launcher_pods=list(launcher_pods),
        service=service_obj,
        config_map=config_map_obj,
        pdb=pdb_obj,
        service_account=service_account_obj,
        role=role_obj,
        role_binding=role_binding_obj,
        nodes=dict(node_map),
        pod_group=pod_group,
        config=config or OperatorConfig(),
        absence_checks=dict(checks) if checks is not None else _truth(job, all_pods, node_map),
        created=created,
    )


def _truth(job: Obj, pods: Sequence[Obj], node_map: Mapping[str, Obj]) -> dict[tuple[str, str], bool]:
    found: dict[tuple[str, str], bool] = {}
    for p in pods:
        n = (p.get("spec") or {}).get("nodeName")
        if n and n not in node_map:
            found[("Node", n)] = True
    names = {p["metadata"]["name"] for p in pods}
    listed = ((job.get("spec") or {}).get("elasticPolicy") or {}).get("workersToDelete") or []
    for name in [*((job.get("status") or {}).get("discoveredHosts") or []), *listed]:
        if name not in names:
            found[("Pod", name)] = True
    return found


# -- picking actions out of a plan -------------------------------------------------------------------------


def creates(actions: Sequence[Action], kind: str | None = None) -> list[Obj]:
    return [a.obj for a in actions if isinstance(a, Create) and (kind is None or a.obj["kind"] == kind)]


def created_names(actions: Sequence[Action], kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in creates(actions, kind)]


def is_nudge(action: Action) -> bool:
    """A patch that only sets a launcher pod's annotations: the discovery list and/or the leaving workers (see
    nudges(), leaving_nudges())."""
    if not isinstance(action, Patch) or action.kind != "Pod":
        return False
    keys = set((action.patch.get("metadata") or {}).get("annotations") or {})
    return bool(keys) and keys <= {c.ANNOTATION_DISCOVERED_HOSTS, c.ANNOTATION_LEAVING_WORKERS}


def nudges(actions: Sequence[Action]) -> dict[str, str]:
    """Launcher pods whose discovery annotation a plan sets, with the value."""
    return {
        a.name: a.patch["metadata"]["annotations"][c.ANNOTATION_DISCOVERED_HOSTS]
        for a in actions
        if is_nudge(a) and c.ANNOTATION_DISCOVERED_HOSTS in a.patch["metadata"]["annotations"]
    }


def leaving_nudges(actions: Sequence[Action]) -> dict[str, str | None]:
    """Launcher pods whose leaving-workers annotation a plan sets (None: removes), with the value."""
    return {
        a.name: a.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_WORKERS]
        for a in actions
        if is_nudge(a) and c.ANNOTATION_LEAVING_WORKERS in a.patch["metadata"]["annotations"]
    }


def patches(actions: Sequence[Action], kind: str | None = None, name: str | None = None) -> list[Patch]:
    """Patches of a kind; for pods, the workers' (launcher nudges have their own helper, nudges())."""
    return [
        a
        for a in actions
        if isinstance(a, Patch)
        and (kind is None or a.kind == kind)
        and (name is None or a.name == name)
        and not (kind == "Pod" and is_nudge(a))
    ]


def deletes(actions: Sequence[Action], kind: str | None = None) -> list[Delete]:
    return [a for a in actions if isinstance(a, Delete) and (kind is None or a.kind == kind)]


def deleted_pods(actions: Sequence[Action]) -> list[str]:
    return [a.name for a in deletes(actions, "Pod")]


def patched_pods(actions: Sequence[Action]) -> list[str]:
    return [a.name for a in patches(actions, "Pod")]


def announced(actions: Sequence[Action]) -> list[Emit]:
    """Every Event a plan may post, in order: the ones of the announce phase, and those a write carries."""
    found: list[Emit] = []
    for a in actions:
        if isinstance(a, Emit):
            found.append(a)
        elif isinstance(a, Create | Patch | Delete):
            found += a.announce
    return found


def emits(actions: Sequence[Action], type_: str | None = None, reason: str | None = None) -> list[Emit]:
    return [
        a for a in announced(actions) if (type_ is None or a.type == type_) and (reason is None or a.reason == reason)
    ]


def requeue(actions: Sequence[Action]) -> float | None:
    waits = [a.seconds for a in actions if isinstance(a, RequeueAfter)]
    assert len(waits) <= 1, "a plan asks for at most one requeue"
    return waits[0] if waits else None


def writes(actions: Sequence[Action]) -> list[Action]:
    return [a for a in actions if isinstance(a, Create | Patch | Delete)]


def status_of(actions: Sequence[Action]) -> Obj | None:
    """The status the plan writes (the status subresource patch), or None."""
    found = [a for a in patches(actions, "MPIJob") if a.subresource == "status"]
    assert len(found) <= 1, "a plan writes the status at most once"
    return found[0].patch["status"] if found else None


def spec_patches(actions: Sequence[Action]) -> list[Patch]:
    return [a for a in patches(actions, "MPIJob") if a.subresource is None]


# A condition of a status, and whether it is True.
cond = get_condition
cond_true = is_true


def env_of(container: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def existing_children(job: Obj, *, data: Mapping[str, str] | None = None) -> dict[str, Any]:
    """snap() keyword arguments for a job whose Service, ConfigMap, Secret, PDB and launcher access (if elastic)
    and launcher exist, so a plan shows only what a test is about. The launcher pod carries the discovery list
    of `data`, as the operator would have annotated it. By default the ConfigMap has an empty discovery list
    (a known listing that names no host)."""
    if data is None:
        meta = job["metadata"]
        data = {c.DISCOVERED_HOSTS_KEY: discovery.payload(meta.get("namespace", ""), meta["name"], [], 1, "earlier")}
    ep = job["spec"].get("elasticPolicy")
    launcher = launcher_job(job)
    pod = launcher_pod(launcher)
    if ep is not None and data and c.DISCOVERED_HOSTS_KEY in data:
        pod["metadata"]["annotations"] = {c.ANNOTATION_DISCOVERED_HOSTS: data[c.DISCOVERED_HOSTS_KEY]}
    return {
        "service_obj": service(job),
        "config_map_obj": config_map(job, data),
        "secret_obj": secret(job),
        "pdb_obj": pdb(job, ep.get("minReplicas", 1)) if ep is not None else None,
        "launcher": launcher,
        "launcher_pods": [pod],
        **(launcher_access(job) if ep is not None else {}),
    }


def config_data(actions: Sequence[Action]) -> dict[str, str] | None:
    """The ConfigMap data a plan writes (create or patch), or None."""
    for a in actions:
        if isinstance(a, Create) and a.obj["kind"] == "ConfigMap":
            return dict(a.obj["data"])
        if isinstance(a, Patch) and a.kind == "ConfigMap":
            return dict(a.patch["data"])
    return None


def hosts_in(script_or_hostfile: str) -> list[str]:
    """Pod names in a hostfile or discover_hosts.sh (first label of each host)."""
    names = []
    for line in script_or_hostfile.splitlines():
        line = line.removeprefix("echo ").strip()
        if not line or line.startswith("#"):
            continue
        names.append(line.split(".")[0])
    return names
