"""A pure in-memory stand-in for the API server, the scheduler and the kubelet, for planner tests.

It is a test double for the planner's *inputs* and the executor's API server: the real `Executor.apply` runs
the planner's actions against `WorldApi`, which answers the REST calls the way the API server would (create,
JSON merge patch, delete; resourceVersion bumped on every write; 409 on a stale resourceVersion or a uid
precondition that does not match; 404 on a missing object; pods get a deletionTimestamp and only go away when
the test says so), and the world builds the next Snapshot from what it holds. Nothing here is random, so a
test can run `plan()` to a fixed point and look at the result. Integration tests use a real API server.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.kube import client
from mpijob.kube.resources import PLURALS
from mpijob.planner.actions import Action, ConfirmAbsence, Create, Defer, Delete, Emit, Patch, RequeueAfter
from mpijob.planner.discovery import listed_hosts
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj, OperatorConfig, Snapshot, format_time
from mpijob.runtime.controller import Controller

from .builders import NO_REGROW, NOW, NS, disruption_target, elastic, job_condition, mpijob, node

# Kinds whose `status` is a subresource: a patch of the main resource leaves status alone and vice versa.
_STATUS_SUBRESOURCE = {"MPIJob", "Pod", "Job"}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(code, reason, message)  # the args rebuild it (copy.deepcopy of a World)
        self.code = code
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"


# (plural, apiVersion) -> kind, for reading REST paths.
_KINDS = {(plural, api_version): kind for (api_version, kind), plural in PLURALS.items()}


def _parse_path(path: str) -> tuple[str, str | None, str | None]:
    """(kind, name, subresource) of a REST path the executor builds (see kube/resources.py)."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        api_version, rest = "v1", parts[2:]
    else:
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    if rest[0] == "nodes":
        return "Node", rest[1], None
    assert rest[0] == "namespaces", path
    kind = _KINDS[(rest[2], api_version)]
    name = rest[3] if len(rest) > 3 else None
    sub = rest[4] if len(rest) > 4 else None
    return kind, name, sub


class WorldApi:
    """The executor's client, answered by the world (the fake sits at the client boundary, in unit tests only).

    Records every answer to a write, in order (None: done; an error: refused), so the world knows which of the
    executor's writes went through."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.answers: list[ApiError | None] = []

    def _answer(self, call: Callable[[], Obj]) -> Obj:
        try:
            result = call()
        except ApiError as err:
            self.answers.append(err)
            raise client.ApiError(err.code, err.reason, err.message) from None
        self.answers.append(None)
        return copy.deepcopy(result)

    async def get(self, path: str) -> Any:
        kind, name, _ = _parse_path(path)
        found = self.world.nodes.get(name or "") if kind == "Node" else self.world.get(kind, name or "")
        if found is None:
            raise client.ApiError(404, "NotFound", path)
        return copy.deepcopy(found)

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        kind, _, _ = _parse_path(path)
        if kind == "Event":
            self.world.events.append(Emit(obj["type"], obj["reason"], obj["message"]))
            return obj
        return self._answer(lambda: self.world._create(obj))

    async def merge_patch(self, path: str, patch: Any, **_: Any) -> Any:
        kind, name, sub = _parse_path(path)
        assert name is not None, path
        return self._answer(lambda: self.world._patch(kind, name, patch, sub))

    async def delete(self, path: str, options: Any = None, **_: Any) -> Any:
        kind, name, _ = _parse_path(path)
        assert name is not None, path
        uid = ((options or {}).get("preconditions") or {}).get("uid")
        return self._answer(lambda: self.world._delete(kind, name, uid))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, null removes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def controller_of(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def is_leaving(pod: Obj) -> bool:
    return c.ANNOTATION_LEAVING_SINCE in (pod["metadata"].get("annotations") or {})


def is_terminating(obj: Obj) -> bool:
    return obj["metadata"].get("deletionTimestamp") is not None


@dataclass
class World:
    namespace: str = NS
    now: datetime = NOW
    config: OperatorConfig = field(default_factory=OperatorConfig)
    # Where new pods are bound, round robin; empty leaves them unscheduled (Pending, no node).
    placement: list[str] = field(default_factory=lambda: ["node-1"])
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)
    nodes: dict[str, Obj] = field(default_factory=dict)
    events: list[Emit] = field(default_factory=list)
    # Failures that stopped a batch, and failures the executor shrugs off (create of an existing name,
    # delete of a gone object): a converging planner should cause neither, again and again.
    errors: list[ApiError] = field(default_factory=list)
    tolerated: list[ApiError] = field(default_factory=list)
    plans: list[list[Action]] = field(default_factory=list)
    # Every write that went through, in order, for assertions over a whole run.
    applied: list[Action] = field(default_factory=list)
    # Called with every snapshot and the plan made from it (property tests check invariants here).
    observer: Callable[[Snapshot, list[Action]], None] | None = None
    # Plan as the operator does (`plan(..., urgent_first=True)`); False: whole plans every time.
    urgent_first: bool = True
    # Live reads answered (ConfirmAbsence).
    reads: int = 0
    # Outcomes of the last batch's exclusive creates, and the uids the "controller" remembers per job.
    exclusive: dict[tuple[str, str], str | None] = field(default_factory=dict)
    created: dict[str, dict[tuple[str, str], str | None]] = field(default_factory=dict)
    # Snapshots share the world's pod dicts instead of copying them (the planner never mutates its input):
    # for jobs of thousands of workers, where the copies cost more than the plans.
    share_pods: bool = False
    # Pods the operator's cache does not show yet (created moments ago, their watch event not delivered):
    # left out of snapshots, though the API (and so a live read) has them.
    uncached: set[str] = field(default_factory=set)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _uid: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # Pod IPs the kubelet hands out: a recreated pod of the same name gets a new one, as on a real node.
    _ip: itertools.count[int] = field(default_factory=lambda: itertools.count(10))
    _place: int = 0

    # -- objects ---------------------------------------------------------------------------------------
    def next_rv(self) -> str:
        return str(next(self._rv))

    def add(self, obj: Obj) -> Obj:
        """Puts an object in the world as someone else would (not through the planner)."""
        obj = copy.deepcopy(obj)
        m = obj.setdefault("metadata", {})
        m.setdefault("namespace", self.namespace)
        m.setdefault("uid", f"uid-{obj['kind'].lower()}-{m['name']}-{next(self._uid)}")
        m.setdefault("creationTimestamp", format_time(self.now))
        m["resourceVersion"] = self.next_rv()
        self.objects[(obj["kind"], m["name"])] = obj
        return obj

    def add_nodes(self, *names: str) -> None:
        for name in names:
            self.nodes[name] = node(name)

    def get(self, kind: str, name: str) -> Obj | None:
        return self.objects.get((kind, name))

    def job(self, name: str) -> Obj:
        found = self.get("MPIJob", name)
        assert found is not None, f"no MPIJob {name}"
        return found

    def pods(self) -> list[Obj]:
        return [o for (kind, _), o in sorted(self.objects.items()) if kind == "Pod"]

    def pod(self, name: str) -> Obj:
        found = self.get("Pod", name)
        assert found is not None, f"no pod {name}"
        return found

    def workers(self, job_name: str) -> list[Obj]:
        uid = self.job(job_name)["metadata"]["uid"]
        return [
            p
            for p in self.pods()
            if controller_of(p) == uid and (p["metadata"].get("labels") or {}).get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER
        ]

    def worker_names(self, job_name: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.workers(job_name)]

    def kept_workers(self, job_name: str) -> list[str]:
        """Workers that count toward replicas: not terminating, not leaving, not finished."""
        return [
            p["metadata"]["name"]
            for p in self.workers(job_name)
            if not is_terminating(p)
            and not is_leaving(p)
            and (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
        ]

    def replicas(self, job_name: str) -> int:
        return int(self.job(job_name)["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])

    def workers_to_delete(self, job_name: str) -> list[str]:
        return list((self.job(job_name)["spec"].get("elasticPolicy") or {}).get("workersToDelete") or [])

    def config_data(self, job_name: str) -> dict[str, str]:
        cm = self.get("ConfigMap", c.config_map_name(job_name))
        assert cm is not None
        return dict(cm.get("data") or {})

    def discovered(self, job_name: str) -> list[str]:
        """Pod names in the job's discovery list (the first label of each host name)."""
        return [host.split(".")[0] for host in listed_hosts(self.config_data(job_name)) or []]

    def hostfile_hosts(self, job_name: str) -> list[str]:
        text = self.config_data(job_name)[c.HOSTFILE_KEY]
        return [line.split(".")[0] for line in text.splitlines() if line]

    # -- the planner's view ----------------------------------------------------------------------------
    def snapshot(self, job_name: str) -> Snapshot:
        job = self.job(job_name)
        uid = job["metadata"]["uid"]
        launcher = self.get("Job", c.launcher_name(job_name))
        pods = [p for p in self.pods() if p["metadata"]["name"] not in self.uncached]
        pods = pods if self.share_pods else copy.deepcopy(pods)
        return Snapshot(
            job=copy.deepcopy(job),
            now=self.now,
            owned_pods=[p for p in pods if controller_of(p) == uid],
            pods_by_name={p["metadata"]["name"]: p for p in pods},
            launcher=copy.deepcopy(launcher),
            launcher_pods=[p for p in pods if launcher is not None and controller_of(p) == launcher["metadata"]["uid"]],
            service=copy.deepcopy(self.get("Service", job_name)),
            config_map=copy.deepcopy(self.get("ConfigMap", c.config_map_name(job_name))),
            pdb=copy.deepcopy(self.get("PodDisruptionBudget", c.pdb_name(job_name))),
            service_account=copy.deepcopy(self.get("ServiceAccount", c.discovery_rbac_name(job_name))),
            role=copy.deepcopy(self.get("Role", c.discovery_rbac_name(job_name))),
            role_binding=copy.deepcopy(self.get("RoleBinding", c.discovery_rbac_name(job_name))),
            nodes=copy.deepcopy(self.nodes),
            pod_group=copy.deepcopy(self.get("PodGroup", job_name)),
            config=self.config,
        )

    def reconcile(self, job_name: str) -> list[Action]:
        """One reconcile: plan on a fresh snapshot and apply (stopping at the first failure). A plan that asks
        for live reads (ConfirmAbsence) is answered from the world and planned again, as the controller does.
        A plan that defers (urgent discovery writes first) is followed at once by the next one, as the
        controller requeues it; the actions applied by all of them are returned."""
        done: list[Action] = []
        checks: dict[tuple[str, str], bool] = {}
        created = dict(self.created.pop(job_name, {}))
        for _ in range(8):
            if self.get("MPIJob", job_name) is None:
                return done
            snapshot = replace(self.snapshot(job_name), absence_checks=dict(checks), created=dict(created))
            actions = list(plan(snapshot, urgent_first=self.urgent_first))
            if self.observer is not None:
                self.observer(snapshot, actions)
            deferred = [i for i, a in enumerate(actions) if isinstance(a, Defer)]
            # A deferred plan is recorded as far as it goes (what follows Defer is not applied: the next plan
            # decides it again).
            self.plans.append(actions[: deferred[0] + 1] if deferred else actions)
            asks = [a for a in actions if isinstance(a, ConfirmAbsence)]
            if asks:
                assert len(asks) == len(actions), "a plan that asks for live reads writes nothing"
                self.reads += len(asks)
                for a in asks:
                    present = a.name in self.nodes if a.kind == "Node" else self.get(a.kind, a.name) is not None
                    checks[(a.kind, a.name)] = not present
                continue
            failed = self.apply(actions, snapshot.job)
            # Exclusive creates (the SSH Secret) report their outcome, remembered until the status has it; a
            # refused one is planned again at once with the answer, as the controller does.
            created.update(self.exclusive)
            kept = {k: v for k, v in created.items() if v is not None}
            if kept:
                self.created[job_name] = kept
            if None in self.exclusive.values():
                continue
            if failed is not None or not deferred:
                return done + actions
            done += actions[: deferred[0]]
        raise AssertionError(f"plans keep asking or deferring: {self.plans[-3:]}")

    def settle(self, job_name: str, *, max_rounds: int = 60, kubelet: bool = True, follow_requeue: bool = True) -> int:
        """Reconciles until a plan writes nothing. With `kubelet`, pending pods are scheduled and started and
        terminating pods removed between rounds; with `follow_requeue`, the clock jumps to a requested
        requeue. Returns the number of rounds; fails if there is no fixed point within max_rounds."""
        for round_ in range(1, max_rounds + 1):
            actions = self.reconcile(job_name)
            busy = any(isinstance(a, Create | Patch | Delete) for a in actions)
            if kubelet:
                busy = self.kubelet() or busy
            waits = [a.seconds for a in actions if isinstance(a, RequeueAfter)]
            if not busy and waits and follow_requeue and self.get("MPIJob", job_name) is not None:
                self.advance(max(waits[0], 0.001))
                busy = True
            if not busy:
                return round_
        raise AssertionError(f"no fixed point after {max_rounds} rounds; last plan: {self.plans[-1]}")

    # -- the API server --------------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action], job: Obj | None = None) -> ApiError | None:
        """Applies actions with the real executor (`Executor.apply`) against this world's API: in order; a
        create of an existing name or a delete of a gone (or replaced) object is a tolerated no-op whose Events
        are not posted; any other failure stops the batch, as does Defer. `job` is the MPIJob the plan was made
        for (default: the one the actions write, or the world's only one). Returns the error that stopped the
        batch (a refused exclusive create included), else None."""
        api = WorldApi(self)
        outcome = asyncio.run(Executor(api, post_events=True).apply(job or self._job_of(actions), actions))  # type: ignore[arg-type]
        self.exclusive = dict(outcome.created)
        writes = [a for a in actions[: outcome.applied + 1] if isinstance(a, Create | Patch | Delete)]
        stopped = outcome.error is not None or outcome.conflict is not None
        refused = None in outcome.created.values()
        for index, (write, answer) in enumerate(zip(writes, api.answers, strict=False)):
            if answer is None:
                self.applied.append(write)
            elif stopped and not refused and index == len(api.answers) - 1:
                self.errors.append(answer)
                return answer
            else:
                self.tolerated.append(answer)
        return api.answers[-1] if refused else None

    def _job_of(self, actions: Sequence[Action]) -> Obj:
        names = [a.name for a in actions if isinstance(a, Patch | Delete) and a.kind == "MPIJob"]
        jobs = [o for (kind, name), o in self.objects.items() if kind == "MPIJob" and (not names or name in names)]
        if jobs:
            return copy.deepcopy(jobs[0])
        return {"metadata": {"name": "", "namespace": self.namespace}}

    def _create(self, created: Obj) -> Obj:
        obj = copy.deepcopy(created)
        m = obj["metadata"]
        key = (obj["kind"], m["name"])
        assert m.get("namespace") == self.namespace, f"created in namespace {m.get('namespace')}"
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f"{key} already exists")
        m["uid"] = f"uid-{obj['kind'].lower()}-{m['name']}-{next(self._uid)}"
        m["resourceVersion"] = self.next_rv()
        m["creationTimestamp"] = format_time(self.now)
        if obj["kind"] == "Pod":
            obj["status"] = {"phase": "Pending"}
            if self.placement:
                obj.setdefault("spec", {})["nodeName"] = self.placement[self._place % len(self.placement)]
                self._place += 1
        elif obj["kind"] == "Job":
            obj["status"] = {}
        self.objects[key] = obj
        return obj

    def _patch(self, kind: str, name: str, patch: Obj, subresource: str | None = None) -> Obj:
        key = (kind, name)
        current = self.objects.get(key)
        if current is None:
            raise ApiError(404, "NotFound", f"{key} not found")
        # Optimistic concurrency: a resourceVersion in the patch must be the current one.
        expected = (patch.get("metadata") or {}).get("resourceVersion")
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f"{key}: resourceVersion {expected} is stale")
        if subresource == "status":
            updated = copy.deepcopy(current)
            updated["status"] = merge_patch(current.get("status") or {}, patch.get("status") or {})
        else:
            assert subresource is None, subresource
            body = dict(patch)
            if kind in _STATUS_SUBRESOURCE:
                body.pop("status", None)
            updated = merge_patch(current, body)
            if kind == "MPIJob":
                self._admit_mpijob(updated)
        if updated == current:
            # As the API server: a patch that changes nothing is not a write (no new resourceVersion, no
            # watch event); the object is returned as it was.
            return current
        updated["metadata"]["resourceVersion"] = self.next_rv()
        self.objects[key] = updated
        return updated

    @staticmethod
    def _admit_mpijob(job: Obj) -> None:
        """The CRD's replica bounds (what the CEL rules refuse)."""
        ep = job["spec"].get("elasticPolicy")
        if ep is None:
            return
        replicas = job["spec"]["mpiReplicaSpecs"]["Worker"].get("replicas")
        low, high = ep.get("minReplicas", 1), ep.get("maxReplicas")
        if replicas is None or replicas < low or (high is not None and replicas > high):
            raise ApiError(422, "Invalid", f"Worker replicas {replicas} outside [{low}, {high}]")

    def _delete(self, kind: str, name: str, uid: str | None) -> Obj:
        key = (kind, name)
        current = self.objects.get(key)
        if current is None:
            raise ApiError(404, "NotFound", f"{key} not found")
        if uid is not None and uid != current["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f"{key}: uid precondition failed")
        self._remove(key)
        return {"kind": "Status", "status": "Success"}

    def _remove(self, key: tuple[str, str]) -> None:
        obj = self.objects[key]
        if obj["kind"] == "Pod":
            if not is_terminating(obj):
                obj["metadata"]["deletionTimestamp"] = format_time(self.now)
                obj["metadata"]["resourceVersion"] = self.next_rv()
            return
        del self.objects[key]
        # Garbage collection (background): whatever this object controlled goes too.
        uid = obj["metadata"]["uid"]
        for child_key, child in list(self.objects.items()):
            if child_key in self.objects and controller_of(child) == uid:
                self._remove(child_key)

    # -- the scheduler, the kubelet, the job controller, and people --------------------------------------
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def _touch(self, pod: Obj) -> None:
        pod["metadata"]["resourceVersion"] = self.next_rv()

    def schedule(self, name: str, node_name: str) -> None:
        pod = self.pod(name)
        pod["spec"]["nodeName"] = node_name
        self._touch(pod)

    def run(self, *names: str, ready: bool = True) -> None:
        for name in names:
            pod = self.pod(name)
            status = pod.get("status") or {}
            n = next(self._ip)
            ip = status.get("podIP") or f"10.0.{n // 250}.{n % 250 + 1}"
            want = "True" if ready else "False"
            # As the kubelet does: the condition's time moves only when its status does.
            before = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            since = before.get("lastTransitionTime") if before.get("status") == want else format_time(self.now)
            pod["status"] = {
                **status,
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": want, "lastTransitionTime": since}],
            }
            self._touch(pod)

    def bind_pending(self) -> bool:
        """The scheduler binds every unbound, live pod to `placement` (round robin), as it does once capacity
        appears; with an empty placement (no capacity) they stay Pending. Returns whether it bound any."""
        bound = False
        for pod in self.pods():
            if self.placement and not is_terminating(pod) and not pod["spec"].get("nodeName"):
                self.schedule(pod["metadata"]["name"], self.placement[self._place % len(self.placement)])
                self._place += 1
                bound = True
        return bound

    def kubelet(self) -> bool:
        """Starts every scheduled Pending pod and removes every terminating pod. Returns whether it did anything."""
        changed = False
        for pod in self.pods():
            if is_terminating(pod):
                self.objects.pop(("Pod", pod["metadata"]["name"]))
                changed = True
            elif (pod.get("status") or {}).get("phase") == "Pending" and pod["spec"].get("nodeName"):
                self.run(pod["metadata"]["name"])
                changed = True
        return changed

    def finish_deletions(self, names: Iterable[str] | None = None) -> None:
        for pod in self.pods():
            if is_terminating(pod) and (names is None or pod["metadata"]["name"] in names):
                self.objects.pop(("Pod", pod["metadata"]["name"]))

    def delete_pod(self, name: str) -> None:
        """Someone else deletes a pod (kubectl delete, the Eviction API)."""
        self._remove(("Pod", name))

    def kubelet_evict(self, name: str) -> None:
        """Node-pressure eviction: the pod stays, Failed with reason Evicted."""
        pod = self.pod(name)
        pod["status"] = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
        self._touch(pod)

    def disrupt(self, name: str, reason: str = "EvictionByEvictionAPI") -> None:
        """A component about to kill a pod says so first (condition DisruptionTarget=True, with why). The
        Eviction API, the scheduler's preemption and the taint manager then delete it (gracefully: it lingers,
        terminating); the kubelet (TerminationByKubelet, a graceful node shutdown) stops it itself, later
        (`shut_down`)."""
        pod = self.pod(name)
        status = pod.get("status") or {}
        kept = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        pod["status"] = {**status, "conditions": [*kept, disruption_target(reason)]}
        self._touch(pod)
        if reason != "TerminationByKubelet":
            self._remove(("Pod", name))

    def shut_down(self, name: str) -> None:
        """The kubelet's graceful node shutdown stopped the pod: Failed, reason Terminated (DisruptionTarget
        stays, if the kubelet set it)."""
        pod = self.pod(name)
        status = pod.get("status") or {}
        kept = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        pod["status"] = {
            **status,
            "phase": "Failed",
            "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "conditions": [{"type": "Ready", "status": "False"}, *kept],
        }
        self._touch(pod)

    def taint(self, node_name: str, key: str) -> None:
        n = self.nodes[node_name]
        n["spec"].setdefault("taints", []).append({"key": key, "effect": "NoSchedule"})

    def cordon(self, node_name: str) -> None:
        self.nodes[node_name]["spec"]["unschedulable"] = True

    def remove_node(self, node_name: str) -> None:
        del self.nodes[node_name]

    def start_launcher(self, job_name: str) -> Obj:
        """The Job controller starts the launcher pod."""
        launcher = self.get("Job", c.launcher_name(job_name))
        assert launcher is not None, "no launcher Job"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{c.launcher_name(job_name)}-x{next(self._uid)}",
                "labels": {c.LABEL_JOB_NAME: job_name, c.LABEL_JOB_ROLE: c.ROLE_LAUNCHER},
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "uid": launcher["metadata"]["uid"], "controller": True}
                ],
            },
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"},
        }
        return self.add(pod)

    def finish_launcher(self, job_name: str, *, succeeded: bool = True, reason: str = "BackoffLimitExceeded") -> None:
        launcher = self.get("Job", c.launcher_name(job_name))
        assert launcher is not None, "no launcher Job"
        for pod in self.pods():
            if controller_of(pod) == launcher["metadata"]["uid"]:
                pod["status"]["phase"] = "Succeeded" if succeeded else "Failed"
                if not succeeded:
                    pod["status"]["reason"] = "Error"
        status = launcher.setdefault("status", {})
        if succeeded:
            status["conditions"] = [job_condition("Complete")]
            status["completionTime"] = format_time(self.now)
            status["succeeded"] = 1
        else:
            status["conditions"] = [job_condition("Failed", reason, "Job has reached the specified backoff limit")]
            status["failed"] = 1
        launcher["metadata"]["resourceVersion"] = self.next_rv()


# -- the operator over the world: its cache fed as the watch would feed it ------------------------------------
class InformedApi(WorldApi):
    """The World's API, whose every write reaches the controller's cache as the watch event would. Each
    request gives the event loop a turn, as a real one (network I/O) does."""

    def __init__(self, world: World, controller: Controller | None = None) -> None:
        super().__init__(world)
        self.controller = controller
        self.writes = 0
        # Every write request that went through, (verb, kind, name), Events apart.
        self.written: list[tuple[str, str, str]] = []

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        await asyncio.sleep(0)
        made = await super().create(path, obj)
        self._written(path, "create", obj)
        return made

    async def merge_patch(self, path: str, patch: Any, **_: Any) -> Any:
        await asyncio.sleep(0)
        made = await super().merge_patch(path, patch)
        self._written(path, "patch")
        return made

    async def delete(self, path: str, options: Any = None, **_: Any) -> Any:
        await asyncio.sleep(0)
        made = await super().delete(path, options)
        self._written(path, "delete")
        return made

    def _written(self, path: str, verb: str, obj: Any = None) -> None:
        if "/events" not in path:
            self.writes += 1
            kind, name, _ = _parse_path(path)
            self.written.append((verb, kind, str(name or (obj or {}).get("metadata", {}).get("name"))))
        assert self.controller is not None
        inform(self.controller, self.world)


def inform(controller: Controller, world: World) -> None:
    """Watch events for what changed in the world since the last call (resourceVersion per object)."""
    seen: dict[tuple[str, str], str] = getattr(controller, "_seen", {})
    controller._seen = seen  # type: ignore[attr-defined]
    now = {key: obj for key, obj in world.objects.items() if key[0] in controller.by_kind}
    for key in [k for k in seen if k not in now]:
        w = controller.by_kind[key[0]]
        del seen[key]
        controller.observed(w, "DELETED", w.slim({"metadata": {"name": key[1], "namespace": world.namespace}}))
    for key, obj in now.items():
        rv = obj["metadata"]["resourceVersion"]
        if seen.get(key) != rv:
            w = controller.by_kind[key[0]]
            controller.observed(w, "ADDED" if key not in seen else "MODIFIED", w.slim(copy.deepcopy(obj)))
            seen[key] = rv


async def quiet(controller: Controller) -> None:
    """Until nothing is queued, running or due (the batch timers included) for a while."""
    idle = 0
    while idle < 5:
        await asyncio.sleep(0.05)
        queue = controller.queue
        busy = queue.busy() or queue.queued()
        idle = 0 if busy else idle + 1


def start_workers_one_by_one(job: Obj, batch: float) -> tuple[int, World]:
    """A new job of 8 workers whose pods start one after another, 10 ms apart (image pulls end at different
    times), then its launcher: the writes the operator made (Events apart), and the world it left."""
    world = World()
    world.add_nodes("node-1")
    world.add(job)
    api = InformedApi(world)
    controller = Controller(Executor(api, post_events=True), OperatorConfig())  # type: ignore[arg-type]
    api.controller = controller
    controller.progress_batch = batch
    controller.clock = lambda: world.now

    async def run() -> None:
        for w in controller.kinds:
            controller.cache.listed.add(w.kind)
        inform(controller, world)
        controller.cache.ready = True
        controller.warm.set()
        controller.leading.set()
        controller.queue.add((NS, "pi"))
        workers = asyncio.gather(*(controller.reconciler() for _ in range(2)))
        await quiet(controller)
        for i in range(8):
            world.run(c.worker_name("pi", i))
            inform(controller, world)
            await asyncio.sleep(0.01)
        await quiet(controller)
        launcher = world.start_launcher("pi")
        # The template's labels, as the Job controller copies them (the World's launcher pod lacks this one).
        world.pod(launcher["metadata"]["name"])["metadata"]["labels"][c.LABEL_OPERATOR_NAME] = c.OPERATOR_NAME
        inform(controller, world)
        await quiet(controller)
        workers.cancel()
        await asyncio.gather(workers, return_exceptions=True)
        controller.queue.shutdown()

    asyncio.run(run())
    assert controller.stats.errors == 0
    return api.writes, world


def running_world(workers: int = 4) -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=workers, elastic_policy=elastic(1, 8, grace=30, regrow=NO_REGROW)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    return world
