"""A job started and Running under the reference operator (kubeflow/mpi-operator v0.8.2), as that version
leaves it in the API: its children and its status, written by hand from its Go code
(pkg/controller/mpi_job_controller.go, mpi_job_controller_status.go), not with our planner.

What v0.8.2 writes, and where:
- ConfigMap `<job>-config` (newConfigMap, updateDiscoverHostsInConfigMap): labels only `app: <job>`, one
  controller reference to the MPIJob, data `hostfile` ("<host> slots=N" per worker for OpenMPI) and
  `discover_hosts.sh` ("#!/bin/sh" then "echo <host>" per Running worker, sorted by name, no slots). No
  `discovered_hosts` key.
- Service `<job>` (newJobService/newService): labels `app: <job>`, headless, selector
  operator-name + job-name, publishNotReadyAddresses omitted when false (omitempty).
- Secret `<job>-ssh` (newSSHAuthSecret): labels `app: <job>`, type kubernetes.io/ssh-auth.
- launcher batch Job `<job>-launcher` (newLauncherJob): labels `app: <job>`; its template labels are
  defaultLabels(job, "launcher") (operator-name, job-name, job-role), podReplacementPolicy Failed.
- worker pods `<job>-worker-<i>` (newWorker): the template's labels plus defaultLabels(job, "worker") and
  replica-index, hostname `<job>-worker-<i>`, subdomain `<job>`, one controller reference to the MPIJob.
- status (updateMPIJobStatus): Created and Running conditions (reasons MPIJobCreated, MPIJobRunning),
  replicaStatuses Launcher {active: 1} and Worker {active: N} (zero counts omitted), startTime.
"""

from __future__ import annotations

from typing import Any

from mpijob.api import constants as c

from .builders import API, NS, mpijob, ts

Obj = dict[str, Any]
# A Running job's children carry the labels of v0.8.2's defaultLabels.
_OPERATOR = {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME}


def _controller_ref(job: Obj) -> Obj:
    """metav1.NewControllerRef(mpiJob, kubeflow.SchemeGroupVersionKind)."""
    m = job["metadata"]
    return {
        "apiVersion": API,
        "kind": "MPIJob",
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(job: Obj, name: str, labels: Obj, owner: Obj | None = None) -> Obj:
    return {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [owner or _controller_ref(job)],
        "creationTimestamp": ts(-3000),
    }


def _host(job: Obj, pod: str) -> str:
    m = job["metadata"]
    return f"{pod}.{m['name']}.{m['namespace']}.svc"


def reference_job(name: str = "pi", workers: int = 3) -> Obj:
    """The MPIJob, Running under the reference, with the status it wrote."""
    t = ts(-600)
    ns = NS

    def condition(kind: str, reason: str, message: str) -> Obj:
        return {
            "type": kind,
            "status": "True",
            "lastUpdateTime": t,
            "lastTransitionTime": t,
            "reason": reason,
            "message": message,
        }

    status = {
        "conditions": [
            condition("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created."),
            condition("Running", "MPIJobRunning", f"MPIJob {ns}/{name} is running."),
        ],
        "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": workers}},
        "startTime": t,
    }
    return mpijob(name, workers=workers, status=status, uid=f"uid-{name}")


def reference_children(job: Obj, workers: int = 3) -> list[Obj]:
    """Every object v0.8.2 made for `job` (Running: all workers Running and Ready, the launcher pod Running),
    plus the launcher pod the Job controller made from its template."""
    name = job["metadata"]["name"]
    app = {"app": name}
    pods = [c.worker_name(name, i) for i in range(workers)]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, c.config_map_name(name), app),
        "data": {
            c.HOSTFILE_KEY: "".join(f"{_host(job, p)} slots=1\n" for p in pods),
            c.DISCOVER_HOSTS_KEY: "#!/bin/sh\n" + "".join(f"echo {_host(job, p)}\n" for p in sorted(pods)),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, app),
        "spec": {"clusterIP": "None", "selector": {**_OPERATOR, c.LABEL_JOB_NAME: name}},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": _metadata(job, c.secret_name(name), app),
        "data": {"ssh-privatekey": "a2V5", "ssh-publickey": "cHVi"},
    }
    launcher_labels = {**_OPERATOR, c.LABEL_JOB_NAME: name, c.LABEL_JOB_ROLE: c.ROLE_LAUNCHER}
    launcher = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**_metadata(job, c.launcher_name(name), app), "uid": f"uid-launcher-{name}"},
        "spec": {
            "podReplacementPolicy": "Failed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": f"uid-launcher-{name}"}},
            "template": {
                "metadata": {"labels": dict(launcher_labels), "ownerReferences": [_controller_ref(job)]},
                "spec": {"containers": [{"name": "mpi", "image": "mpioperator/mpi-pi:openmpi"}]},
            },
        },
        "status": {"active": 1, "ready": 1, "startTime": ts(-590)},
    }
    return [config_map, service, secret, launcher, _launcher_pod(job, launcher, launcher_labels), *_workers(job, pods)]


def _launcher_pod(job: Obj, launcher: Obj, labels: Obj) -> Obj:
    """The Job controller's pod: the template's labels plus its own, controlled by the Job."""
    name = job["metadata"]["name"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": launcher["metadata"]["name"],
        "uid": launcher["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    job_labels = {
        "batch.kubernetes.io/controller-uid": launcher["metadata"]["uid"],
        "batch.kubernetes.io/job-name": launcher["metadata"]["name"],
        "controller-uid": launcher["metadata"]["uid"],
        "job-name": launcher["metadata"]["name"],
    }
    pod_name = f"{c.launcher_name(name)}-x7k2p"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, pod_name, {**labels, **job_labels}, owner),
        "spec": {"nodeName": "node-1", "hostname": c.launcher_name(name), "subdomain": name},
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.9",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts(-580)}],
        },
    }


def _workers(job: Obj, pods: list[str]) -> list[Obj]:
    name = job["metadata"]["name"]
    out = []
    for index, pod in enumerate(pods):
        labels = {**_OPERATOR, c.LABEL_JOB_NAME: name, c.LABEL_JOB_ROLE: c.ROLE_WORKER}
        labels[c.LABEL_REPLICA_INDEX] = str(index)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": _metadata(job, pod, labels),
                "spec": {
                    "nodeName": "node-1",
                    "hostname": pod,
                    "subdomain": name,
                    "containers": [{"name": "mpi", "image": "mpioperator/mpi-pi:openmpi"}],
                },
                "status": {
                    "phase": "Running",
                    "podIP": f"10.1.0.{index + 10}",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts(-590)}],
                },
            }
        )
    return out
