"""The invariants every elastic plan keeps (see test_invariants.py for the properties they prove), checked
on one snapshot and its plan; shared by the modules that make plans and check them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings

from mpijob.api import constants as c
from mpijob.planner.actions import Action, ConfirmAbsence, Create, Defer, Delete, Patch
from mpijob.planner.snapshot import Obj, Snapshot, condition_true, is_owned_by, parse_time

from .builders import hosts_in
from .world import is_leaving

POLICIES = ["ScaleIn", "ScaleIn", "Replace", "Ignore"]
# DisruptionTarget reasons (issue 19); "False" draws a condition with status False (no signal).
DISRUPTIONS = [
    "TerminationByKubelet",
    "EvictionByEvictionAPI",
    "PreemptionByScheduler",
    "DeletionByTaintManager",
    "DeletionByPodGC",
]
PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _annotations_set(action: Patch) -> dict[str, Any]:
    return dict(((action.patch.get("metadata") or {}).get("annotations")) or {})


def newly_leaving(actions: list[Action]) -> dict[str, str]:
    found = {}
    for a in actions:
        if isinstance(a, Patch) and a.kind == "Pod":
            annotations = _annotations_set(a)
            if c.ANNOTATION_LEAVING_SINCE in annotations:
                found[a.name] = annotations[c.ANNOTATION_LEAVING_REASON]
    return found


def owned_by_name(s: Snapshot) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in s.owned_pods}


def _nudges_own_launcher(s: Snapshot, a: Action) -> bool:
    """A patch of the discovery annotations, and nothing else, on a pod of the launcher Job this job owns."""
    if not (isinstance(a, Patch) and a.kind == "Pod") or s.launcher is None or not is_owned_by(s.launcher, s.job):
        return False
    nudge_keys = {c.ANNOTATION_DISCOVERED_HOSTS, c.ANNOTATION_LEAVING_WORKERS}
    annotations = _annotations_set(a)
    return (
        a.name in {p["metadata"]["name"] for p in s.launcher_pods}
        and a.patch == {"metadata": {"annotations": annotations}}
        and set(annotations) <= nudge_keys
    )


def check_foreign_untouched(s: Snapshot, actions: list[Action]) -> None:
    """Foreign pods are never patched or deleted, and no worker is created over a name someone holds; the
    one patch of another's pod allowed is the discovery nudge of the job's own launcher's pods."""
    owned = owned_by_name(s)
    foreign = {n for n, p in s.pods_by_name.items() if not is_owned_by(p, s.job)}
    for a in actions:
        if _nudges_own_launcher(s, a):
            continue
        if isinstance(a, Patch) and a.kind == "Pod":
            assert a.name not in foreign, f"patched foreign pod {a.name}"
            assert a.name in owned, f"patched unknown pod {a.name}"
        if isinstance(a, Delete) and a.kind == "Pod":
            assert a.name not in foreign, f"deleted foreign pod {a.name}"
            assert a.name in owned and a.uid == owned[a.name]["metadata"]["uid"], f"deleted {a.name} without its uid"
        if isinstance(a, Create) and a.obj["kind"] == "Pod":
            assert a.obj["metadata"]["name"] not in s.pods_by_name, f"created over {a.obj['metadata']['name']}"


def check_listed_leave_first(s: Snapshot, actions: list[Action]) -> None:
    """Listed workers of this job leave in the plan that sees them (or had left already, or are already being
    deleted: a terminating pod is not patched)."""
    if actions and isinstance(actions[-1], Defer):
        return  # a partial plan (urgent_first: discovery writes only): the deferred pass that follows marks
    owned = owned_by_name(s)
    newly = newly_leaving(actions)
    listed = [n for n in s.job["spec"]["elasticPolicy"].get("workersToDelete") or [] if n in owned]
    for name in listed:
        pod = owned[name]
        assert is_leaving(pod) or name in newly or "deletionTimestamp" in pod["metadata"], (
            f"listed {name} did not leave"
        )


def check_floor(s: Snapshot, actions: list[Action]) -> None:
    """At most one spec patch, with optimistic concurrency; it never goes below the floor. It raises replicas
    only to regrow: by at most the probes that got a node, never above the recorded target nor maxReplicas."""
    spec = s.job["spec"]
    spec_patches = [a for a in actions if isinstance(a, Patch) and a.kind == "MPIJob" and a.subresource is None]
    assert len(spec_patches) <= 1
    for a in spec_patches:
        assert a.resource_version == s.job["metadata"]["resourceVersion"]
        replicas = ((a.patch.get("spec", {}).get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas")
        before = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
        if replicas is not None:
            assert spec["elasticPolicy"].get("minReplicas", 1) <= replicas
            assert replicas <= (spec["elasticPolicy"].get("maxReplicas") or replicas)
        if replicas is not None and replicas > before:
            recorded = s.job["metadata"].get("annotations") or {}
            assert recorded.get(c.ANNOTATION_REGROW_REPLICAS) == str(before), "raised replicas someone else set"
            assert replicas <= int(recorded[c.ANNOTATION_REGROW_TARGET])
            bound = [
                p
                for p in s.owned_pods
                if c.ANNOTATION_REGROW_PROBE in (p["metadata"].get("annotations") or {}) and p["spec"].get("nodeName")
            ]
            assert replicas - before <= len(bound)


def check_probes(s: Snapshot, actions: list[Action]) -> None:
    """Regrow's probes: never more than maxProbes waiting for a node at once (those of the snapshot that this
    plan keeps, plus its creates), and none kept past its timeout."""
    regrow = s.job["spec"]["elasticPolicy"].get("regrow") or {}
    bound, timeout = regrow.get("maxProbes", 2), regrow.get("probeTimeoutSeconds", 180)
    deleted = {a.name for a in actions if isinstance(a, Delete) and a.kind == "Pod"}
    waiting = [
        p
        for p in s.owned_pods
        if c.ANNOTATION_REGROW_PROBE in (p["metadata"].get("annotations") or {})
        and not p["spec"].get("nodeName")
        and "deletionTimestamp" not in p["metadata"]
        and p["metadata"]["name"] not in deleted
    ]
    for pod in waiting:
        age = (s.now - parse_time(pod["metadata"]["creationTimestamp"])).total_seconds()  # type: ignore[operator]
        assert age < timeout, f"probe {pod['metadata']['name']} kept {age}s, past its {timeout}s"
    made = [
        a
        for a in actions
        if isinstance(a, Create) and c.ANNOTATION_REGROW_PROBE in (a.obj["metadata"].get("annotations") or {})
    ]
    assert len(waiting) + len(made) <= bound, (len(waiting), len(made))


def check_graceful(s: Snapshot, actions: list[Action]) -> None:
    """A Running worker on a live node is deleted only after the grace period out of discovery, and whoever
    leaves or is deleted is out of discover_hosts.sh in the same plan."""
    spec = s.job["spec"]
    owned = owned_by_name(s)
    newly = newly_leaving(actions)
    grace = spec["elasticPolicy"].get("scaleInGracePeriodSeconds", 30)
    deleted = [a.name for a in actions if isinstance(a, Delete) and a.kind == "Pod"]
    if not (spec.get("runPolicy") or {}).get("suspend"):
        for name in deleted:
            pod = owned[name]
            if pod["status"].get("phase") != "Running" or pod["spec"].get("nodeName") not in s.nodes:
                continue
            since = parse_time((pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_LEAVING_SINCE))
            if since is None:
                assert name in newly and grace == 0, f"{name} deleted without leaving first"
            else:
                assert (s.now - since).total_seconds() >= grace, f"{name} deleted before its grace period"
    gone = set(newly) | set(deleted) | {n for n, p in owned.items() if is_leaving(p)}
    for a in actions:
        if isinstance(a, Patch) and a.kind == "ConfigMap":
            # The list as it will be: the patch names only the keys that change.
            data = {**((s.config_map or {}).get("data") or {}), **a.patch["data"]}
            discovered = set(hosts_in(data[c.DISCOVERED_HOSTS_KEY]))
            assert not discovered & gone, f"{discovered & gone} still discoverable"


def is_disrupted(pod: Obj) -> bool:
    return condition_true(pod, "DisruptionTarget")


def check_disrupted_out_of_discovery(s: Snapshot, actions: list[Action]) -> None:
    """A worker whose pod has DisruptionTarget=True is in neither the discovery list the plan leaves behind
    (written, or as it was when the plan writes none) nor the discoveredHosts it records: it leaves in the
    plan that first sees the condition, whatever the policy."""
    disrupted = {n for n, p in owned_by_name(s).items() if is_disrupted(p)}
    if not disrupted or any(condition_true(s.job, kind) for kind in ("Succeeded", "Failed")):
        return
    data = dict((s.config_map or {}).get("data") or {}) if s.config_map and is_owned_by(s.config_map, s.job) else None
    for a in actions:
        if isinstance(a, Create) and a.obj["kind"] == "ConfigMap":
            data = dict(a.obj["data"])
        elif isinstance(a, Patch) and a.kind == "ConfigMap":
            data = {**(data or {}), **a.patch["data"]}
        elif isinstance(a, Patch) and a.kind == "MPIJob" and a.subresource == "status":
            recorded = set(a.patch["status"].get("discoveredHosts") or [])
            assert not recorded & disrupted, f"{recorded & disrupted} recorded as discovered"
    if data is not None and data.get(c.DISCOVERED_HOSTS_KEY):
        listed = set(hosts_in(data[c.DISCOVERED_HOSTS_KEY]))
        assert not listed & disrupted, f"{listed & disrupted} still discoverable"


def check_launcher_hears_recorded_deadlines(s: Snapshot, actions: list[Action]) -> None:
    """Every deadline a launcher nudge tells the training process is the one recorded on the worker, in the
    snapshot or by a mark earlier in this plan: a deadline from this pass's clock that a later pass records
    differently would make the launcher plan for the wrong deletion time."""
    recorded = {
        n: (p["metadata"].get("annotations") or {}).get(c.ANNOTATION_LEAVING_DEADLINE)
        for n, p in owned_by_name(s).items()
    }
    launchers = {p["metadata"]["name"] for p in s.launcher_pods}
    for a in actions:
        if not (isinstance(a, Patch) and a.kind == "Pod"):
            continue
        annotations = _annotations_set(a)
        if a.name in launchers and annotations.get(c.ANNOTATION_LEAVING_WORKERS):
            for worker_name, deadline in json.loads(annotations[c.ANNOTATION_LEAVING_WORKERS]).items():
                assert recorded.get(worker_name) == deadline, (worker_name, deadline, recorded.get(worker_name))
        elif c.ANNOTATION_LEAVING_DEADLINE in annotations:
            recorded[a.name] = annotations[c.ANNOTATION_LEAVING_DEADLINE]


def check_preconditions(s: Snapshot, actions: list[Action]) -> None:
    """Every patch carries the resourceVersion of the object as the plan read it (never someone else's object
    made again under the name), and every delete the uid."""
    read = {("Pod", n): p for n, p in s.pods_by_name.items()}
    read[("MPIJob", s.job["metadata"]["name"])] = s.job
    for a in actions:
        if isinstance(a, Patch):
            assert a.resource_version is not None, f"patch of {a.kind} {a.name} without a precondition"
            obj = read.get((a.kind, a.name))
            if obj is not None:
                assert a.resource_version == obj["metadata"]["resourceVersion"], f"{a.kind} {a.name}"
        if isinstance(a, Delete):
            assert a.uid, f"delete of {a.kind} {a.name} without a uid"


def check_plan(s: Snapshot, actions: list[Action]) -> None:
    if any(isinstance(a, ConfirmAbsence) for a in actions):
        # A plan that asks for live reads (issue 8, rule 1) decides and writes nothing.
        assert all(isinstance(a, ConfirmAbsence) for a in actions), actions
        return
    check_foreign_untouched(s, actions)
    check_preconditions(s, actions)
    if "elasticPolicy" not in s.job["spec"]:
        return
    for check in (
        check_listed_leave_first,
        check_floor,
        check_probes,
        check_graceful,
        check_disrupted_out_of_discovery,
        check_launcher_hears_recorded_deadlines,
    ):
        check(s, actions)
