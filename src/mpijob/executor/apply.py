"""Applies the planner's actions to the API server, in order, stopping at the first real failure.

Tolerated outcomes keep the operator idempotent under a stale cache: creating an object that already
exists, or deleting one that is gone (or was replaced: uid precondition), is a no-op, and then the Events
the write carries (`announce`) are not posted. A 409 on a write with a resourceVersion precondition means the
cache was stale: stop and let the reconcile run again on fresh data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from mpijob.api.constants import EVENT_SOURCE, JOB_CREATED_REASON
from mpijob.api.models import API_VERSION
from mpijob.api.objects import controller_uid, resource_version_number
from mpijob.executor.events import EventPoster, post_event
from mpijob.executor.sshkeys import ssh_key_pair
from mpijob.kube.client import ApiError, Client, WriteClass
from mpijob.kube.resources import collection_path, object_path
from mpijob.planner.actions import (
    Action,
    ConfirmAbsence,
    Create,
    Defer,
    Delete,
    Emit,
    Patch,
    Plan,
    RequeueAfter,
    Write,
)
from mpijob.planner.snapshot import format_time

log = logging.getLogger("mpijob.executor")


# The planner announces each create ("SuccessfulCreatePod", ...); the executor posts one Event per batch for
# all of them, with the reason Kubernetes' own controllers use for creates.
_CREATE = "SuccessfulCreate"
# A new job's first batch announces the Created condition and creates its objects: one Event says both, under
# the reason the reference posts and its tests wait for ("MPIJobCreated"): one Event write per new job fewer.
_JOB_CREATED = ("Normal", JOB_CREATED_REASON)


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: what the API server makes of `target` under an application/merge-patch+json `patch`."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = json_merge_patch(out.get(key), value)
    return out


def _join(messages: list[str]) -> str:
    """One message for several Events of one reason, grouped by their text before the object's name:
    "Created Service j; Created Pod j-worker-0, j-worker-1"."""
    groups: dict[str, list[str]] = {}
    for message in messages:
        head, _, tail = message.rpartition(" ")
        groups.setdefault(head, []).append(tail)
    return "; ".join(f"{head} {', '.join(tails)}" if head else ", ".join(tails) for head, tails in groups.items())


def _with_uids(action: Patch, uids: dict[str, str]) -> Patch:
    """The status write, also recording the uids of what this batch created (a shallow copy)."""
    return replace(action, patch={**action.patch, "status": {**(action.patch.get("status") or {}), **uids}})


@dataclass
class Outcome:
    writes: int = 0
    requeue_after: float | None = None
    # Set when execution stopped early: the reconcile should run again soon.
    conflict: str | None = None
    error: Exception | None = None
    # resourceVersion of the MPIJob after our last write to it, if we wrote it.
    job_resource_version: str | None = None
    # Pods this batch created: the cache must show them before the job is planned again.
    created_pods: list[str] = field(default_factory=list)
    # Pods this batch deleted, (name, uid): likewise, the cache must show them terminating or gone.
    deleted_pods: list[tuple[str, str | None]] = field(default_factory=list)
    # How many actions, from the first, were applied (all of them unless execution stopped early).
    applied: int = 0
    # The plan said Defer: the urgent writes are done; the rest is for the job's next pass. `settled_later`:
    # that rest is only Plan.settle (Defer(settle=True)).
    deferred: bool = False
    settled_later: bool = False
    # The plan still asked for live reads when the reconcile ran out of rounds: the next pass goes on.
    more_reads: bool = False
    # resourceVersion of the job's ConfigMap after our patch, if we patched it.
    config_map_resource_version: str | None = None
    # (kind, name) of an object a write found gone (404): the cache still has it (a ghost).
    gone: tuple[str, str] | None = None
    # Answers to ConfirmAbsence, by (kind, name): True = 404 (gone), False = exists.
    absence_checks: dict[tuple[str, str], bool] = field(default_factory=dict)
    # Exclusive creates, by (kind, name): the new object's uid, or None when the name was taken.
    created: dict[tuple[str, str], str | None] = field(default_factory=dict)


class JobWrites(Protocol):
    """Where a batch reports its writes of the MPIJob as they happen, before anything else of the batch
    awaits (the runtime's per-job record: runtime/record.py): how many are in flight, and the version the last
    one made (the cache must show it before the job is planned again; a job event carrying a version we made,
    or coming while we write the job, is the echo of our own write: runtime/signals.py)."""

    job_writing: int
    job_rv: int


@dataclass
class _Unrecorded:
    """The writes of a batch nobody keeps a record for (a test's, a tool's)."""

    job_writing: int = 0
    job_rv: int = 0


@dataclass
class _Batch:
    """One `Executor.apply`: where it writes, what it learned, and the Events it will post."""

    namespace: str
    job_name: str
    # The MPIJob's resourceVersion that the next optimistic write to it must carry.
    job_rv: Any
    # Where its MPIJob writes are reported as they happen.
    writes: JobWrites = field(default_factory=_Unrecorded)
    outcome: Outcome = field(default_factory=Outcome)
    # Of every other object this batch patched, by (kind, name): the resourceVersion our patch made. A later
    # optimistic write to the same object in the batch carries it instead of the one the plan read (the
    # launcher Job's status, then its spec): our own change is not a concurrent one.
    versions: dict[tuple[str, str], Any] = field(default_factory=dict)
    events: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # Status fields (Create.uid_into_status) -> the uid this batch's create made, for its next status write.
    status_uids: dict[str, str] = field(default_factory=dict)

    def announce(self, *emits: Emit) -> None:
        for emit in emits:
            reason = _CREATE if emit.reason.startswith(_CREATE) else emit.reason
            self.events.setdefault((emit.type, reason), []).append(emit.message)

    def folded_events(self) -> list[Emit]:
        """Events of one reason in one batch become one Event, and so do all create announcements ("Created
        Service j; Created Pod j-worker-0, j-worker-1, ...") rather than one per object; a new job's creates
        ride on its MPIJobCreated Event. A new 8-worker job costs 1 Event write instead of 13, out of the same
        client QPS budget (and the API server's CPU)."""
        events = dict(self.events)
        created = events.get(_JOB_CREATED)
        creates = events.get(("Normal", _CREATE))
        if created is not None and creates is not None:
            del events[("Normal", _CREATE)]
            events[_JOB_CREATED] = [f"{_join(created)} {_join(creates)}"]
        return [Emit(type_, reason, _join(messages)) for (type_, reason), messages in events.items()]


class Executor:
    def __init__(
        self,
        client: Client,
        *,
        post_events: bool = True,
        events: EventPoster | None = None,
        update_kinds: frozenset[str] = frozenset(),
    ) -> None:
        self.client = client
        # Posts Events off the reconcile path (the operator's); None: each Event is awaited in its reconcile.
        self.events = events
        self.post_events = post_events
        # Checked before every write (leader election sets it): a leader that lost its lease mid-batch stops
        # at the next write, not at the next job.
        self.fence: Callable[[], bool] | None = None
        # Kinds written by read-then-update: the operator may `update` them but not `patch` them (the
        # reference's ClusterRole; runtime/permissions.py).
        self.update_kinds = update_kinds

    async def apply(self, job: dict[str, Any], actions: Sequence[Action], writes: JobWrites | None = None) -> Outcome:
        """Applies `actions` to `job`'s objects, reporting its MPIJob writes into `writes` as they happen."""
        meta = job.get("metadata") or {}
        batch = _Batch(str(meta.get("namespace")), str(meta.get("name")), meta.get("resourceVersion"))
        if writes is not None:
            batch.writes = writes
        try:
            await self._apply(batch, actions)
        except Exception:
            # A timeout or a dropped connection fails the pass, but the writes before it happened: their
            # Events go out (the next plan reads those decisions as made and would never say them again).
            await self._post(job, batch)
            raise
        await self._post(job, batch)
        return batch.outcome

    async def _post(self, job: dict[str, Any], batch: _Batch) -> None:
        for event in batch.folded_events():
            await self._event(job, event)

    async def _apply(self, batch: _Batch, actions: Sequence[Action]) -> None:
        """In order, stopping at Defer, at a lost lease, at a name taken by someone else, or at a failure.
        Plan.leave_discovery's writes are of the URGENT class (their own token bucket), the rest NORMAL."""
        outcome = batch.outcome
        urgent = actions.urgent_positions() if isinstance(actions, Plan) else range(0)
        for outcome.applied, action in enumerate(actions):
            write_class = WriteClass.URGENT if outcome.applied in urgent else WriteClass.NORMAL
            try:
                if await self._step(batch, action, write_class):
                    return
            except ApiError as err:
                self._stop(batch, action, err)
                return
        outcome.applied = len(actions)

    async def _step(self, batch: _Batch, action: Action, write_class: WriteClass) -> bool:
        """Applies one action; True when the batch stops here."""
        outcome = batch.outcome
        if isinstance(action, Emit):
            batch.announce(action)
        elif isinstance(action, Defer):
            outcome.deferred = True
            outcome.settled_later = action.settle
            return True
        elif isinstance(action, RequeueAfter):
            outcome.requeue_after = action.seconds
        elif isinstance(action, ConfirmAbsence):
            outcome.absence_checks[(action.kind, action.name)] = await self._absent(batch.namespace, action)
        elif self.fence is not None and not self.fence():
            outcome.conflict = "not the leader any more; stopping before the next write"
            return True
        else:
            return await self._write(batch, action, write_class)
        return False

    async def _write(self, batch: _Batch, action: Write, write_class: WriteClass) -> bool:
        """A create, patch or delete; its Events are announced only when it really happened. True when the
        batch stops here (an exclusive create found the name taken)."""
        outcome = batch.outcome
        if isinstance(action, Create) and action.exclusive:
            key = (str(action.obj["kind"]), str(action.obj["metadata"]["name"]))
            outcome.created[key] = uid = await self._create_exclusive(batch.namespace, action)
            if uid is None:
                # Someone else's object holds the name: nothing after this may run (fail closed).
                outcome.conflict = f"{key[0]} {key[1]}: AlreadyExists"
                return True
            if action.uid_into_status:
                batch.status_uids[action.uid_into_status] = uid
        elif isinstance(action, Create):
            if not await self._create(batch.namespace, action, write_class):
                return False
            if action.obj["kind"] == "Pod":
                outcome.created_pods.append(action.obj["metadata"]["name"])
        elif isinstance(action, Patch):
            is_job = action.kind == "MPIJob" and action.name == batch.job_name
            made = batch.job_rv if is_job else batch.versions.get((action.kind, action.name))
            if is_job and action.subresource == "status" and batch.status_uids:
                action = _with_uids(action, batch.status_uids)
                batch.status_uids = {}
            if is_job:
                result = await self._patch_job(batch, action, made, write_class)
            else:
                result = await self._patch(batch.namespace, action, made, write_class)
            version = (result.get("metadata") or {}).get("resourceVersion") if isinstance(result, dict) else None
            if not is_job and version is not None:
                batch.versions[(action.kind, action.name)] = version
            if action.kind == "ConfigMap" and isinstance(result, dict):
                outcome.config_map_resource_version = version
            if is_job and isinstance(result, dict):
                # Later writes to the job in this batch build on the version we just made.
                batch.job_rv = outcome.job_resource_version = version or batch.job_rv
        elif not await self._delete(batch.namespace, action, write_class):
            return False
        elif action.kind == "Pod":
            outcome.deleted_pods.append((action.name, action.uid))
        outcome.writes += 1
        batch.announce(*action.announce)
        return False

    def _stop(self, batch: _Batch, action: Action, err: ApiError) -> None:
        outcome = batch.outcome
        if err.status == 403 and "being terminated" in err.body:
            # The namespace is going away, and the job with it: nothing left to do.
            log.debug("%s/%s: namespace terminating; stopping", batch.namespace, batch.job_name)
            batch.events.clear()
            return
        # 409: stale cache; 404: the object went away. Both resolve with fresh data. Anything else
        # (422 from validation, 403, 5xx) is an error and backs off.
        if err.status in (409, 404) and isinstance(action, Patch):
            outcome.conflict = f"{action.kind} {action.name}: {err.status} {err.reason}"
            if err.status == 404:
                outcome.gone = (action.kind, action.name)
        else:
            outcome.error = err
        log.info("stopping %s/%s after %s: %s", batch.namespace, batch.job_name, type(action).__name__, err)

    async def _absent(self, namespace: str, action: ConfirmAbsence) -> bool:
        """A live GET: True when the API server says 404."""
        if action.kind == "Node":
            path = f"/api/v1/nodes/{action.name}"
        else:
            path = object_path("v1", action.kind, namespace, action.name)
        try:
            await self.client.get(path)
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return False

    async def _create(self, namespace: str, action: Create, write_class: WriteClass) -> bool:
        obj = action.obj
        if action.generate_ssh_keys:
            obj = {**obj, "data": ssh_key_pair()}  # a shallow copy: the action itself stays as planned
        try:
            path = collection_path(obj["apiVersion"], obj["kind"], namespace)
            await self.client.create(path, obj, write_class=write_class)
        except ApiError as err:
            if err.status == 409:  # AlreadyExists: our cache was behind, or the name is taken (planner sees it next)
                return False
            raise
        return True

    async def _create_exclusive(self, namespace: str, action: Create) -> str | None:
        """The created object's uid, or None on AlreadyExists."""
        obj = action.obj
        if action.generate_ssh_keys:
            obj = {**obj, "data": ssh_key_pair()}  # a shallow copy: the action itself stays as planned
        try:
            made = await self.client.create(collection_path(obj["apiVersion"], obj["kind"], namespace), obj)
        except ApiError as err:
            if err.status == 409:
                return await self._ours_after_all(namespace, obj)
            raise
        # The API server always returns the uid; "unknown" keeps a created object from reading as a conflict.
        return str(((made or {}).get("metadata") or {}).get("uid") or "unknown")

    async def _ours_after_all(self, namespace: str, obj: Any) -> str | None:
        """After AlreadyExists: the existing object's uid when its controller is the job this create was for
        (an operator killed between its create and the status write recording the uid made it), else None.
        One read by name, only here; the answer's data is dropped at once. A refusal (no `get` in an older
        Role) or a vanished object stays None: fail closed, the planner retries."""
        ours = controller_uid(obj)
        path = object_path(obj["apiVersion"], obj["kind"], namespace, obj["metadata"]["name"])
        try:
            found = await self.client.get(path)
        except ApiError as err:
            if err.status in (403, 404):
                return None
            raise
        meta = (found or {}).get("metadata") or {}
        if ours is None or controller_uid(found) != ours or not meta.get("uid"):
            return None
        log.info("%s %s/%s already existed and is this job's own: adopted", obj["kind"], namespace, meta.get("name"))
        return str(meta["uid"])

    async def _patch_job(self, batch: _Batch, action: Patch, made: Any, write_class: WriteClass) -> Any:
        """A patch of the batch's MPIJob, counted in flight until its answer, and its new version kept
        (`JobWrites`), before anything else of this batch awaits."""
        writes = batch.writes
        writes.job_writing += 1
        try:
            result = await self._patch(batch.namespace, action, made, write_class)
        finally:
            writes.job_writing -= 1
        version = (result.get("metadata") or {}).get("resourceVersion") if isinstance(result, dict) else None
        if resource_version_number(version):
            writes.job_rv = resource_version_number(version)
        return result

    async def _patch(self, namespace: str, action: Patch, made: Any, write_class: WriteClass) -> Any:
        """`made`: the resourceVersion an earlier write of this batch made of the object, if any."""
        patch = action.patch
        rv = action.resource_version
        if rv is not None:
            if made is not None:
                rv = made
            # Copies of the two levels we change; the action itself stays as planned.
            patch = {**patch, "metadata": {**(patch.get("metadata") or {}), "resourceVersion": rv}}
        path = object_path(action.api_version, action.kind, namespace, action.name, action.subresource)
        if action.kind in self.update_kinds and action.subresource is None:
            return await self._update(namespace, action, path, patch, write_class)
        return await self.client.merge_patch(path, patch, write_class=write_class)

    async def _update(self, namespace: str, action: Patch, path: str, patch: Any, write_class: WriteClass) -> Any:
        """The merge patch as a read (a list by name: the reference's ClusterRole has no `get` on these kinds)
        and an update of what was read. The update carries the read object's resourceVersion, or the patch's
        own precondition when it has one, so the API server answers 409 where the patch would have."""
        collection = collection_path(action.api_version, action.kind, namespace)
        query = [("fieldSelector", f"metadata.name={action.name}")]
        items = ((await self.client.request("GET", collection, query=query)) or {}).get("items") or []
        if not items:
            raise ApiError(404, "NotFound", f"{action.kind} {action.name} not found")
        current = {"apiVersion": action.api_version, "kind": action.kind, **items[0]}
        return await self.client.request("PUT", path, json_merge_patch(current, patch), write_class=write_class)

    async def _delete(self, namespace: str, action: Delete, write_class: WriteClass) -> bool:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if action.uid:
            options["preconditions"] = {"uid": action.uid}
        if action.propagation:
            options["propagationPolicy"] = action.propagation
        try:
            path = object_path(action.api_version, action.kind, namespace, action.name)
            await self.client.delete(path, options, write_class=write_class)
        except ApiError as err:
            if err.status in (404, 409):  # gone already, or a different object now holds the name
                return False
            raise
        return True

    async def _event(self, job: dict[str, Any], event: Emit) -> None:
        log.log(logging.WARNING if event.type == "Warning" else logging.INFO, "%s: %s", event.reason, event.message)
        if not self.post_events:
            return
        meta = job.get("metadata") or {}
        now = format_time(datetime.now(UTC))
        namespace = str(meta.get("namespace"))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": "MPIJob",
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type,
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = collection_path("v1", "Event", namespace)
        if self.events is not None:
            await self.events.post(path, body, str(meta.get("uid")))
        else:
            await post_event(self.client.create, path, body)
