"""What the runtime remembers of each job between its passes: one `JobRecord` per job key, made on first sight
(`Records.renew`, afresh when the name is a new object's) and dropped in one call (`Records.forget`: the job gone
from the cache).

A record holds what the cache cannot show yet or at all: what the job's last passes wrote and expect to see
(client-go's expectations, plus two hand-overs), its writes of the MPIJob in flight (the echo of our own
write: runtime/signals.py), what the spin guard saw (runtime/spin.py), its failures in a row (the backoff),
and the metrics' first-seen stamps (app/metrics.py). Nothing in it is shared with another object: the
executor reports into the record it is given (`Executor.apply(..., writes=record)`), the metrics read the
record the controller hands them.

Not here: what is kept per watched object rather than per job (the event fingerprints of pods and nodes, in
the controller; a node's first-seen signal, in the metrics), and the queue's entries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from mpijob.api.objects import Obj, is_terminating, meta, resource_version_number
from mpijob.executor.apply import Outcome

log = logging.getLogger("mpijob.controller")

Key = tuple[str, str]

# How long a reconcile waits for the cache to show pods it created (or deleted) before planning anyway.
EXPECTATION_TIMEOUT = 10.0


class PodsSeen(Protocol):
    """What `JobRecord.wait` reads of the cache (runtime/cache.py:Cache)."""

    def pod(self, namespace: str, name: str) -> Obj | None: ...

    def config_map_version(self, namespace: str, job: str) -> Any: ...


@dataclass
class SpinSeen:
    """The spin guard's view of the job's last pass whose writes landed (runtime/spin.py)."""

    job_rv: str
    writes: bytes
    passes: int = 1
    # While held: what the job waits for (the Warning's and the condition's text).
    held: str | None = None


@dataclass
class Leaving:
    """A worker of the job on its way out, for the elastic timings (app/metrics.py)."""

    signal: str
    signal_at: float  # monotonic
    left_at: float | None = None  # monotonic, when the write taking it out of discovery succeeded


@dataclass
class Stamps:
    """The metrics' first-seen stamps of one job (app/metrics.py)."""

    # (generation, first monotonic time the operator saw it)
    generation: tuple[int, float] | None = None
    # When discover_hosts.sh's source was last rewritten (the discovery write may go first).
    discovery: float | None = None
    # Pod name -> a worker on its way out.
    leaving: dict[str, Leaving] = field(default_factory=dict)


@dataclass
class JobRecord:
    """One job's memory (see the module's docstring). The executor reports its MPIJob writes into
    `job_writing` and `job_rv` as they happen (executor/apply.py:JobWrites)."""

    # resourceVersion we last wrote of the MPIJob (kept as each write answers) and of its discovery
    # ConfigMap: a cache older than that is stale (our own watch event is on its way and will enqueue the job
    # again), so planning on it would only cause a 409 or undo the write.
    job_rv: int = 0
    config_map_rv: int = 0
    # Writes of the MPIJob in flight: an event of the job meanwhile is the echo of our own write.
    job_writing: int = 0
    # Pods we created, until the cache shows them (or the deadline passes): planning before would count them
    # as missing (Append would even pick new indexes for them).
    pods: tuple[set[str], float] | None = None
    # Pods we deleted, name -> uid, until the cache shows each terminating or gone (or the deadline passes):
    # planning before would delete them again (a second DELETE, Event and launcher patch; seen at scale).
    deleted: tuple[dict[str, str | None], float] | None = None
    # uids of the objects we created (SSH Secrets: not watched), until the job's status records them, so a
    # reconcile after a 409 on the status write still knows the Secret is ours.
    created: dict[tuple[str, str], str | None] = field(default_factory=dict)
    # Answers of live reads (ConfirmAbsence) of a reconcile that ran out of rounds before its plan could
    # be made, for the job's next reconcile (queued at once), until a plan is made: a job that needs more
    # reads than one reconcile may make (more than CONFIRM_ROUNDS x MAX_CONFIRMATIONS workers gone while
    # the operator was down) is planned after several reconciles instead of asking the same first reads
    # forever. A carried answer may only be conservative when it ages: "gone" stays gone (a name of ours is
    # not made again while no plan is made), "exists" at worst keeps a worker or node a plan longer.
    carried_checks: dict[tuple[str, str], bool] = field(default_factory=dict)
    # The spin guard's view of the last pass (runtime/spin.py); None: nothing repeated.
    spin: SpinSeen | None = None
    # Passes in a row that raised or were held back: the exponent of the backoff (runtime/workqueue.py).
    failures: int = 0
    stamps: Stamps = field(default_factory=Stamps)
    # When the record was made, on the monotonic clock (Snapshot.seen_for: a job created suspended waits a
    # moment, plan.py:_settling).
    first_seen: float = field(default_factory=time.monotonic)
    # The uid of the MPIJob this record is of (None until an event shows it): a job deleted and created again
    # under its name is a new object with a fresh record (`Records.renew`).
    uid: str | None = None

    def echo(self, rv: Any) -> bool:
        """Whether a job event carrying `rv` is the echo of our own write: a version we made, or one that
        comes while we write the job (its priority: runtime/signals.py)."""
        return self.job_writing > 0 or 0 < resource_version_number(rv) <= self.job_rv

    def wait(self, key: Key, job: Obj, cache: PodsSeen) -> float | None:
        """Seconds to wait before planning (the cache is behind our writes), or None: plan now."""
        cached = resource_version_number(meta(job).get("resourceVersion"))
        if cached < self.job_rv:
            log.debug("%s/%s: cache at rv %s, we wrote %s; waiting", *key, cached, self.job_rv)
            return 1.0  # fallback only: the watch event for our write normally comes first
        cm_version = cache.config_map_version(*key)
        if cm_version is None:
            self.config_map_rv = 0  # gone: nothing to wait for (the plan makes it again)
        elif resource_version_number(cm_version) < self.config_map_rv:
            log.debug("%s/%s: discovery ConfigMap cache behind our write; waiting", *key)
            return 1.0  # likewise for the discovery write of a deferred reconcile
        if self.pods is not None:
            names, deadline = self.pods
            if time.monotonic() <= deadline and not all(cache.pod(key[0], n) is not None for n in names):
                log.debug("%s/%s: waiting for the cache to show the pods we created", *key)
                return 0.05  # our pod creates are not in the cache yet; their events will enqueue us too
            self.pods = None
        return self._deletions_seen(key, cache)

    def _deletions_seen(self, key: Key, cache: PodsSeen) -> float | None:
        if self.deleted is None:
            return None
        uids, deadline = self.deleted

        def seen(name: str, uid: str | None) -> bool:
            pod = cache.pod(key[0], name)
            return pod is None or is_terminating(pod) or (uid is not None and meta(pod).get("uid") != uid)

        if time.monotonic() <= deadline and not all(seen(n, u) for n, u in uids.items()):
            log.debug("%s/%s: waiting for the cache to show the pods we deleted", *key)
            return 0.05  # their events will enqueue us too
        self.deleted = None
        return None

    def remember(self, outcome: Outcome) -> None:
        """What a batch wrote that the cache must show before the job is planned again (the MPIJob's own
        version is kept by the executor as each write answers)."""
        if outcome.config_map_resource_version is not None:
            self.config_map_rv = resource_version_number(outcome.config_map_resource_version)
        if outcome.created_pods:
            self.pods = (set(outcome.created_pods), time.monotonic() + EXPECTATION_TIMEOUT)
        if outcome.deleted_pods:
            self.deleted = (dict(outcome.deleted_pods), time.monotonic() + EXPECTATION_TIMEOUT)


class Records:
    """Every job's record, by key."""

    def __init__(self) -> None:
        self._by_key: dict[Key, JobRecord] = {}

    def of(self, key: Key) -> JobRecord:
        """The job's record, made on first sight."""
        record = self._by_key.get(key)
        if record is None:
            record = self._by_key[key] = JobRecord()
        return record

    def renew(self, key: Key, uid: str | None) -> None:
        """The MPIJob under `key` is now the object with `uid`; its record is made here, on first sight. A
        record of an earlier object with that name (deleted and created again while no watch ran: a relist
        shows that as a change) is replaced, so nothing it remembered applies to the new job."""
        record = self._by_key.get(key)
        if record is None:
            self._by_key[key] = JobRecord(uid=uid)
        elif record.uid is None:
            record.uid = uid
        elif uid is not None and record.uid != uid:
            log.info("%s/%s: a new MPIJob under this name (uid %s); its record starts afresh", *key, uid)
            self._by_key[key] = JobRecord(uid=uid)

    def get(self, key: Key) -> JobRecord | None:
        """The job's record if it has one (a read that must not make one)."""
        return self._by_key.get(key)

    def forget(self, key: Key) -> None:
        """Everything the runtime remembers of the job, dropped (the job is gone)."""
        self._by_key.pop(key, None)

    def __iter__(self) -> Iterator[JobRecord]:
        # A copy: the metrics read it from their HTTP thread while the event loop adds records.
        return iter(list(self._by_key.values()))

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key
