"""The level-triggered loop: watch events only queue job keys; reconcilers (coroutines, `--workers` of
them) each take one key at a time and run one pass for it.

A pass, `reconcile(key)`: cache -> plan -> apply -> remember: a snapshot from the cache (once it shows our
last writes: the job's record, runtime/record.py), the pure plan(snapshot), the executor applying it, and
what the writes taught us kept in the job's record for the next pass. The informers feed the cache
(`replaced`, `observed`); only the executor writes.

The order of work (docs/design.md, "The order of work"):
- `observed` queues an event's jobs at its priority (runtime/signals.py; LOW until every informer has
  listed), a pod's mere progress `progress_batch` seconds later; at start every cached job once, at LOW;
- a pass returns when and at which priority it wants the next (`Result`: `_next_look`), or to be retried
  after the job's backoff (held back by the spin guard); one that raised backs off at its own priority
  (`_failed`); the queue merges what a pass asks with what events asked meanwhile (`_requeue`);
- the queue (runtime/workqueue.py) does the rest; passes below DISCOVERY hold at most half the reconcilers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import orjson

from mpijob.api.objects import Obj, meta
from mpijob.executor.apply import Executor, Outcome
from mpijob.kube.client import ApiError
from mpijob.planner.actions import Action, Plan
from mpijob.planner.job_status import stalled
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig, format_time
from mpijob.runtime.cache import Cache, Key
from mpijob.runtime.informer import Informer, ident, same_version
from mpijob.runtime.kinds import Watched, watched
from mpijob.runtime.record import JobRecord, Records
from mpijob.runtime.signals import event_priority, only_progress
from mpijob.runtime.spin import SpinGuard
from mpijob.runtime.workqueue import DISCOVERY, LOW, NORMAL, WorkQueue

log = logging.getLogger("mpijob.controller")

# Rounds of live reads one reconcile may do before planning (each round is bounded by the planner).
CONFIRM_ROUNDS = 3
# A pod event that only moves a pod forward (bound, Running, an IP, Ready) queues its job this much later,
# so the workers of a job starting within this window cost one discovery and one status write, not one per
# worker (the Job controller's syncJobBatchPeriod, 1 s there). Nothing else waits: a pod leaving, failing,
# terminating or losing Ready queues its job at once.
PROGRESS_BATCH_SECONDS = 0.5


def _fingerprint(view: dict[str, Any]) -> int:
    """A small stand-in for what the planner reads of an object, resourceVersion aside (it changes on every
    write, relevant or not). A hash, not a copy: one int per pod and node, whatever the object's size.
    The hash of its JSON text: 3 us for a pod's view where `repr` took 27 us (docs/design.md)."""
    meta = {k: v for k, v in (view.get("metadata") or {}).items() if k != "resourceVersion"}
    return hash(orjson.dumps({**view, "metadata": meta}, default=repr))


class Observer(Protocol):
    """Who watches the runtime work (app/metrics.py:Metrics), attached by composition
    (`Controller(..., observer=...)`): told of every batch the executor applied (the actions applied, in
    order, and their outcome) and of every pass (its time, and whether it raised)."""

    def batch(self, cache: Cache, job: Obj, applied: Sequence[Action], outcome: Outcome) -> None: ...

    def reconciled(self, seconds: float, failed: bool) -> None: ...


@dataclass(frozen=True)
class Result:
    """What one pass asks of the queue (runtime/workqueue.py; controller-runtime's `Result`): another pass
    `requeue_after` seconds from now at `priority` (None: no pass asked for), or, with `backoff`, after the
    job's backoff (held back by the spin guard: runtime/spin.py). `clear_stall`: the pass ended a hold, and
    one prompt pass at NORMAL clears the ReconcileStalled condition (job_status.stall_cleared); the queue
    merges it with the rest (the higher priority, the earlier time)."""

    requeue_after: float | None = None
    priority: int = NORMAL
    backoff: bool = False
    clear_stall: bool = False


@dataclass
class Stats:
    events: int = 0
    events_ignored: int = 0
    reconciles: int = 0
    writes: int = 0
    errors: int = 0
    conflicts: int = 0
    # Cached objects found gone from the API server (a relist or a 404 on a write) and dropped.
    ghosts: int = 0
    # GETs made to confirm that an object missing from the cache is really gone.
    live_reads: int = 0
    reconcile_seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)


class Controller:
    def __init__(
        self,
        executor: Executor,
        config: OperatorConfig,
        *,
        reconcilers: int = 4,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        observer: Observer | None = None,
    ) -> None:
        # PodGroups are watched only with gang scheduling on: without it their CRD need not exist.
        self.kinds = watched(config)
        self.by_kind = {w.kind: w for w in self.kinds}
        self.cache = Cache(tuple(w.index for w in self.kinds if w.index not in Cache.INDEXES))
        self.cache.ready = False  # until every informer has listed (the warm gate)
        # Passes below DISCOVERY take at most half the reconcilers (runtime/workqueue.py).
        self.queue = WorkQueue(limit=max(1, reconcilers // 2))
        self.executor = executor
        self.config = config
        # How many reconciles run at once (coroutines taking job keys from the queue; not pods).
        self.reconcilers = reconcilers
        self.clock = clock
        self.observer = observer
        self.stats = Stats()
        self.warm = asyncio.Event()
        # What the runtime remembers of each job between passes (runtime/record.py).
        self.records = Records()
        # Jobs whose passes repeat the same writes without effect are held back (runtime/spin.py).
        self.spin = SpinGuard()
        self.leading = asyncio.Event()
        # Leadership fences every write, not only each dequeued key (issue 8, rule 11).
        executor.fence = self.leading.is_set
        # Per kind: store key -> fingerprint of what the planner last saw of the object.
        self.fingerprints: dict[str, dict[Any, int]] = {}
        # See PROGRESS_BATCH_SECONDS (0: every pod event queues its job at once).
        self.progress_batch = PROGRESS_BATCH_SECONDS
        # Per kind: called with (event type, object) for every event that reaches the queue (metrics).
        self.listeners: dict[str, list[Callable[[str, Obj], None]]] = {}

    def stats_line(self) -> str:
        s = self.stats
        requests = getattr(self.executor.client, "requests", 0)
        return (
            f"reconciles={s.reconciles} writes={s.writes} errors={s.errors} conflicts={s.conflicts} "
            f"requests={requests} reconcile_seconds={s.reconcile_seconds:.3f}"
        )

    # -- watch side (the informers' sink) ----------------------------------------------------------
    def observed(self, w: Watched, type: str, obj: Obj) -> None:
        """One watch event: the cache first, then (unless it changed nothing the planner reads) the jobs it
        concerns are queued, at the event's priority (runtime/signals.py; LOW before the warm gate: the
        first list), a pod's progress after `progress_batch` seconds. No worker sees a key before the cache
        shows the object."""
        self.stats.events += 1
        key = ident(w, obj)
        old = self.cache.indexes[w.index].get(key)
        if w.kind == "MPIJob" and type != "DELETED":
            self.records.renew(key, meta(obj).get("uid"))
        if type == "DELETED":
            self.cache.remove(w.index, key, (obj.get("metadata") or {}).get("uid"))
            self.fingerprints.get(w.kind, {}).pop(key, None)
        else:
            self.cache.put(w.index, key, obj)
            if w.fingerprinted and not self._changed(self.fingerprints.setdefault(w.kind, {}), key, obj):
                return
        if w.kind == "MPIJob" and log.isEnabledFor(logging.DEBUG):
            log.debug("MPIJob event %s %s rv=%s", type, key, obj["metadata"].get("resourceVersion"))
        for listener in self.listeners.get(w.kind, ()):
            listener(type, obj)
        record = self.records.get(key) if w.kind == "MPIJob" else None
        own = record is not None and record.echo(meta(obj).get("resourceVersion"))
        if w.kind == "MPIJob" and type == "DELETED":
            self.records.forget(key)  # all the runtime remembers of the job goes with it
        priority = event_priority(w.kind, type, old, obj, own) if self.cache.ready else LOW
        delay = 0.0
        if self.progress_batch > 0 and w.kind == "Pod" and type != "DELETED" and only_progress(old, obj):
            delay = self.progress_batch
        for job in self._keys(w, obj):
            self.queue.add(job, priority, delay)

    def replaced(self, w: Watched, namespace: str | None, items: dict[Any, Obj]) -> None:
        """A list: the store becomes `items`. What the store had and the list lacks was deleted while no
        watch ran (it is delivered as a deletion); what is new or changed, as an event."""
        store = self.cache.indexes[w.index]
        relist = w.kind in self.cache.listed
        gone = [obj for k, obj in store.items() if k not in items and (namespace is None or k[0] == namespace)]
        for obj in gone:
            if relist:
                self.stats.ghosts += 1
                meta = obj["metadata"]
                log.warning(
                    "dropping %s %s/%s from the cache: gone from the API server (relist)",
                    w.kind,
                    meta.get("namespace"),
                    meta.get("name"),
                )
            self.observed(w, "DELETED", obj)
        for k, obj in items.items():
            old = store.get(k)
            if old is None or not same_version(old, obj):
                self.observed(w, "ADDED" if old is None else "MODIFIED", obj)
        self.cache.listed.add(w.kind)

    def _keys(self, w: Watched, obj: Obj) -> Iterable[Key]:
        if w.keys is not None:
            return w.keys(obj)
        return self.cache.jobs_on_node(str(obj["metadata"].get("name"))) if self.cache.ready else []

    def _changed(self, seen: dict[Any, int], key: Any, view: Obj) -> bool:
        """Whether this event changed what the planner reads of the object (remembered in `seen`); an event
        that did not is counted as ignored."""
        fingerprint = _fingerprint(view)
        if seen.get(key) == fingerprint:
            self.stats.events_ignored += 1
            return False
        seen[key] = fingerprint
        return True

    def forget_ghost(self, kind: str, namespace: str | None, name: str) -> None:
        """A write found the object gone (404): the cached copy is a ghost. Dropped as its deletion event
        would drop it (the jobs it belonged to plan again without it)."""
        w = self.by_kind.get(kind)
        obj = None if w is None else self.cache.indexes[w.index].get((namespace, name) if w.namespaced else name)
        if w is not None and obj is not None:
            self.stats.ghosts += 1
            self.observed(w, "DELETED", obj)

    async def warm_up(self, informers: list[Informer]) -> None:
        """The warm gate: no reconcile before every informer has listed once."""
        await asyncio.gather(*(i.listed.wait() for i in informers))
        self.cache.ready = True
        self.warm.set()

    # -- work side ---------------------------------------------------------------------------------
    async def reconcile(self, key: Key, priority: int = NORMAL) -> Result:
        """One pass for one job, taken at `priority`: cache -> plan -> apply -> remember -> what it asks of the
        queue. Raises what a write failed with (the reconciler backs off)."""
        job = self.cache.mpijob(key)
        if job is None:
            log.debug("%s/%s: not in the cache; nothing to do", *key)
            self.records.forget(key)
            return Result()
        record = self.records.of(key)
        wait = record.wait(key, job, self.cache)
        if wait is not None:
            return Result(wait, priority)  # the event of our own write comes first, as a rule
        started = time.perf_counter()
        held = self.spin.held(record)
        outcome, actions = await self._plan_and_apply(job, held)
        self.stats.reconciles += 1
        self.stats.writes += outcome.writes
        self.stats.reconcile_seconds += time.perf_counter() - started
        record.remember(outcome)
        if outcome.error is not None:
            self.spin.release(record)
            raise outcome.error
        if outcome.conflict is not None:
            self.spin.release(record)
        elif await self._holds(key, job, record, actions[: outcome.applied]):
            return Result(priority=priority, backoff=True)
        again = self._next_look(key, outcome, actions, priority)
        # Held no more: one prompt pass clears the ReconcileStalled condition.
        return replace(again, clear_stall=held is not None)

    async def _holds(self, key: Key, job: Obj, record: JobRecord, applied: Sequence[Action]) -> bool:
        """The spin guard (runtime/spin.py), on a pass whose writes landed: whether the job is held back (its
        passes repeat the same writes at the same resourceVersion; retried with backoff). The pass that
        starts a hold also writes the ReconcileStalled condition and one Warning Event saying what it waits
        for (job_status.stalled: not the plan's, which is what repeats)."""
        message = self.spin.observe(record, str(job["metadata"].get("resourceVersion")), applied)
        if message is not None:
            log.warning("%s/%s: held back: %s", *key, message)
            outcome = await self._apply(job, stalled(job, message, format_time(self.clock())), record)
            self.spin.moved_to(record, outcome.job_resource_version)
            record.remember(outcome)
        return self.spin.held(record) is not None

    def _next_look(self, key: Key, outcome: Outcome, actions: Sequence[Action], priority: int) -> Result:
        """When and at which priority the job's next pass comes, from this pass's outcome (docs/design.md, "The
        order of work", rule 3)."""
        if outcome.gone is not None:
            # A write found the object gone: the cache entry is a ghost (a watch gap). Drop it now rather
            # than retry the same write every 0.2 s until the next relist.
            self.forget_ghost(outcome.gone[0], key[0], outcome.gone[1])
        if outcome.conflict is not None:
            self.stats.conflicts += 1
            log.debug("%s/%s: %s; will retry on fresh data", *key, outcome.conflict)
            return Result(0.2, priority)
        if outcome.deferred:
            # The rest of a pass cut after its urgent writes: behind every signalled job, and ahead of the
            # ordinary rest while its launcher nudges are still to go; a rest of settle creates only, behind
            # every other job's ordinary work (docs/design.md, "The order of work").
            if outcome.settled_later:
                return Result(0.0, LOW)
            urgent_rest = isinstance(actions, Plan) and actions.urgent_rest
            return Result(0.0, DISCOVERY if urgent_rest else NORMAL)
        if outcome.more_reads:
            return Result(0.0, priority)
        return Result(outcome.requeue_after, NORMAL)

    async def _plan_and_apply(self, job: dict[str, Any], held: str | None = None) -> tuple[Outcome, Sequence[Action]]:
        """plan -> apply; a plan that asks for live reads (ConfirmAbsence) gets them and is made again with
        the answers (a few rounds at most; each round asks for a bounded number of reads). Returns the
        outcome and the last plan applied. `held`: the spin guard holds the job back (Snapshot.held_back)."""
        meta = job["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        record = self.records.of(key)
        checks, record.carried_checks = record.carried_checks, {}
        recorded = (job.get("status") or {}).get("sshSecretUID")
        created = {k: v for k, v in record.created.items() if v != recorded}
        record.created = {}
        for _ in range(CONFIRM_ROUNDS):
            snapshot = replace(
                self.cache.snapshot(job, self.clock(), self.config),
                absence_checks=dict(checks),
                created=dict(created),
                held_back=held,
                seen_for=time.monotonic() - record.first_seen,
            )
            # A pass that takes hosts out of discovery plans only those writes; the deferred pass plans the
            # rest on fresh data (docs/design.md, "The order of work").
            actions = plan(snapshot, urgent_first=True)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s/%s: planned at rv %s: %s",
                    *key,
                    meta.get("resourceVersion"),
                    [type(a).__name__ for a in actions] or "nothing",
                )
            outcome = await self._apply(job, actions, record)
            created.update(outcome.created)
            refused = any(v is None for v in outcome.created.values())
            if (not outcome.absence_checks and not refused) or outcome.error is not None:
                break
            # Asked for live reads, or an exclusive create found the name taken: plan again with the answer
            # (the second plan reports the conflict in the status).
            self.stats.live_reads += len(outcome.absence_checks)
            checks.update(outcome.absence_checks)
        else:
            if outcome.absence_checks and outcome.error is None:
                # Out of rounds with the plan still asking: the next reconcile goes on from these answers.
                record.carried_checks = checks
                outcome.more_reads = True
        # Keep what was created until the status shows it; a refusal is retried on the next reconcile.
        kept: dict[tuple[str, str], str | None] = {k: v for k, v in created.items() if v is not None}
        if kept:
            record.created = kept
        return outcome, actions

    async def _apply(self, job: Obj, actions: Sequence[Action], record: JobRecord) -> Outcome:
        """The executor applies `actions`, reporting the job's writes into its record; the observer hears
        what was applied."""
        outcome = await self.executor.apply(job, actions, record)
        if self.observer is not None:
            try:
                self.observer.batch(self.cache, job, actions[: outcome.applied], outcome)
            except Exception:  # an observer (the metrics) must never break a reconcile
                log.exception("observer: could not account for the applied actions")
        return outcome

    async def reconciler(self) -> None:
        await self.warm.wait()
        await self.leading.wait()
        while True:
            taken, priority = await self.queue.get()
            key = cast(Key, taken)
            if not self.leading.is_set():
                # Lost the lease: write nothing more; the key waits for whoever leads next (or us).
                self.queue.add(key, priority)
                self.queue.done(key)
                await self.leading.wait()
                continue
            started, failed = time.perf_counter(), False
            try:
                log.debug("reconcile %s/%s", *key)
                result = await self.reconcile(key, priority)
            except Exception as err:
                failed = True
                self._failed(key, priority, err)
            else:
                self._requeue(key, result)
            finally:
                self.queue.done(key)
                if self.observer is not None:
                    self.observer.reconciled(time.perf_counter() - started, failed)

    def _requeue(self, key: Key, result: Result) -> None:
        """What a pass asked of the queue: each request added as it is (the queue merges them with one another
        and with what events asked meanwhile); a pass that was not held back starts the backoff again."""
        if result.backoff:
            # Held back (the Warning went out once, with the condition): backoff, as for a failure.
            delay = self._back_off(key, result.priority)
            log.debug("reconcile %s/%s: held back; again in %.2fs", key[0], key[1], delay)
            return
        if (record := self.records.get(key)) is not None:
            record.failures = 0  # (a job forgotten in this pass stays forgotten)
        if result.clear_stall:
            self.queue.add(key, NORMAL)
        if result.requeue_after is not None:
            self.queue.add(key, result.priority, result.requeue_after)

    def _back_off(self, key: Key, priority: int) -> float:
        """The job again after its backoff (its failures in a row, counted in its record), at `priority`."""
        record = self.records.of(key)
        delay = self.queue.add_rate_limited(key, priority, record.failures)
        record.failures += 1
        return delay

    def _failed(self, key: Key, priority: int, err: Exception) -> None:
        """A pass that raised: the job again after its backoff, at the priority the pass had."""
        delay = self._back_off(key, priority)
        self.stats.errors += 1
        if isinstance(err, ApiError):
            # An API refusal is expected now and then (quota, admission, RBAC): say it in one line.
            log.warning("reconcile %s/%s: %s; retrying in %.2fs", key[0], key[1], err, delay)
        else:
            log.error("reconcile %s failed; retrying in %.2fs", key, delay, exc_info=err)

    async def run_reconcilers(self) -> None:
        await self.warm.wait()
        # Everything already known gets one look at start, at LOW: decisions recorded before a restart resume
        # here, and any signal that arrives meanwhile goes first.
        keys = self.cache.mpijob_keys()
        for key in keys:
            self.queue.add(key, LOW)
        log.debug("cache warm: %d jobs queued", len(keys))
        await asyncio.gather(*(self.reconciler() for _ in range(self.reconcilers)))
