"""The objects an MPIJob owns, built from its spec, as the reference operator builds them."""

from __future__ import annotations

import copy
from typing import Any

from mpijob.api import constants
from mpijob.api.models import (
    API_VERSION,
    KIND,
    MPIImplementation,
    MPIJobSpec,
    RestartOptions,
    RestartPolicy,
)
from mpijob.planner import restart
from mpijob.planner.hostfile import host_fqdn
from mpijob.planner.snapshot import Obj, meta, name_of, uid_of


def owner_reference(job: Obj) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name_of(job),
        "uid": uid_of(job),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def default_labels(job_name: str, role: str | None = None) -> dict[str, str]:
    labels = {constants.LABEL_OPERATOR_NAME: constants.OPERATOR_NAME, constants.LABEL_JOB_NAME: job_name}
    if role:
        labels[constants.LABEL_JOB_ROLE] = role
    return labels


def worker_selector(job_name: str) -> str:
    return f"{constants.LABEL_JOB_NAME}={job_name},{constants.LABEL_JOB_ROLE}={constants.ROLE_WORKER}"


def _metadata(job: Obj, name: str, labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": meta(job).get("namespace"),
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }


def service(job: Obj, spec: MPIJobSpec) -> Obj:
    name = name_of(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, default_labels(name)),
        "spec": {
            "clusterIP": "None",
            "selector": default_labels(name),
            "publishNotReadyAddresses": spec.run_launcher_as_worker,
        },
    }


def config_map(job: Obj, data: dict[str, str]) -> Obj:
    name = name_of(job)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, constants.config_map_name(name), default_labels(name)),
        "data": data,
    }


def ssh_secret(job: Obj) -> Obj:
    """The Secret without its data: the executor generates a fresh key pair per job."""
    name = name_of(job)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": _metadata(job, constants.secret_name(name), default_labels(name)),
    }


def pdb(job: Obj, min_available: int) -> Obj:
    name = name_of(job)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(job, constants.pdb_name(name), default_labels(name)),
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": default_labels(name, constants.ROLE_WORKER)},
        },
    }


# The private key is 0600 wherever the container's user can still read it: at /root/.ssh (the reference's
# rule), when every container runs as root, or when the pod sets fsGroup (the kubelet then gives the
# root-owned file to that group with group read). Otherwise, a user that may not be root with no fsGroup,
# it is 0644 as the reference mounts it: 0600 would lock that user out and the job would fail where the
# reference's runs (issue 30; docs/security.md). The job gets a Warning naming fsGroup (`shared_key_roles`).
PRIVATE_KEY_MODE = 0o600
PUBLIC_KEY_MODE = 0o644
ROOT_SSH_PATH = "/root/.ssh"


def private_key_mode(pod_spec: Obj, mount_path: str) -> int:
    """The private key's mode in a pod made from `pod_spec` (see PRIVATE_KEY_MODE)."""
    pod_context = pod_spec.get("securityContext") or {}
    if mount_path == ROOT_SSH_PATH or pod_context.get("fsGroup") is not None:
        return PRIVATE_KEY_MODE
    containers = pod_spec.get("containers") or []
    if containers and all(_runs_as_root(c, pod_context) for c in containers):
        return PRIVATE_KEY_MODE
    return PUBLIC_KEY_MODE


def _runs_as_root(container: Obj, pod_context: Obj) -> bool:
    """Known to run as uid 0; no runAsUser anywhere means the image's user, which may be anyone."""
    user = (container.get("securityContext") or {}).get("runAsUser")
    if user is None:
        user = pod_context.get("runAsUser")
    return user == 0


def shared_key_roles(spec: MPIJobSpec) -> list[str]:
    """The roles whose pods get the private key 0644 (readable by every user of the container)."""
    roles = [(constants.ROLE_LAUNCHER, spec.launcher), (constants.ROLE_WORKER, spec.worker)]
    return [
        role.capitalize()
        for role, replica in roles
        if replica is not None
        and private_key_mode(replica.template.get("spec") or {}, spec.ssh_auth_mount_path) != PRIVATE_KEY_MODE
    ]


def _ssh_volume(job_name: str, mount_path: str, pod_spec: Obj) -> tuple[Obj, Obj]:
    mode = private_key_mode(pod_spec, mount_path)
    volume = {
        "name": "ssh-auth",
        "secret": {
            "secretName": constants.secret_name(job_name),
            "defaultMode": mode,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": mode},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": PUBLIC_KEY_MODE},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": PUBLIC_KEY_MODE},
            ],
        },
    }
    return volume, {"name": "ssh-auth", "mountPath": mount_path}


def _annotation_volume(name: str, mount_path: str, files: dict[str, str]) -> tuple[Obj, Obj]:
    """A downwardAPI volume with one file per annotation of the pod itself (empty while it is not set): the
    kubelet rewrites the files when the annotations change, an env var would never change."""
    items = [
        {"path": path, "fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}, "mode": 0o444}
        for path, key in files.items()
    ]
    return {"name": name, "downwardAPI": {"items": items}}, {"name": name, "mountPath": mount_path, "readOnly": True}


def _implementation_env(spec: MPIJobSpec) -> list[Obj]:
    # Restart mode: each run's hostfile, written by mpijob-run (the ConfigMap's lists every worker).
    folder = constants.RUN_MOUNT_PATH if restart.applies(spec.elastic_policy) else constants.CONFIG_MOUNT_PATH
    hostfile = f"{folder}/{constants.HOSTFILE_KEY}"
    ssh_args = "-o ConnectionAttempts=10"
    impl = spec.mpi_implementation
    if impl is MPIImplementation.OPENMPI:
        pairs = [
            # OpenMPI 4.x (ORTE), as the reference operator sets them.
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_default_hostfile", hostfile),
            ("OMPI_MCA_plm_rsh_args", ssh_args),
            ("OMPI_MCA_orte_set_default_slots", str(spec.slots_per_worker)),
            # OpenMPI 5.x (PRRTE) reads only PRTE_MCA_*: plain mpirun no longer translates OMPI_MCA_orte_*
            # (openpmix/prrte v3.0.7+, schizo_ompi.c), so every rank would run on the launcher. Names as
            # registered in prrte v3.0.8 (OpenMPI 5.0.7): src/runtime/prte_mca_params.c, src/util/proc_info.c,
            # src/mca/plm/ssh/plm_ssh_component.c. ORTE ignores them. keep_fqdn stays false: PRRTE does not
            # resolve names, so with true the launcher's own line (runLauncherAsWorker) is taken for a remote
            # host; with false it still sshes to the full name. docs/migration.md has the evidence.
            ("PRTE_MCA_prte_keep_fqdn_hostnames", "false"),
            ("PRTE_MCA_prte_default_hostfile", hostfile),
            ("PRTE_MCA_plm_ssh_args", ssh_args),
            ("PRTE_MCA_prte_set_default_slots", str(spec.slots_per_worker)),
        ]
    elif impl is MPIImplementation.INTEL:
        pairs = [
            ("I_MPI_HYDRA_HOST_FILE", hostfile),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", ssh_args),
            ("I_MPI_PERHOST", str(spec.slots_per_worker)),
        ]
    else:
        pairs = [("HYDRA_HOST_FILE", hostfile), ("HYDRA_LAUNCH_EXTRA_ARGS", ssh_args)]
    if not spec.run_launcher_as_worker:
        # The launcher only starts processes elsewhere; it must not grab GPUs.
        pairs += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    return [{"name": k, "value": v} for k, v in pairs]


def _add_env(container: Obj, env: list[Obj]) -> None:
    existing = {e.get("name") for e in container.get("env") or []}
    container["env"] = list(container.get("env") or []) + [e for e in env if e["name"] not in existing]


def _template_parts(template: dict[str, Any]) -> tuple[Obj, Obj]:
    template = copy.deepcopy(template)
    tmeta = template.get("metadata") or {}
    if tmeta.get("annotations"):
        tmeta["annotations"] = user_annotations(tmeta["annotations"])
    return tmeta, template.get("spec") or {}


def user_annotations(annotations: dict[str, Any]) -> dict[str, Any]:
    """A template's annotations without the operator's own keys (`mpijob.kubeflow.org/*`): they are the
    operator's bookkeeping (a worker born with `leaving-since` would be deleted as soon as it started)."""
    return {k: v for k, v in annotations.items() if not str(k).startswith(constants.ANNOTATION_PREFIX)}


def user_service_account(spec: MPIJobSpec) -> str | None:
    """The ServiceAccount the user chose for the launcher, if any (`serviceAccount` is its old alias)."""
    pod_spec = spec.launcher.template.get("spec") or {}
    name = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
    return str(name) if name else None


def _restart_parts(spec: MPIJobSpec, pod_spec: Obj) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """Restart mode: the launcher container's command under mpijob-run (validated present by plan.validate),
    an emptyDir for the hostfile of each run, and the script's settings. Returns (volumes, mounts, env)."""
    policy = spec.elastic_policy
    assert policy is not None
    options = policy.restart or RestartOptions()
    container = (pod_spec.get("containers") or [{}])[0]
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    container["command"] = ["/bin/sh", f"{constants.CONFIG_MOUNT_PATH}/{constants.RUN_SCRIPT_KEY}", "--", *command]
    container.pop("args", None)
    hydra = spec.mpi_implementation is not MPIImplementation.OPENMPI
    env = [
        {"name": "MPIJOB_HOSTFILE", "value": f"{constants.RUN_MOUNT_PATH}/{constants.HOSTFILE_KEY}"},
        {"name": "MPIJOB_HOSTFILE_FORMAT", "value": "hydra" if hydra else "openmpi"},
        {"name": "MPIJOB_RESTART_SIGNAL", "value": options.signal.value},
        {"name": "MPIJOB_GRACE_SECONDS", "value": str(policy.scale_in_grace_period_seconds)},
    ]
    volume = {"name": "mpi-job-run", "emptyDir": {}}
    return [volume], [{"name": "mpi-job-run", "mountPath": constants.RUN_MOUNT_PATH}], env


def launcher_job(job: Obj, spec: MPIJobSpec, *, discovery_account: str | None = None) -> Obj:
    """The launcher Job. An elastic launcher also gets the projected discovery list (a downwardAPI volume of
    its pod's annotation) and, with `discovery_account`, runs as that ServiceAccount (ours; never replaces
    the user's choice)."""
    name = name_of(job)
    run_policy = spec.run_policy
    tmeta, pod_spec = _template_parts(spec.launcher.template)
    labels = {**(tmeta.get("labels") or {}), **default_labels(name, constants.ROLE_LAUNCHER)}
    if spec.run_launcher_as_worker:
        labels[constants.LABEL_REPLICA_INDEX] = "0"
    pod_spec["hostname"] = constants.launcher_name(name)
    pod_spec["subdomain"] = name
    pod_spec["restartPolicy"] = (spec.launcher.restart_policy or RestartPolicy.ON_FAILURE).value
    if pod_spec.get("hostNetwork"):
        # Else a host-network launcher resolves with the node's resolver and cannot find its workers.
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if discovery_account and not user_service_account(spec):
        pod_spec["serviceAccountName"] = discovery_account
    ssh_volume, ssh_mount = _ssh_volume(name, spec.ssh_auth_mount_path, pod_spec)
    items: list[Obj] = [
        {"key": constants.HOSTFILE_KEY, "path": constants.HOSTFILE_KEY, "mode": 0o444},
        {"key": constants.DISCOVER_HOSTS_KEY, "path": constants.DISCOVER_HOSTS_KEY, "mode": 0o555},
        {"key": constants.DISCOVERED_HOSTS_KEY, "path": constants.DISCOVERED_HOSTS_KEY, "mode": 0o444},
    ]
    config_volume = {"name": "mpi-job-config", "configMap": {"name": constants.config_map_name(name), "items": items}}
    volumes = [ssh_volume, config_volume]
    mounts = [ssh_mount, {"name": "mpi-job-config", "mountPath": constants.CONFIG_MOUNT_PATH}]
    env = [{"name": "K_MPI_JOB_ROLE", "value": constants.ROLE_LAUNCHER}, *_implementation_env(spec)]
    if restart.applies(spec.elastic_policy):
        script = constants.RUN_SCRIPT_KEY
        items.append({"key": script, "path": script, "mode": 0o555})
        run_volumes, run_mounts, run_env = _restart_parts(spec, pod_spec)
        volumes += run_volumes
        mounts += run_mounts
        env += run_env
    if spec.elastic_policy is not None:
        volume, mount = _annotation_volume(
            "mpi-job-discovery",
            constants.DISCOVERY_MOUNT_PATH,
            {
                constants.DISCOVERY_FILE: constants.ANNOTATION_DISCOVERED_HOSTS,
                constants.LEAVING_WORKERS_FILE: constants.ANNOTATION_LEAVING_WORKERS,
            },
        )
        volumes.append(volume)
        mounts.append(mount)
    pod_spec["volumes"] = list(pod_spec.get("volumes") or []) + volumes
    for container in pod_spec.get("containers") or []:
        _add_env(container, env)
        container["volumeMounts"] = list(container.get("volumeMounts") or []) + mounts
    job_spec: Obj = {
        "template": {"metadata": {**tmeta, "labels": labels}, "spec": pod_spec},
        "podReplacementPolicy": "Failed",
        "suspend": bool(run_policy.suspend),
    }
    if run_policy.backoff_limit is not None:
        job_spec["backoffLimit"] = run_policy.backoff_limit
    if run_policy.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = run_policy.active_deadline_seconds
    # ttlSecondsAfterFinished is deliberately not copied: the MPIJob's own TTL removes the launcher through
    # garbage collection, and a launcher deleted by the Job TTL before we saw it finish would be recreated.
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job, constants.launcher_name(name), default_labels(name, constants.ROLE_LAUNCHER)),
        "spec": job_spec,
    }


def _discovery_access_object(job: Obj, api_version: str, kind: str, **fields: object) -> Obj:
    """One of the launcher's discovery access objects (ServiceAccount, Role, RoleBinding): one name for all."""
    name = name_of(job)
    metadata = _metadata(job, constants.discovery_rbac_name(name), default_labels(name, constants.ROLE_LAUNCHER))
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


def discovery_service_account(job: Obj) -> Obj:
    return _discovery_access_object(job, "v1", "ServiceAccount")


def discovery_rules(job: Obj) -> list[Obj]:
    """`get` of this job's ConfigMap by name and nothing else (no list or watch, no other name or kind)."""
    return [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [constants.config_map_name(name_of(job))],
            "verbs": ["get"],
        }
    ]


def discovery_role(job: Obj) -> Obj:
    return _discovery_access_object(job, "rbac.authorization.k8s.io/v1", "Role", rules=discovery_rules(job))


def discovery_subjects(job: Obj, account: str) -> list[Obj]:
    return [{"kind": "ServiceAccount", "name": account, "namespace": meta(job).get("namespace")}]


def discovery_role_binding(job: Obj, account: str) -> Obj:
    role = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": constants.discovery_rbac_name(name_of(job)),
    }
    return _discovery_access_object(
        job, "rbac.authorization.k8s.io/v1", "RoleBinding", roleRef=role, subjects=discovery_subjects(job, account)
    )


def launcher_scheduling_directives(spec: MPIJobSpec) -> Obj:
    """The parts of the launcher template Kueue may change while a job is suspended."""
    tmeta, pod_spec = _template_parts(spec.launcher.template)
    return {
        "labels": tmeta.get("labels") or {},
        "annotations": tmeta.get("annotations") or {},
        "nodeSelector": pod_spec.get("nodeSelector"),
        "tolerations": pod_spec.get("tolerations"),
        "schedulingGates": pod_spec.get("schedulingGates"),
    }


def worker_pod(job: Obj, spec: MPIJobSpec, index: int, cluster_domain: str) -> Obj:
    name = name_of(job)
    namespace = str(meta(job).get("namespace"))
    pod_name = constants.worker_name(name, index)
    worker_spec = spec.worker
    tmeta, pod_spec = _template_parts(worker_spec.template if worker_spec else {})
    labels = {**(tmeta.get("labels") or {}), **default_labels(name, constants.ROLE_WORKER)}
    # The reference numbers the launcher 0 when it runs as a worker, so worker i carries label i+1.
    labels[constants.LABEL_REPLICA_INDEX] = str(index + 1 if spec.run_launcher_as_worker else index)
    pod_spec["hostname"] = pod_name
    pod_spec["subdomain"] = name
    restart = worker_spec.restart_policy if worker_spec and worker_spec.restart_policy else RestartPolicy.NEVER
    pod_spec["restartPolicy"] = restart.value
    search = f"{name}.{namespace}.svc.{cluster_domain or 'cluster.local'}"
    dns = dict(pod_spec.get("dnsConfig") or {})
    dns["searches"] = [*(dns.get("searches") or []), search]
    pod_spec["dnsConfig"] = dns
    if pod_spec.get("hostNetwork"):
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    ssh_volume, ssh_mount = _ssh_volume(name, spec.ssh_auth_mount_path, pod_spec)
    volumes, mounts = [ssh_volume], [ssh_mount]
    if spec.elastic_policy is not None:
        # When this worker will be deleted, for its training process (a pod's volumes are fixed at creation,
        # so every elastic worker has them; a static job's pods stay as the reference makes them).
        volume, mount = _annotation_volume(
            "mpi-job-leaving",
            constants.LEAVING_MOUNT_PATH,
            {
                constants.LEAVING_DEADLINE_FILE: constants.ANNOTATION_LEAVING_DEADLINE,
                constants.LEAVING_REASON_FILE: constants.ANNOTATION_LEAVING_REASON,
            },
        )
        volumes.append(volume)
        mounts.append(mount)
    pod_spec["volumes"] = list(pod_spec.get("volumes") or []) + volumes
    containers = pod_spec.get("containers") or []
    if containers and not containers[0].get("command") and not containers[0].get("args"):
        containers[0]["command"] = ["/usr/sbin/sshd", "-De"]
    for container in containers:
        _add_env(container, [{"name": "K_MPI_JOB_ROLE", "value": constants.ROLE_WORKER}])
        container["volumeMounts"] = list(container.get("volumeMounts") or []) + mounts
    metadata = _metadata(job, pod_name, labels)
    if tmeta.get("annotations"):
        metadata["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def worker_host(job: Obj, pod_name: str, cluster_domain: str) -> str:
    return host_fqdn(pod_name, name_of(job), str(meta(job).get("namespace")), cluster_domain)
