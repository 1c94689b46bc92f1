"""Names, labels and annotations shared by the planner, the executor, the runtime and the CLI."""

from __future__ import annotations

# Labels, as the reference operator sets them (Kueue and users select on these).
LABEL_OPERATOR_NAME = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "mpi-operator"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"

# The Created condition's reason and the Event that announces a new job, as the reference posts them (its
# tests wait for this reason): the executor folds a new job's creates into that Event.
JOB_CREATED_REASON = "MPIJobCreated"

# Annotations under this prefix are the operator's; user templates cannot set them (stripped).
ANNOTATION_PREFIX = "mpijob.kubeflow.org/"
# Set on a worker when it leaves discovery; its value is when (RFC 3339). The pod is deleted once
# elasticPolicy.scaleInGracePeriodSeconds have passed. Being in the API, the decision survives restarts.
ANNOTATION_LEAVING_SINCE = "mpijob.kubeflow.org/leaving-since"
# Why the worker is leaving (workersToDelete, scale-down, node-termination, ...), for humans.
ANNOTATION_LEAVING_REASON = "mpijob.kubeflow.org/leaving-reason"
# Regrow (elastic ScaleIn jobs). On the MPIJob, written in the one spec patch that changes Worker replicas, so a
# restart reads them back: the size to grow back to, and the Worker replicas the operator wrote with it (any
# other value of replicas is someone else's edit, which sets the new target). Absent at the target.
ANNOTATION_REGROW_TARGET = "mpijob.kubeflow.org/regrow-target"
ANNOTATION_REGROW_REPLICAS = "mpijob.kubeflow.org/regrow-replicas"
# On a worker created to grow back (a probe); its value is when. Until it is bound to a node it does not count
# toward Worker replicas, and it is deleted if it is not bound within elasticPolicy.regrow.probeTimeoutSeconds.
ANNOTATION_REGROW_PROBE = "mpijob.kubeflow.org/regrow-probe"
# When the operator deletes a leaving worker's pod (RFC 3339 UTC, whole seconds): written with leaving-since
# (no extra write), so the training process can checkpoint in time. An elastic worker reads it, and the
# reason, from files a downwardAPI volume projects (LEAVING_MOUNT_PATH); both are empty while it serves.
ANNOTATION_LEAVING_DEADLINE = "mpijob.kubeflow.org/leaving-deadline"
LEAVING_MOUNT_PATH = "/etc/mpi-leaving"
LEAVING_DEADLINE_FILE = "deadline"
LEAVING_REASON_FILE = "reason"
# On each live launcher pod of an elastic job: the leaving workers not being deleted yet and their deadlines,
# a JSON object {"<worker pod name>": "<RFC 3339 UTC>"} (absent when none), projected as
# DISCOVERY_MOUNT_PATH/LEAVING_WORKERS_FILE. Written with the discovery list when both change (one write).
ANNOTATION_LEAVING_WORKERS = "mpijob.kubeflow.org/leaving-workers"
LEAVING_WORKERS_FILE = "leaving"
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

CONFIG_MOUNT_PATH = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
DISCOVER_HOSTS_KEY = "discover_hosts.sh"
# The job's current discovery list (`host:slots` lines under a header), in the ConfigMap: what the
# launcher's discover_hosts.sh reads from the API, and the same text in a launcher pod annotation that a
# downwardAPI volume projects into the launcher (the file fallback; an annotation change makes the kubelet
# sync the pod at once, a ConfigMap change does not).
DISCOVERED_HOSTS_KEY = "discovered_hosts"
ANNOTATION_DISCOVERED_HOSTS = "mpijob.kubeflow.org/discovered-hosts"
DISCOVERY_MOUNT_PATH = "/etc/mpi-discovery"
DISCOVERY_FILE = "hosts"
SERVICE_ACCOUNT_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# elasticPolicy.mode Restart: the launcher's command runs under this script (ConfigMap key, mounted under
# CONFIG_MOUNT_PATH), which writes the hostfile of each run into an emptyDir at RUN_MOUNT_PATH.
RUN_SCRIPT_KEY = "mpijob-run"
RUN_MOUNT_PATH = "/etc/mpi-run"

# Taints that clouds and their termination handlers put on a node that is about to go away.
DEFAULT_TERMINATION_TAINTS: tuple[str, ...] = (
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "aws-node-termination-handler/scheduled-maintenance",
    "karpenter.sh/disrupted",
    "cloud.google.com/impending-node-termination",
    "remediator.kubernetes.azure.com/unschedulable",
    "node.kubernetes.io/out-of-service",
)

# Kueue manages a job that carries this label: it admits the job with a fixed Worker count, and a different
# count on a running job makes Kueue suspend it (no matching Workload). See docs/scheduling.md.
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"

FIELD_MANAGER = "mpijob-operator"
EVENT_SOURCE = "mpijob-operator"


def launcher_name(job: str) -> str:
    return f"{job}-launcher"


# The highest index allocated: worker names "<job>-worker-<index>" stay DNS labels (<= 63) for job names up to
# 50 characters.
MAX_WORKER_INDEX = 99_999


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def config_map_name(job: str) -> str:
    return f"{job}-config"


def secret_name(job: str) -> str:
    return f"{job}-ssh"


def pdb_name(job: str) -> str:
    return f"{job}-workers"


def discovery_rbac_name(job: str) -> str:
    """The launcher's ServiceAccount, Role and RoleBinding (read access to the job's discovery list only)."""
    return f"{job}-launcher"


def worker_index(job: str, pod_name: str) -> int | None:
    """Index of a worker from its name (the name is stable; labels can be edited or missing)."""
    prefix = f"{job}-worker-"
    if not pod_name.startswith(prefix):
        return None
    rest = pod_name[len(prefix) :]
    # ASCII only: str.isdigit() also takes "²" (int() then raises) and "٣" (int() reads 3).
    if not (rest.isascii() and rest.isdigit()) or (len(rest) > 1 and rest[0] == "0"):
        return None
    return int(rest)
