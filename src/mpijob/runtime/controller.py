"""The level-triggered loop: watch events only enqueue job keys; workers reconcile a key at a time.

reconcile(key) = snapshot from the cache -> plan(snapshot) -> executor.apply(actions). Only kopf's
low-level handlers are used (`index`, `on.event`), so kopf writes nothing to the watched objects.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import orjson

from mpijob.api import constants as c
from mpijob.api.models import GROUP, KIND, PLURAL, VERSION
from mpijob.executor.apply import Executor, Outcome
from mpijob.executor.client import ApiError
from mpijob.planner import podgroups
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import resync, slim
from mpijob.runtime.cache import Cache, Key
from mpijob.runtime.workqueue import WorkQueue

log = logging.getLogger("mpijob.controller")

# Child-name suffixes: an object named like a child of job J maps to J even when J does not own it,
# so a conflicting object that goes away wakes its job up.
# How long a reconcile waits for the cache to show pods it created before planning anyway.
EXPECTATION_TIMEOUT = 10.0
# Rounds of live reads one reconcile may do before planning (each round is bounded by the planner).
CONFIRM_ROUNDS = 3
_SUFFIXES = tuple(name("") for name in (c.launcher_name, c.config_map_name, c.secret_name, c.pdb_name))


def _controller_ref(meta: Any) -> dict[str, Any] | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            found: dict[str, Any] = ref
            return found
    return None


def _job_names_for(name: str, labels: Any, meta: Any) -> list[str]:
    names = []
    ref = _controller_ref(meta)
    if ref is not None and ref.get("kind") == KIND:
        names.append(str(ref.get("name")))
    job_label = (labels or {}).get(c.LABEL_JOB_NAME)
    if job_label:
        names.append(str(job_label))
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            names.append(name[: -len(suffix)])
    head, sep, tail = name.rpartition("-worker-")
    if sep and tail.isdigit():
        names.append(head)
    return list(dict.fromkeys(names))


def _rv(obj: Any) -> int:
    """resourceVersions are opaque, but etcd-backed servers make them increasing integers; treat
    anything else as 0 so the staleness check simply never fires."""
    value = (obj.get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else obj
    try:
        return int(str(value))
    except ValueError:
        return 0


def _fingerprint(view: dict[str, Any]) -> int:
    """A small stand-in for what the planner reads of an object, resourceVersion aside (it changes on every
    write, relevant or not). A hash, not a copy: one int per pod and node, whatever the object's size.
    The hash of its JSON text: 3 us for a pod's view where `repr` took 27 us (docs/design.md)."""
    meta = {k: v for k, v in (view.get("metadata") or {}).items() if k != "resourceVersion"}
    return hash(orjson.dumps({**view, "metadata": meta}, default=repr))


def _raw(body: Any) -> Any:
    """The plain dict under kopf's read-only `Body` view: slimming reads many fields, and every read through
    the view resolves a path (slim + fingerprint of a pod: 57 us through the view, 38 us on the dict).
    The view itself when kopf's layout differs."""
    src = getattr(body, "_src", None)
    return src if isinstance(src, dict) and not getattr(body, "_path", ()) else body


@dataclass
class Stats:
    events: int = 0
    events_ignored: int = 0
    reconciles: int = 0
    writes: int = 0
    errors: int = 0
    conflicts: int = 0
    # Cached objects found gone from the API server (relist or a 404 on a write) and dropped.
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
    ) -> None:
        # PodGroups are watched only with gang scheduling on: without it their CRD need not exist.
        self.cache = Cache(("podgroups",) if config.gang_scheduler else ())
        self.queue = WorkQueue()
        self.executor = executor
        self.config = config
        # How many reconciles run at once (coroutines taking job keys from the queue; not pods).
        self.reconcilers = reconcilers
        self.clock = clock
        self.stats = Stats()
        self.warm = asyncio.Event()
        # resourceVersion we last wrote per job: a cache older than that is stale (our own watch event
        # is on its way and will enqueue the job again), so planning on it would only cause a 409.
        self.written: dict[Key, int] = {}
        self.expected_pods: dict[Key, tuple[set[str], float]] = {}
        # uids of the SSH Secrets we created, until the job's status records them (Secrets are not watched,
        # so this is how a reconcile after a 409 on the status write still knows the Secret is ours).
        self.created: dict[Key, dict[tuple[str, str], str | None]] = {}
        self.written_config_maps: dict[Key, int] = {}
        # Answers of live reads (ConfirmAbsence) of a reconcile that ran out of rounds before its plan could
        # be made, for the job's next reconcile (queued at once), until a plan is made: a job that needs more
        # reads than one reconcile may make (more than CONFIRM_ROUNDS x MAX_CONFIRMATIONS workers gone while
        # the operator was down) is planned after several reconciles instead of asking the same first reads
        # forever. A carried answer may only be conservative when it ages: "gone" stays gone (a name of ours is
        # not made again while no plan is made), "exists" at worst keeps a worker or node a plan longer.
        self.carried_checks: dict[Key, dict[tuple[str, str], bool]] = {}
        self.leading = asyncio.Event()
        # Leadership fences every write, not only each dequeued key (issue 8, rule 11).
        executor.fence = self.leading.is_set
        # Per handler: (namespace, name) -> fingerprint of what the planner last saw of the object.
        self.fingerprints: dict[str, dict[tuple[Any, Any], int]] = {}

    def stats_line(self) -> str:
        s = self.stats
        requests = getattr(self.executor.client, "requests", 0)
        return (
            f"reconciles={s.reconciles} writes={s.writes} errors={s.errors} conflicts={s.conflicts} "
            f"requests={requests} reconcile_seconds={s.reconcile_seconds:.3f}"
        )

    # -- watch side --------------------------------------------------------------------------------
    def register(self, registry: kopf.OperatorRegistry) -> None:
        cache = self.cache

        def child_keys(namespace: str, name: str, labels: Any, meta: Any, **_: Any) -> list[Key]:
            return [(namespace, n) for n in _job_names_for(name, labels, meta)]

        # Every indexer and handler is a coroutine: kopf runs plain functions in a thread pool, and the
        # hand-off (submit, future, wake-up) cost more than the functions themselves (docs/design.md).
        def index(*resource: str, fn: Callable[..., Any], name: str) -> None:
            async def indexer(**kwargs: Any) -> Any:
                return fn(**{**kwargs, "body": _raw(kwargs["body"])})

            indexer.__name__ = name
            kopf.index(*resource, id=name, registry=registry)(indexer)

        index(
            GROUP,
            VERSION,
            PLURAL,
            name="mpijobs",
            fn=lambda namespace, name, body, **_: {(namespace, name): slim.mpijob(body)},
        )

        pods_seen = self.fingerprints.setdefault("pod_events", {})

        def pods(namespace: str, name: str, body: Any, **_: Any) -> Any:
            meta = body.get("metadata") or {}
            spec = body.get("spec") or {}
            labels = meta.get("labels") or {}
            ref = _controller_ref(meta)
            job = (labels or {}).get(c.LABEL_JOB_NAME)
            cache.pod_seen(
                (namespace, name),
                str(meta.get("uid")),
                str(ref["uid"]) if ref else None,
                spec.get("nodeName") or None,
                (namespace, str(job)) if job else None,
            )
            view = slim.pod(body)
            # The pod event handler's work for every event but a deletion, done here: kopf runs the indexer
            # on every other pod event anyway, and a second kopf invocation per pod event (the largest
            # stream) cost more than the work itself (docs/design.md). kopf stores what this returns in
            # the index before it yields to the event loop, so no worker sees the key before the pod.
            self.stats.events += 1
            if self._changed(pods_seen, (namespace, name), view):
                for key in child_keys(namespace, name, labels, meta):
                    self.queue.add(key)
            return {(namespace, name): view}

        index("v1", "pods", name="pods", fn=pods)
        index(
            "batch",
            "v1",
            "jobs",
            name="jobs",
            fn=lambda namespace, name, body, **_: {(namespace, name): slim.batch_job(body)},
        )
        for resource, idx, kind in (
            (("v1", "services"), "services", "Service"),
            (("v1", "configmaps"), "configmaps", "ConfigMap"),
            (("policy", "v1", "poddisruptionbudgets"), "pdbs", "PodDisruptionBudget"),
            (("v1", "serviceaccounts"), "serviceaccounts", "ServiceAccount"),
            (("rbac.authorization.k8s.io", "v1", "roles"), "roles", "Role"),
            (("rbac.authorization.k8s.io", "v1", "rolebindings"), "rolebindings", "RoleBinding"),
        ):
            index(
                *resource,
                name=idx,
                fn=lambda namespace, name, body, _kind=kind, **_: {(namespace, name): slim.owned_object(body, _kind)},
            )
        index("v1", "nodes", name="nodes", fn=lambda name, body, **_: {name: slim.node(body)})

        def on_event(
            resource: tuple[str, ...],
            mapper: Callable[..., list[Key]],
            hid: str,
            view: Callable[[Any], Any] | None = None,
            deletions_only: bool = False,
            trace: bool = False,
        ) -> None:
            """`view`, when given, is what the planner reads of the object: an event that leaves it as it
            was (a node heartbeat, a pod status write that changes nothing we read) enqueues nothing."""
            seen = self.fingerprints.setdefault(hid, {})

            async def handler(**kwargs: Any) -> None:
                cache.capture(kwargs)
                if cache.ready and not self.warm.is_set():
                    self.warm.set()
                self.stats.events += 1
                if trace and log.isEnabledFor(logging.DEBUG):
                    meta = kwargs["body"].get("metadata") or {}
                    log.debug(
                        "%s event %s %s/%s rv=%s",
                        hid,
                        kwargs.get("type") or "LISTED",
                        meta.get("namespace"),
                        meta.get("name"),
                        meta.get("resourceVersion"),
                    )
                if view is not None:
                    meta = kwargs["body"].get("metadata") or {}
                    ident = (meta.get("namespace"), meta.get("name"))
                    if kwargs.get("type") == "DELETED":
                        seen.pop(ident, None)
                        if hid == "pod_events":
                            cache.pod_gone((str(ident[0]), str(ident[1])), str(meta.get("uid")))
                    elif not self._changed(seen, ident, view(_raw(kwargs["body"]))):
                        return
                for key in mapper(**kwargs):
                    self.queue.add(key)

            handler.__name__ = hid
            # `when` is checked before kopf's handler machinery: cheaper than an invocation that returns.
            when = (lambda type, **_: type == "DELETED") if deletions_only else None
            kopf.on.event(*resource, id=hid, registry=registry, when=when)(handler)

        def job_key(namespace: str, name: str, **_: Any) -> list[Key]:
            return [(namespace, name)]

        def node_keys(name: str, **_: Any) -> list[Key]:
            return cache.jobs_on_node(name) if cache.ready else []

        # Every MPIJob event counts (its resourceVersion is how we know our own writes reached the cache).
        on_event((GROUP, VERSION, PLURAL), job_key, "mpijob_events", trace=True)
        # Only deletions: the pods indexer handles every other pod event (kopf does not index a deletion).
        on_event(("v1", "pods"), child_keys, "pod_events", view=slim.pod, deletions_only=True)
        on_event(("batch", "v1", "jobs"), child_keys, "job_events")

        def service_keys(namespace: str, name: str, labels: Any, meta: Any, **_: Any) -> list[Key]:
            # The Service is named exactly like its job: a conflicting one going away must wake the job.
            return list(dict.fromkeys([(namespace, name), *child_keys(namespace, name, labels, meta)]))

        on_event(("v1", "services"), service_keys, "service_events")
        on_event(("v1", "configmaps"), child_keys, "configmap_events")
        on_event(("policy", "v1", "poddisruptionbudgets"), child_keys, "pdb_events")
        on_event(("v1", "serviceaccounts"), child_keys, "serviceaccount_events")
        on_event(("rbac.authorization.k8s.io", "v1", "roles"), child_keys, "role_events")
        on_event(("rbac.authorization.k8s.io", "v1", "rolebindings"), child_keys, "rolebinding_events")
        on_event(("v1", "nodes"), node_keys, "node_events", view=slim.node)
        if self.config.gang_scheduler:
            group, _, version = podgroups.api_version(self.config.gang_scheduler).partition("/")
            index(
                group,
                version,
                "podgroups",
                name="podgroups",
                fn=lambda namespace, name, body, **_: {(namespace, name): slim.owned_object(body, "PodGroup")},
            )
            # Named exactly like its job, like the Service.
            on_event((group, version, "podgroups"), service_keys, "podgroup_events")

    def _changed(self, seen: dict[tuple[Any, Any], int], ident: tuple[Any, Any], view: Any) -> bool:
        """Whether this event changed what the planner reads of the object (remembered in `seen`); an event
        that did not (a node heartbeat, a pod status write that changes nothing we read) is counted as
        ignored."""
        fingerprint = _fingerprint(view)
        if seen.get(ident) == fingerprint:
            self.stats.events_ignored += 1
            return False
        seen[ident] = fingerprint
        return True

    def forget_ghost(self, kind: str, obj: dict[str, Any]) -> None:
        """Enqueues the jobs a cached object that is gone from the API server belonged to (before it is
        dropped from the cache): they plan again without it."""
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace"), str(meta.get("name"))
        self.stats.ghosts += 1
        if kind == "Node":
            keys = self.cache.jobs_on_node(name) if self.cache.ready else []
        elif kind == "MPIJob":
            keys = [(str(ns), name)]
        else:
            keys = [(str(ns), n) for n in _job_names_for(name, meta.get("labels"), meta)]
            if kind == "Service":
                keys.append((str(ns), name))
        for key in dict.fromkeys(keys):
            self.queue.add(key)

    # -- work side ---------------------------------------------------------------------------------
    def _pods_seen(self, key: Key) -> bool:
        """Whether the cache shows every pod we created for this job (or we stopped waiting)."""
        expected = self.expected_pods.get(key)
        if expected is None:
            return True
        names, deadline = expected
        if time.monotonic() > deadline or all(self.cache.pod(key[0], n) is not None for n in names):
            del self.expected_pods[key]
            return True
        return False

    async def reconcile(self, key: Key) -> float | None:
        """One pass for one job. Returns seconds until the job wants another look, if it does."""
        job = self.cache.mpijob(key)
        if job is None:
            log.debug("%s/%s: not in the cache; nothing to do", *key)
            self.written.pop(key, None)
            self.expected_pods.pop(key, None)
            self.created.pop(key, None)
            self.written_config_maps.pop(key, None)
            self.carried_checks.pop(key, None)
            return None
        if _rv(job) < self.written.get(key, 0):
            log.debug("%s/%s: cache at rv %s, we wrote %s; waiting", *key, _rv(job), self.written.get(key))
            return 1.0  # fallback only: the watch event for our write normally comes first
        cm_version = self.cache.config_map_version(*key)
        if cm_version is None:
            self.written_config_maps.pop(key, None)  # gone: nothing to wait for (the plan makes it again)
        elif _rv(cm_version) < self.written_config_maps.get(key, 0):
            log.debug("%s/%s: discovery ConfigMap cache behind our write; waiting", *key)
            return 1.0  # likewise for the discovery write of a deferred reconcile
        if not self._pods_seen(key):
            log.debug("%s/%s: waiting for the cache to show the pods we created", *key)
            return 0.05  # our pod creates are not in the cache yet; their events will enqueue us too
        started = time.perf_counter()
        outcome = await self._plan_and_apply(job)
        self.stats.reconciles += 1
        self.stats.writes += outcome.writes
        self.stats.reconcile_seconds += time.perf_counter() - started
        if outcome.job_resource_version is not None:
            self.written[key] = _rv(outcome.job_resource_version)
        if outcome.config_map_resource_version is not None:
            self.written_config_maps[key] = _rv(outcome.config_map_resource_version)
        if outcome.created_pods:
            # Expectations, as client-go controllers keep them: planning again before the cache shows these
            # pods would count them as missing (Append would even pick new indexes for them).
            self.expected_pods[key] = (set(outcome.created_pods), time.monotonic() + EXPECTATION_TIMEOUT)
        if outcome.error is not None:
            raise outcome.error
        if outcome.gone is not None:
            # A write found the object gone: the cache entry is a ghost (a watch gap). Drop it now rather
            # than retry the same write every 0.2 s until the next relist.
            ghost = resync.cached_object(self.cache, outcome.gone[0], key[0], outcome.gone[1])
            if ghost is not None:
                self.forget_ghost(outcome.gone[0], ghost)
                resync.drop(self.cache, outcome.gone[0], ghost)
        if outcome.conflict is not None:
            self.stats.conflicts += 1
            log.debug("%s/%s: %s; will retry on fresh data", *key, outcome.conflict)
            return 0.2
        if outcome.deferred:
            # Behind every job already queued (their urgent writes go first); the ConfigMap's watch event
            # queues it too.
            self.queue.add(key)
            return None
        return outcome.requeue_after

    async def _plan_and_apply(self, job: dict[str, Any]) -> Outcome:
        """plan -> apply; a plan that asks for live reads (ConfirmAbsence) gets them and is made again with
        the answers (a few rounds at most; each round asks for a bounded number of reads)."""
        meta = job["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        checks: dict[tuple[str, str], bool] = self.carried_checks.pop(key, {})
        recorded = (job.get("status") or {}).get("sshSecretUID")
        created = {k: v for k, v in self.created.pop(key, {}).items() if v != recorded}
        for _ in range(CONFIRM_ROUNDS):
            snapshot = replace(
                self.cache.snapshot(job, self.clock(), self.config), absence_checks=dict(checks), created=dict(created)
            )
            actions = plan(snapshot)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s/%s: planned at rv %s: %s",
                    *key,
                    meta.get("resourceVersion"),
                    [type(a).__name__ for a in actions] or "nothing",
                )
            outcome = await self.executor.apply(job, actions)
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
                self.carried_checks[key] = checks
                outcome.requeue_after = 0.0
        # Keep what was created until the status shows it; a refusal is retried on the next reconcile.
        kept: dict[tuple[str, str], str | None] = {k: v for k, v in created.items() if v is not None}
        if kept:
            self.created[key] = kept
        return outcome

    async def reconciler(self) -> None:
        await self.warm.wait()
        await self.leading.wait()
        while True:
            key = cast(Key, await self.queue.get())
            if not self.leading.is_set():
                # Lost the lease: write nothing more; the key waits for whoever leads next (or us).
                self.queue.done(key)
                self.queue.add(key)
                await self.leading.wait()
                continue
            try:
                log.debug("reconcile %s/%s", *key)
                again = await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                # An API refusal is expected now and then (quota, admission, RBAC): say it in one line.
                self.stats.errors += 1
                delay = self.queue.add_rate_limited(key)
                log.warning("reconcile %s/%s: %s; retrying in %.2fs", key[0], key[1], err, delay)
            except Exception:
                self.stats.errors += 1
                delay = self.queue.add_rate_limited(key)
                log.exception("reconcile %s failed; retrying in %.2fs", key, delay)
            else:
                self.queue.forget(key)
                if again is not None:
                    self.queue.add_after(key, again)
            finally:
                self.queue.done(key)

    async def run_reconcilers(self) -> None:
        await self.warm.wait()
        # Everything already known gets one look at start: decisions recorded before a restart resume here.
        keys = self.cache.mpijob_keys()
        for key in keys:
            self.queue.add(key)
        log.debug("cache warm: %d jobs queued", len(keys))
        await asyncio.gather(*(self.reconciler() for _ in range(self.reconcilers)))
