"""Prometheus metrics: the reference operator's names unchanged, plus the controller's and elastic ones.

The reference operator's dashboards keep working (`mpi_operator_jobs_created_total`,
`mpi_operator_jobs_successful_total`, `mpi_operator_jobs_failed_total`, `mpi_operator_job_info`,
`mpi_operator_is_leader`). Everything else is named `mpijob_*`, `mpijob_operator_is_leader` included: the same
gauge under our own name, which alerts and dashboards read, since the reference exports the other one while
both run side by side (docs/migration.md).

Nothing here decides anything: metrics are read off what the controller already does, which tells them as
it goes (`Metrics` is the controller's observer: runtime/controller.py:Observer, composed at start-up by
app/operator.py, no subclass). The planner tags each write with what it decided (planner/actions.py:Tag:
a condition turned True, a worker marked leaving, a regrow probe created, timed out or bound, workers lost)
and the counters count the tags of the writes the executor applied; the timings read which objects were
written (a ConfigMap rewritten, a pod deleted); the API client reports
every response; gauges read the queue and the cache at scrape time. Elastic timings use first-seen stamps
from the operator's own watch events, so they measure the operator (watch delivery included), not the clock
of whoever tainted the node.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mpijob.api import constants as c
from mpijob.api.objects import Obj, is_leaving
from mpijob.executor.apply import Outcome
from mpijob.executor.events import DROP_REASONS, EventPoster
from mpijob.planner.actions import (
    BECAME_TRUE,
    LEAVING,
    PROBE_CREATED,
    PROBE_TIMED_OUT,
    PROBES_BOUND,
    WORKER_LOST,
    Action,
    Create,
    Delete,
    Patch,
    Tag,
)
from mpijob.planner.snapshot import OperatorConfig, Snapshot, parse_time
from mpijob.planner.status import (
    BELOW_MIN_REPLICAS,
    CREATED,
    FAILED,
    RESTARTING,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    read_status,
)
from mpijob.planner.status import is_true as status_is_true
from mpijob.planner.status import state as job_state
from mpijob.planner.workers import DISRUPTED, node_signal
from mpijob.runtime.cache import Cache
from mpijob.runtime.controller import Controller
from mpijob.runtime.record import Leaving, Records
from mpijob.runtime.record import Stamps as JobStamps

log = logging.getLogger("mpijob.metrics")

# Latency buckets from 10 ms (an idle operator) to 10 min (a long scale-in grace period). 2 s is one: the
# signal -> discovery alert (deploy/prometheus/mpijob-alerts.yaml) pages on a p99 above it, and a quantile
# is only exact at a bucket boundary.
_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10, 30, 60, 120, 300, 600)
_PRECONDITIONED_WRITES = (("patch", "mpijobs"), ("patch", "mpijobs/status"), ("patch", "pods"), ("patch", "configmaps"))
# The regrow probe tags (planner/actions.py) by their result label.
_PROBES = {PROBE_CREATED: "created", PROBE_TIMED_OUT: "timed-out", PROBES_BOUND: "bound"}
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
# /api/v1/namespaces/ns/pods/name/status -> pods/status ; /apis/g/v/namespaces/ns/mpijobs -> mpijobs
_PATH = re.compile(r"^/apis?/(?:[^/]+/)?v[^/]*/(?:namespaces/[^/]+/)?(?P<res>[^/]+)(?:/[^/]+(?:/(?P<sub>[^/]+))?)?")


def resource_of(path: str) -> str:
    """`pods`, `pods/status`, `mpijobs/scale`... from a request path (query strings ignored)."""
    match = _PATH.match(path.split("?", 1)[0])
    if match is None:
        return "other"
    res, sub = match.group("res"), match.group("sub")
    return f"{res}/{sub}" if sub else res


def signal_label(signal: str) -> str:
    """node_signal()'s text as a label value: `taint:<key>`, `cordoned`, `node-deleted`."""
    if signal.startswith("taint "):
        return "taint:" + signal[len("taint ") :]
    return "node-deleted" if signal == "deleted" else signal


def _reason_label(reason: str) -> str:
    # Leave reasons the planner writes: workersToDelete, scale-down, suspended, disruption-target, "worker Failed"...
    return reason.lower().replace(" ", "-") if reason.startswith("worker ") else reason


@dataclass
class _Stamps:
    """First-seen stamps of what is not one job's (a job's own are in its record: runtime/record.py)."""

    # node -> (first monotonic time the operator saw it terminating, signal label)
    nodes: dict[str, tuple[float, str]] = field(default_factory=dict)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # -- the reference operator's names and labels, unchanged --
        self.jobs_created = Counter("mpi_operator_jobs_created", "Counts number of MPI jobs created", registry=r)
        self.jobs_successful = Counter(
            "mpi_operator_jobs_successful", "Counts number of MPI jobs successful", registry=r
        )
        self.jobs_failed = Counter("mpi_operator_jobs_failed", "Counts number of MPI jobs failed", registry=r)
        self.is_leader = Gauge(
            "mpi_operator_is_leader", "Is this client the leader of this mpi-operator client set?", registry=r
        )
        self.own_is_leader = Gauge(
            "mpijob_operator_is_leader", "1 while this mpijob operator process holds its Lease", registry=r
        )
        # -- the controller --
        self.reconcile_seconds = Histogram(
            "mpijob_reconcile_duration_seconds", "Time of one reconcile (plan and apply)", buckets=_BUCKETS, registry=r
        )
        self.reconcile_errors = Counter(
            "mpijob_reconcile_errors_total", "Reconciles that failed and were re-queued with back-off", registry=r
        )
        self.reconcile_conflicts = Counter(
            "mpijob_reconcile_conflicts_total",
            "Reconciles stopped by a stale cache (409 on a resourceVersion precondition, or 404)",
            registry=r,
        )
        self.queue_depth = Gauge("mpijob_workqueue_depth", "Job keys waiting in the work queue", registry=r)
        self.api_writes = Counter(
            "mpijob_api_writes_total",
            "API write requests by verb, resource and HTTP status code",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_conflicts = Counter(
            "mpijob_api_conflicts_total", "API writes answered 409 Conflict", ["verb", "resource"], registry=r
        )
        # The writes that carry a resourceVersion precondition, at 0 from the start: a rate over them is 0,
        # not "no data", until the first conflict (the dashboard's conflicts panel, the storm alert).
        for verb, resource in _PRECONDITIONED_WRITES:
            self.api_conflicts.labels(verb, resource)
        self._elastic(r)
        self.stamps = _Stamps()
        # The jobs' records, where each job's own stamps are kept: the controller's once `register`ed.
        self.records = Records()
        self.clock: Callable[[], float] = time.monotonic

    def _elastic(self, r: CollectorRegistry) -> None:
        self.scale_in_decisions = Counter(
            "mpijob_elastic_scale_in_decisions_total",
            "Reconciles that took workers out of a job, by what asked for it",
            ["signal"],
            registry=r,
        )
        self.workers_removed = Counter(
            "mpijob_elastic_workers_removed_total",
            "Leaving workers whose pod the operator deleted",
            ["signal"],
            registry=r,
        )
        self.signal_to_discovery = Histogram(
            "mpijob_elastic_signal_to_discovery_seconds",
            "From the operator first seeing a scale-in signal to the worker's removal from discover_hosts.sh",
            ["signal"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.discovery_to_deleted = Histogram(
            "mpijob_elastic_discovery_to_deleted_seconds",
            "From a worker's removal from discover_hosts.sh to the deletion of its pod (grace period included)",
            ["signal"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.signal_to_deleted = Histogram(
            "mpijob_elastic_signal_to_deleted_seconds",
            "From the operator first seeing a scale-in signal to the deletion of the worker's pod",
            ["signal"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.regrow_probes = Counter(
            "mpijob_elastic_regrow_probes_total",
            "Regrow probe workers: created, bound (got a node and counted in Worker replicas), timed-out (deleted "
            "for getting no node within probeTimeoutSeconds)",
            ["result"],
            registry=r,
        )
        # At 0 from the start: an increase() over them counts the first probes too (a series that appears at
        # 2 shows Prometheus no increase), as for the conflicts above.
        for result in ("created", "bound", "timed-out"):
            self.regrow_probes.labels(result)

    # -- wiring (one call each from the operator; the controller tells `batch` and `reconciled`) -------------
    def attach(self, controller: Controller) -> None:
        """Gauges read at scrape time, so they cost nothing between scrapes."""
        self.queue_depth.set_function(lambda: float(len(controller.queue)))
        self.is_leader.set_function(lambda: 1.0 if controller.leading.is_set() else 0.0)
        self.own_is_leader.set_function(lambda: 1.0 if controller.leading.is_set() else 0.0)
        self.registry.register(_CacheCollector(controller.cache))
        self.registry.register(_JobStateCollector(controller.cache))
        self.registry.register(_SpinCollector(controller))

    def attach_events(self, poster: EventPoster) -> None:
        self.registry.register(_EventCollector(poster))

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)
        log.info("serving /metrics on %s:%d", address, port)

    def register(self, controller: Controller, config: OperatorConfig) -> None:
        """First-seen stamps for signals, from the same watch events the controller queues jobs for; a job's
        own are kept in its record (dropped with it when the job is gone)."""
        self.records = controller.records

        def nodes(type: str, body: Obj) -> None:
            name = str(body["metadata"].get("name"))
            if type == "DELETED":
                self.stamps.nodes.setdefault(name, (self.clock(), "node-deleted"))
                return
            sig = node_signal(Snapshot(job={}, now=datetime.now(UTC), nodes={name: body}, config=config), name)
            if sig is None:
                self.stamps.nodes.pop(name, None)  # taint removed: a later signal is a new one
            else:
                self.stamps.nodes.setdefault(name, (self.clock(), signal_label(sig)))

        def mpijobs(type: str, body: Obj) -> None:
            meta = body["metadata"]
            if type == "DELETED":
                return  # the record goes with the job (Controller.observed)
            stamps = self.records.of((str(meta.get("namespace")), str(meta.get("name")))).stamps
            gen = int(meta.get("generation") or 0)
            if stamps.generation is None or stamps.generation[0] != gen:
                stamps.generation = (gen, self.clock())

        controller.listeners.setdefault("Node", []).append(nodes)
        controller.listeners.setdefault("MPIJob", []).append(mpijobs)

    # -- hooks -----------------------------------------------------------------------------------------
    def api_response(self, method: str, path: str, status: int) -> None:
        verb = _VERBS.get(method)
        if verb is None:
            return
        resource = resource_of(path)
        self.api_writes.labels(verb, resource, str(status)).inc()
        if status == 409:
            self.api_conflicts.labels(verb, resource).inc()

    # -- the runtime's observer (runtime/controller.py:Observer) -----------------------------------------
    def batch(self, cache: Cache, job: Obj, applied: Sequence[Action], outcome: Outcome) -> None:
        """A batch the executor applied: `applied` are the actions it applied, in order."""
        if outcome.conflict is not None:
            self.reconcile_conflicts.inc()
        self.applied(cache, job, applied)

    def reconciled(self, seconds: float, failed: bool) -> None:
        """A pass: its time, and whether it raised (a hold by the spin guard is no failure: counted by
        mpijob_reconcile_spins_total)."""
        self.reconcile_seconds.observe(seconds)
        if failed:
            self.reconcile_errors.inc()

    def applied(self, cache: Cache, job: dict[str, Any], actions: Sequence[Action]) -> None:
        """`actions` are the ones the executor applied, in order: the counters count the planner's tags on
        them (planner/actions.py:Tag), the timings read which objects were written."""
        now = self.clock()
        meta = job.get("metadata") or {}
        namespace, job_name = str(meta.get("namespace")), str(meta.get("name"))
        stamps = self.records.of((namespace, job_name)).stamps
        # Forget workers of this job that went away without us deleting them (bounded memory). Not those this
        # batch deletes: their DELETED events can reach the cache before the batch is reported, and their
        # removal must still be counted with their signal.
        deleting = {a.name for a in actions if isinstance(a, Delete) and _is_worker_delete(a, job_name)}
        for name in [n for n in stamps.leaving if n not in deleting and cache.pod(namespace, n) is None]:
            del stamps.leaving[name]
        decisions: set[str] = set()
        for action in actions:
            for tag in action.tags if isinstance(action, Create | Patch | Delete) else ():
                if tag.name == LEAVING and isinstance(action, Patch):
                    decisions.add(self._leaving(cache, job, stamps, action.name, tag.label, now))
                else:
                    decisions |= self._counted(tag)
            if isinstance(action, Patch | Create) and _is_config_map(action, job_name):
                # discover_hosts.sh rewritten: every marked worker of this job is out of it now.
                stamps.discovery = now
                for leaving in stamps.leaving.values():
                    self._left(leaving, now)
            elif isinstance(action, Delete) and _is_worker_delete(action, job_name):
                self._deleted(cache, stamps, namespace, action.name, now)
        for signal in decisions:
            self.scale_in_decisions.labels(signal).inc()

    def _counted(self, tag: Tag) -> set[str]:
        """A tag that is counted as it is; returns the scale-in decision it is, if any."""
        counters = {CREATED: self.jobs_created, SUCCEEDED: self.jobs_successful, FAILED: self.jobs_failed}
        if tag.name == BECAME_TRUE and tag.label in counters:
            counters[tag.label].inc()
        elif tag.name in _PROBES:
            self.regrow_probes.labels(_PROBES[tag.name]).inc(tag.count)
        elif tag.name == WORKER_LOST:
            return {"worker-lost"}
        return set()

    def _leaving(self, cache: Cache, job: Obj, stamps: JobStamps, name: str, reason: str, now: float) -> str:
        """A worker marked leaving (for `reason`): stamped with its signal and when it was seen, out of
        discovery at once if it was never listed or the discovery write went first. Returns its signal."""
        meta = job.get("metadata") or {}
        seen = stamps.generation
        pod = cache.pod(str(meta.get("namespace")), name) or {}
        node = (pod.get("spec") or {}).get("nodeName")
        reason = reason or "workersToDelete"
        # The operator lists a terminating node's workers in workersToDelete: that is the signal.
        stamp = self.stamps.nodes.get(node) if node and reason == "workersToDelete" else None
        if stamp is not None:
            leaving = Leaving(stamp[1], stamp[0])
        else:
            # A pod's own disruption (DisruptionTarget) has no watch stamp: timed from this plan.
            spec_seen = seen[1] if seen is not None and seen[0] == int(meta.get("generation") or 0) else now
            leaving = Leaving(_reason_label(reason), now if reason == DISRUPTED else spec_seen)
        stamps.leaving[name] = leaving
        written = stamps.discovery
        if (pod.get("status") or {}).get("phase") != "Running":
            self._left(leaving, now)  # never listed: out of discovery as soon as it is marked
        elif written is not None and written >= leaving.signal_at:
            self._left(leaving, written)  # the discovery write went first (urgent writes first)
        return leaving.signal

    def _left(self, leaving: Leaving, now: float) -> None:
        if leaving.left_at is None:
            leaving.left_at = now
            self.signal_to_discovery.labels(leaving.signal).observe(max(0.0, now - leaving.signal_at))

    def _deleted(self, cache: Cache, stamps: JobStamps, namespace: str, name: str, now: float) -> None:
        leaving = stamps.leaving.pop(name, None)
        if leaving is None:
            # Marked before this process started: the annotation still says when it left discovery.
            pod = cache.pod(namespace, name) or {}
            reason = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_LEAVING_REASON)
            since = parse_time(((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_LEAVING_SINCE))
            signal = _reason_label(str(reason or "unknown"))
            self.workers_removed.labels(signal).inc()
            if since is not None:
                self.discovery_to_deleted.labels(signal).observe(max(0.0, (datetime.now(UTC) - since).total_seconds()))
            return
        self.workers_removed.labels(leaving.signal).inc()
        if leaving.left_at is not None:
            self.discovery_to_deleted.labels(leaving.signal).observe(max(0.0, now - leaving.left_at))
        self.signal_to_deleted.labels(leaving.signal).observe(max(0.0, now - leaving.signal_at))


def _is_worker_delete(action: Delete, job: str) -> bool:
    return action.kind == "Pod" and c.worker_index(job, action.name) is not None


def _is_config_map(action: Patch | Create, job: str) -> bool:
    if isinstance(action, Create):
        return bool(action.obj.get("kind") == "ConfigMap")
    return action.kind == "ConfigMap" and action.name == c.config_map_name(job)


def _cached_pods(cache: Cache) -> list[Obj]:
    """The cached pods, copied first: a scrape runs in prometheus_client's HTTP thread while the event loop
    changes the store, and iterating the store itself then fails ("dictionary changed size during
    iteration", seen at 1250 x 8 in bench/scale.py: the scrape answered an error). Copying a dict's values is
    one C call, done under the GIL at once."""
    return list((cache.indexes.get("pods") or {}).values())


class _CacheCollector(Collector):
    """`mpi_operator_job_info{launcher,namespace}` (the reference's gauge) and the leaving workers, read
    from the cache at scrape time."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily("mpi_operator_job_info", "Information about MPIJob", labels=["launcher", "namespace"])
        leaving = GaugeMetricFamily(
            "mpijob_elastic_leaving_workers", "Workers out of discovery whose pod is not deleted yet"
        )
        count = 0
        if self.cache.ready:
            for namespace, name in self.cache.mpijob_keys():
                info.add_metric([c.launcher_name(name), namespace], 1.0)
            for pod in _cached_pods(self.cache):
                if is_leaving(pod):
                    count += 1
        leaving.add_metric([], float(count))
        yield info
        yield leaving
        yield from self._regrow()

    def _regrow(self) -> Iterator[GaugeMetricFamily]:
        """Elastic jobs below their regrow target (the target annotation above Worker replicas), and those whose
        next probe waits in backoff (status.regrow.nextAttemptTime in the future)."""
        below = GaugeMetricFamily(
            "mpijob_elastic_jobs_below_target", "Elastic jobs whose Worker replicas are below their regrow target"
        )
        backoff = GaugeMetricFamily(
            "mpijob_elastic_jobs_regrow_backoff", "Elastic jobs whose next regrow attempt waits in backoff"
        )
        now = datetime.now(UTC)
        low = waiting = 0
        if self.cache.ready:
            for key in self.cache.mpijob_keys():
                job = self.cache.mpijob(key) or {}
                annotations = (job.get("metadata") or {}).get("annotations") or {}
                worker = (((job.get("spec") or {}).get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas")
                target = str(annotations.get(c.ANNOTATION_REGROW_TARGET) or "")
                if target.isdigit() and isinstance(worker, int) and int(target) > worker:
                    low += 1
                regrow = (job.get("status") or {}).get("regrow") or {}
                next_at = parse_time(regrow.get("nextAttemptTime")) if isinstance(regrow, dict) else None
                if next_at is not None and next_at > now:
                    waiting += 1
        below.add_metric([], float(low))
        backoff.add_metric([], float(waiting))
        yield below
        yield backoff


# `mpijob_jobs{state}`: every state a job can be in, so a dashboard's series exist (at 0) before any job does.
_STATES = ("", CREATED, RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
_PHASES = ("Pending", "Running", "Succeeded", "Failed")


class _JobStateCollector(Collector):
    """Jobs by state, worker pods by phase and elastic jobs below their floor, read from the cache at scrape
    time (the conditions the planner wrote, the pods' phases: nothing is decided here)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("mpijob_jobs", "MPIJobs by state (the STATE column of kubectl get)", labels=["state"])
        workers = GaugeMetricFamily("mpijob_worker_pods", "Worker pods of MPIJobs by phase", labels=["phase"])
        below = GaugeMetricFamily(
            "mpijob_elastic_jobs_below_min_replicas", "Elastic MPIJobs whose condition BelowMinReplicas is True"
        )
        counts = dict.fromkeys(_STATES, 0)
        under = 0
        if self.cache.ready:
            for key in self.cache.mpijob_keys():
                job = self.cache.mpijob(key) or {}
                status = read_status(job.get("status"))
                state = job_state(status)
                counts[state] = counts.get(state, 0) + 1
                under += status_is_true(status, BELOW_MIN_REPLICAS)
        phases = dict.fromkeys(_PHASES, 0)
        if self.cache.ready:
            for pod in _cached_pods(self.cache):
                if ((pod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER:
                    phase = str((pod.get("status") or {}).get("phase") or "Pending")
                    phases[phase] = phases.get(phase, 0) + 1
        for phase, count in phases.items():
            workers.add_metric([phase], float(count))
        for state, count in counts.items():
            # "": no condition yet (kubectl's STATE column is empty then)
            jobs.add_metric([state or "Pending"], float(count))
        below.add_metric([], float(under))
        yield jobs
        yield workers
        yield below


class _SpinCollector(Collector):
    """The spin guard (runtime/spin.py), read at scrape time."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        guard = self.controller.spin
        held = sum(1 for record in self.controller.records if guard.held(record) is not None)
        yield CounterMetricFamily(
            "mpijob_reconcile_spins",
            "Jobs held back because their passes repeated the same writes at the same resourceVersion without effect",
            value=guard.spins,
        )
        yield GaugeMetricFamily(
            "mpijob_jobs_held_back",
            "Jobs held back by the spin guard now (retried with backoff)",
            value=held,
        )


class _EventCollector(Collector):
    """The Event poster's counts (executor/events.py), read at scrape time."""

    def __init__(self, poster: EventPoster) -> None:
        self.poster = poster

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("mpijob_events_posted", "Events posted", value=self.poster.posted)
        yield CounterMetricFamily(
            "mpijob_event_retries", "Event posts tried again (429, 5xx, timeout)", value=self.poster.retried
        )
        dropped = CounterMetricFamily(
            "mpijob_events_dropped",
            "Events not posted, by why: rejected (4xx), retries (still failing after the last try), stopping",
            labels=["reason"],
        )
        # Every reason, at 0 from the start: a rate over them is 0, not "no data".
        for reason in sorted({*DROP_REASONS, *self.poster.dropped}):
            dropped.add_metric([reason], self.poster.dropped[reason])
        yield dropped
