"""Pydantic models of the MPIJob API (kubeflow.org/v2beta1), plus our `elasticPolicy`.

These models are the single source of the CRD schema (see `crd.py`) and are how the planner reads a job.
Field names and defaults follow the reference operator so existing manifests apply unchanged. Pod
templates stay plain dicts: the planner copies them into children, it never interprets most of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from mpijob.api.rules import MAX_REPLICAS, MAX_WORKERS_TO_DELETE, POD_NAME_PATTERN

GROUP = "kubeflow.org"
VERSION = "v2beta1"
KIND = "MPIJob"
PLURAL = "mpijobs"
API_VERSION = f"{GROUP}/{VERSION}"

# managedBy value meaning "this operator"; anything else (e.g. Kueue's MultiKueue) makes us leave the job alone.
MANAGED_BY_US = "kubeflow.org/mpi-operator"


class _Model(BaseModel):
    # Unknown fields are kept (the API server already pruned what the schema does not allow), and
    # fields are read and written by their Kubernetes (camelCase) names.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class MPIImplementation(StrEnum):
    OPENMPI = "OpenMPI"
    INTEL = "Intel"
    MPICH = "MPICH"


class LauncherCreationPolicy(StrEnum):
    AT_STARTUP = "AtStartup"
    WAIT_FOR_WORKERS_READY = "WaitForWorkersReady"


class CleanPodPolicy(StrEnum):
    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"


class NodeTerminationPolicy(StrEnum):
    SCALE_IN = "ScaleIn"
    REPLACE = "Replace"
    IGNORE = "Ignore"


class IndexPolicy(StrEnum):
    FILL_GAPS = "FillGaps"
    APPEND = "Append"


class HostDiscovery(StrEnum):
    API = "API"
    FILE = "File"


class ElasticMode(StrEnum):
    IN_PLACE = "InPlace"
    RESTART = "Restart"


class RestartSignal(StrEnum):
    SIGUSR1 = "SIGUSR1"
    SIGUSR2 = "SIGUSR2"
    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"


class ReplicaType(StrEnum):
    LAUNCHER = "Launcher"
    WORKER = "Worker"


class SchedulingPolicy(_Model):
    # Gang scheduling (Volcano / scheduler-plugins PodGroups) is not implemented: accepted, then ignored.
    min_available: int | None = Field(
        default=None, alias="minAvailable", ge=0, description="Gang scheduling: accepted for compatibility, ignored."
    )
    queue: str | None = Field(default=None, description="Gang scheduling: accepted for compatibility, ignored.")
    min_resources: dict[str, Any] | None = Field(
        default=None, alias="minResources", description="Gang scheduling: accepted for compatibility, ignored."
    )
    priority_class: str | None = Field(
        default=None, alias="priorityClass", description="Gang scheduling: accepted for compatibility, ignored."
    )
    schedule_timeout_seconds: int | None = Field(
        default=None,
        alias="scheduleTimeoutSeconds",
        ge=0,
        description="Gang scheduling: accepted for compatibility, ignored.",
    )


class RunPolicy(_Model):
    clean_pod_policy: CleanPodPolicy | None = Field(
        default=None,
        alias="cleanPodPolicy",
        description="Which worker pods to delete when the job finishes: Running (running and pending), "
        "All, or None (the reference's effective default).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        alias="ttlSecondsAfterFinished",
        ge=0,
        description="Delete the MPIJob (and so its children) this long after it finished.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        alias="activeDeadlineSeconds",
        ge=0,
        description="Seconds the launcher Job may run (copied onto it); past them the job fails.",
    )
    backoff_limit: int | None = Field(
        default=None,
        alias="backoffLimit",
        ge=0,
        description="Launcher retries before the job fails (set on the launcher Job).",
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        default=None, alias="schedulingPolicy", description="Gang scheduling settings (accepted, not acted on)."
    )
    suspend: bool = Field(default=False, description="Suspend the job: workers deleted, launcher suspended.")
    managed_by: str | None = Field(
        default=None,
        alias="managedBy",
        description="Controller that reconciles this job; jobs managed by another controller are left "
        "alone. Immutable.",
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}]},
    )


class ReplicaSpec(_Model):
    # Bounded so that no user number can make a reconcile (or a worker name) grow without limit.
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REPLICAS,
        description="Launcher: 1. Worker: how many workers (>= 1, or within elasticPolicy).",
    )
    template: dict[str, Any] = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = Field(
        default=None,
        alias="restartPolicy",
        description="Pod restart policy: Launcher defaults to OnFailure, Worker to Never.",
    )


# A pod name of this namespace (DNS-1123 label): refused at admission otherwise, so a junk list costs nothing.
WorkerName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=POD_NAME_PATTERN)]


class RegrowPolicy(_Model):
    """How a ScaleIn job grows back to the size its user asked for after losing workers to its nodes (a
    termination taint, a deleted or cordoned node, an eviction, a DisruptionTarget). On by default; see
    docs/elastic.md for why these defaults."""

    enabled: bool = Field(default=True, description="Grow back to the target size when capacity returns.")
    max_probes: int = Field(
        default=2,
        alias="maxProbes",
        ge=1,
        le=32,
        description="New workers (probes) created at a time while below the target; no more of the job's "
        "probes are ever Pending at once.",
    )
    probe_timeout_seconds: int = Field(
        default=180,
        alias="probeTimeoutSeconds",
        ge=10,
        le=3600,
        description="A probe not bound to a node within this is deleted and retried after a backoff.",
    )
    backoff_seconds: int = Field(
        default=60,
        alias="backoffSeconds",
        ge=1,
        le=3600,
        description="Wait after the first timed-out probe; doubled after each further one (jittered down by up "
        "to 20%), up to maxBackoffSeconds.",
    )
    max_backoff_seconds: int = Field(
        default=900,
        alias="maxBackoffSeconds",
        ge=1,
        le=86400,
        description="Ceiling of the wait between probe attempts.",
    )


class RestartOptions(_Model):
    """How a Restart-mode job's MPI run is stopped and started again (docs/elastic.md, "Elastic without
    Horovod")."""

    signal: RestartSignal = Field(
        default=RestartSignal.SIGUSR1,
        description="Sent to mpirun (which forwards it to the ranks) when the host set changes: checkpoint and "
        "exit. SIGUSR1 is forwarded by OpenMPI 4.1 and 5, MPICH and Intel MPI.",
    )
    min_interval_seconds: int = Field(
        default=300,
        alias="minIntervalSeconds",
        ge=0,
        le=86400,
        description="A regrow restarts the run at most this often (since the last restart, or the job's start). "
        "A scale-in restarts it at once.",
    )


class ElasticPolicy(_Model):
    """Makes the job elastic: targeted scale-in, node-termination reaction and graceful discovery."""

    min_replicas: int = Field(
        default=1, alias="minReplicas", ge=1, le=MAX_REPLICAS, description="Floor for Worker replicas."
    )
    max_replicas: int | None = Field(
        default=None,
        alias="maxReplicas",
        ge=1,
        le=MAX_REPLICAS,
        description="Ceiling for Worker replicas (>= minReplicas).",
    )
    workers_to_delete: list[WorkerName] = Field(
        default_factory=list,
        alias="workersToDelete",
        max_length=MAX_WORKERS_TO_DELETE,
        description="Worker pod names to remove. Lower Worker replicas by as many to shrink; keep it to "
        "drain and replace. Names are removed by the operator once the worker is gone.",
    )
    node_termination_policy: NodeTerminationPolicy = Field(
        default=NodeTerminationPolicy.SCALE_IN,
        alias="nodeTerminationPolicy",
        description="What to do with workers on a node that is going away: ScaleIn (remove them and lower "
        "replicas, never below minReplicas), Replace (remove and recreate elsewhere), Ignore.",
    )
    scale_in_grace_period_seconds: int = Field(
        default=30,
        alias="scaleInGracePeriodSeconds",
        ge=0,
        le=3600,
        description="Time between a worker leaving discover_hosts.sh and its pod being deleted.",
    )
    index_policy: IndexPolicy = Field(
        default=IndexPolicy.FILL_GAPS,
        alias="indexPolicy",
        description="Index of a new worker: FillGaps (lowest free) or Append (above the highest ever used).",
    )
    host_discovery: HostDiscovery = Field(
        default=HostDiscovery.API,
        alias="hostDiscovery",
        description="Where the launcher's discover_hosts.sh reads the host list: API (from the API server with "
        "a per-job ServiceAccount that can read only this job's list; the projected file as fallback) or File "
        "(the projected file only; no RBAC objects).",
    )
    regrow: RegrowPolicy | None = Field(
        default=None,
        description="Growing back after node losses (ScaleIn): on by default; set enabled: false to turn it off.",
    )
    mode: ElasticMode = Field(
        default=ElasticMode.IN_PLACE,
        description="InPlace: the launcher's program follows the host list while it runs (elastic Horovod). "
        "Restart: the operator runs the launcher's command under /etc/mpi/mpijob-run, which stops the MPI run "
        "(restart.signal, until the deadline) when the host list changes and starts it again on the new hosts; "
        "the program resumes from its own checkpoint. Needs the launcher container's command.",
    )
    restart: RestartOptions | None = Field(default=None, description="Restart mode's settings.")


class MPIJobSpec(_Model):
    slots_per_worker: int = Field(
        default=1, alias="slotsPerWorker", ge=0, description="MPI slots per worker, in the hostfile and discovery."
    )
    run_launcher_as_worker: bool = Field(
        default=False,
        alias="runLauncherAsWorker",
        description="Also list the launcher in the hostfile, so it runs ranks too.",
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy, alias="runPolicy", description="Lifecycle: cleanup, TTL, deadline, suspend."
    )
    mpi_replica_specs: dict[ReplicaType, ReplicaSpec] = Field(
        alias="mpiReplicaSpecs", description="Launcher (required, 1 replica) and Worker pod specs."
    )
    ssh_auth_mount_path: str = Field(
        default="/root/.ssh",
        alias="sshAuthMountPath",
        min_length=1,
        description="Where the generated SSH key pair is mounted in every pod.",
    )
    launcher_creation_policy: LauncherCreationPolicy = Field(
        default=LauncherCreationPolicy.AT_STARTUP,
        alias="launcherCreationPolicy",
        description="AtStartup, or WaitForWorkersReady (the launcher is created once every worker is Ready).",
    )
    mpi_implementation: MPIImplementation = Field(
        default=MPIImplementation.OPENMPI,
        alias="mpiImplementation",
        description="OpenMPI, Intel or MPICH: sets the hostfile format and the launcher's environment.",
    )
    elastic_policy: ElasticPolicy | None = Field(default=None, alias="elasticPolicy")

    @property
    def launcher(self) -> ReplicaSpec:
        return self.mpi_replica_specs.get(ReplicaType.LAUNCHER) or ReplicaSpec()

    @property
    def worker(self) -> ReplicaSpec | None:
        return self.mpi_replica_specs.get(ReplicaType.WORKER)

    @property
    def worker_replicas(self) -> int:
        worker = self.worker
        return (worker.replicas or 0) if worker is not None else 0


class JobCondition(_Model):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_update_time: str | None = Field(default=None, alias="lastUpdateTime")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")


class ReplicaStatus(_Model):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    ready: int | None = Field(default=None, description="Workers whose pod is Ready (not in the reference).")
    label_selector: dict[str, Any] | None = Field(default=None, alias="labelSelector")
    selector: str | None = None


class RegrowStatus(_Model):
    """Where an elastic job stands on growing back (present only while it is below its target or backing off)."""

    target: int | None = Field(default=None, ge=0, description="The size the job grows back to.")
    current: int | None = Field(default=None, ge=0, description="Worker replicas now.")
    probes: list[str] = Field(default_factory=list, description="Probe workers waiting for a node.")
    timed_out_attempts: int | None = Field(
        default=None,
        alias="timedOutAttempts",
        ge=0,
        description="Probe rounds in a row that got no node in time (the backoff's exponent).",
    )
    last_timed_out: list[str] = Field(
        default_factory=list, alias="lastTimedOut", description="Probes of the last round that timed out."
    )
    last_attempt_time: str | None = Field(
        default=None, alias="lastAttemptTime", description="When probes were last created."
    )
    next_attempt_time: str | None = Field(
        default=None, alias="nextAttemptTime", description="When the next probes may be created (backoff)."
    )
    reason: str | None = Field(default=None, description="Probing, Backoff, Waiting or Disabled.")
    message: str | None = None


class RestartStatus(_Model):
    """The MPI runs of a Restart-mode job restarted by the operator (never counted against backoffLimit)."""

    count: int = Field(default=0, ge=0, description="Restarts so far.")
    last_cause: str | None = Field(default=None, alias="lastCause", description="scale-in or regrow.")
    last_workers: int | None = Field(default=None, alias="lastWorkers", ge=0, description="Workers of the new run.")
    last_time: str | None = Field(default=None, alias="lastTime", description="When the last restart was asked.")


class JobStatus(_Model):
    conditions: list[JobCondition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict, alias="replicaStatuses")
    start_time: str | None = Field(default=None, alias="startTime")
    completion_time: str | None = Field(default=None, alias="completionTime")
    last_reconcile_time: str | None = Field(default=None, alias="lastReconcileTime")
    state: str | None = Field(default=None, description="Latest true condition type, for kubectl get.")
    leaving_workers: list[str] = Field(
        default_factory=list,
        alias="leavingWorkers",
        description="Workers removed from discovery and waiting for their pods to be deleted.",
    )
    last_worker_index: int | None = Field(
        default=None,
        alias="lastWorkerIndex",
        description="Highest worker index ever created; indexPolicy Append allocates above it.",
    )
    discovered_hosts: list[str] = Field(
        default_factory=list, alias="discoveredHosts", description="Workers currently in discover_hosts.sh."
    )
    recent_worker_failures: int | None = Field(
        default=None,
        alias="recentWorkerFailures",
        ge=0,
        description="Workers that failed recently; replacements back off once they keep failing.",
    )
    last_worker_failure_time: str | None = Field(
        default=None, alias="lastWorkerFailureTime", description="When a worker last failed."
    )
    regrow: RegrowStatus | None = Field(
        default=None, description="Growing back to the target size after node losses (elastic ScaleIn jobs)."
    )
    restarts: RestartStatus | None = Field(
        default=None, description="Restarts of the MPI run (elasticPolicy.mode Restart)."
    )
    ssh_secret_uid: str | None = Field(
        default=None,
        alias="sshSecretUID",
        description="uid of the SSH Secret the operator created for this job; empty while a Secret of that "
        "name that the operator did not create blocks the job.",
    )
