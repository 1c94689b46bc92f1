"""Properties of the elastic planner over random jobs, pods (including foreign ones), nodes and workersToDelete.

- a pod the job does not own is never patched or deleted, and its name is never created over;
- listed workers leave before (or with) any unlisted one, and always in the plan that sees them listed;
- node termination (or any spec patch) never takes Worker replicas below minReplicas, nor raises them;
- a Running worker whose node is still there is deleted only after it spent the grace period out of discovery;
- a worker whose pod has DisruptionTarget=True is never in the discovery list, from the plan that first sees it;
- a launcher hears only deadlines recorded on the workers (before it, or earlier in the same plan);
- in the world simulator, reconciling to a fixed point converges the kept workers to replicas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mpijob.api import constants as c
from mpijob.planner.actions import Action, ConfirmAbsence, Create, Defer, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj, Snapshot, condition_true, is_owned_by, parse_time

from .builders import (
    SPOT_TAINT,
    at,
    disruption_target,
    elastic,
    foreign_pod,
    hosts_in,
    leaving,
    mpijob,
    node,
    snap,
    ts,
    worker,
)
from .world import World, controller_of, is_leaving, is_terminating

NODE_STATES = ["healthy", "healthy", "spot", "cordoned", "deleted"]
PHASES = ["Running", "Running", "Running", "Pending", "Failed", "Succeeded", "Unknown"]
POLICIES = ["ScaleIn", "ScaleIn", "Replace", "Ignore"]
# DisruptionTarget reasons (issue 19); "False" draws a condition with status False (no signal).
DISRUPTIONS = [
    "TerminationByKubelet",
    "EvictionByEvictionAPI",
    "PreemptionByScheduler",
    "DeletionByTaintManager",
    "DeletionByPodGC",
]
JOB_LABELS = {c.LABEL_JOB_NAME: "pi", c.LABEL_JOB_ROLE: c.ROLE_WORKER}
PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- invariants of one plan --------------------------------------------------------------------------------


def _annotations_set(action: Patch) -> dict[str, Any]:
    return dict(((action.patch.get("metadata") or {}).get("annotations")) or {})


def _newly_leaving(actions: list[Action]) -> dict[str, str]:
    found = {}
    for a in actions:
        if isinstance(a, Patch) and a.kind == "Pod":
            annotations = _annotations_set(a)
            if c.ANNOTATION_LEAVING_SINCE in annotations:
                found[a.name] = annotations[c.ANNOTATION_LEAVING_REASON]
    return found


def _owned(s: Snapshot) -> dict[str, Obj]:
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
    owned = _owned(s)
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
    owned = _owned(s)
    newly = _newly_leaving(actions)
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
    owned = _owned(s)
    newly = _newly_leaving(actions)
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
    disrupted = {n for n, p in _owned(s).items() if is_disrupted(p)}
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
        n: (p["metadata"].get("annotations") or {}).get(c.ANNOTATION_LEAVING_DEADLINE) for n, p in _owned(s).items()
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


# -- random snapshots ---------------------------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    states = draw(st.lists(st.sampled_from(NODE_STATES), min_size=1, max_size=4))
    names = [f"node-{i}" for i in range(len(states))]
    nodes = {
        n: node(n, taints=[SPOT_TAINT] if state == "spot" else (), unschedulable=state == "cordoned")
        for n, state in zip(names, states, strict=True)
        if state != "deleted"
    }
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, 8))
    replicas = draw(st.integers(low, high))
    grace = draw(st.sampled_from([0, 10, 30]))
    job = mpijob(
        workers=replicas,
        elastic_policy=elastic(
            low,
            high,
            node_termination_policy=draw(st.sampled_from(POLICIES)),
            grace=grace,
            index_policy=draw(st.sampled_from(["FillGaps", "Append"])),
        ),
        run_policy={"suspend": draw(st.sampled_from([False] * 6 + [True]))},
        status={"conditions": [], "startTime": ts(-600), "lastWorkerIndex": draw(st.integers(-1, 14))},
    )

    pods = []
    for index in draw(st.lists(st.integers(0, 11), unique=True, max_size=9)):
        annotations: dict[str, str] = {}
        if draw(st.integers(0, 3)) == 0:
            annotations |= leaving(ts(-draw(st.sampled_from([0, 5, 10, 30, 60]))))
        if draw(st.booleans()):
            annotations[c.ANNOTATION_DELETION_COST] = str(draw(st.integers(-5, 5)))
        pod = worker(
            job,
            index,
            node=draw(st.sampled_from([None, *names])),
            phase=draw(st.sampled_from(PHASES)),
            ready=draw(st.booleans()),
            terminating=draw(st.integers(0, 5)) == 0,
            annotations=annotations,
            labels=None if draw(st.integers(0, 4)) else {},
        )
        disruption = draw(st.sampled_from([None] * 5 + DISRUPTIONS + ["False"]))
        if disruption is not None:
            target = disruption_target("EvictionByEvictionAPI", "False") if disruption == "False" else None
            pod["status"]["conditions"].append(target or disruption_target(disruption))
        pods.append(pod)
    ours = [p["metadata"]["name"] for p in pods]

    foreign_names = [f"pi-worker-{k}" for k in range(14) if f"pi-worker-{k}" not in ours]
    foreign_names += ["other-worker-0", "pi-launcher-abcde", "stray"]
    foreign = [
        foreign_pod(
            name,
            owner_uid=draw(st.sampled_from(["uid-other", None])),
            labels=draw(st.sampled_from([None, JOB_LABELS])),
        )
        for name in draw(st.lists(st.sampled_from(foreign_names), unique=True, max_size=5))
    ]
    candidates = ours + [p["metadata"]["name"] for p in foreign] + ["pi-worker-0x", "pi-worker-99", "pi-launcher"]
    job["spec"]["elasticPolicy"]["workersToDelete"] = draw(
        st.lists(st.sampled_from(candidates), unique=True, max_size=5)
    )
    job["status"]["leavingWorkers"] = sorted(draw(st.sets(st.sampled_from(candidates))) if candidates else [])
    s = snap(job, pods, foreign=foreign, node_map=nodes, now=at(draw(st.sampled_from([0, 1, 20, 45]))))
    # Listed names with no pod in the cache that the API server still has (a worker created moments ago):
    # the live read says "exists".
    absent = [n for n in job["spec"]["elasticPolicy"]["workersToDelete"] if n not in s.pods_by_name]
    behind = draw(st.sets(st.sampled_from(absent))) if absent else set()
    return replace(s, absence_checks={**s.absence_checks, **{("Pod", n): False for n in behind}})


@PROFILE
@given(snapshots())
def test_a_pod_the_job_does_not_own_is_never_deleted_or_patched(s: Snapshot) -> None:
    actions = plan(s)
    if any(not is_owned_by(p, s.job) for p in s.pods_by_name.values()):
        event("with foreign pods")
    if set(s.job["spec"]["elasticPolicy"].get("workersToDelete") or []) - set(_owned(s)):
        event("with foreign or bad names listed")
    check_foreign_untouched(s, actions)


@st.composite
def node_terminations(draw: st.DrawFn) -> Snapshot:
    """A running elastic job spread over nodes of which some are going away, with some workers already
    removed by someone else."""
    states = draw(st.lists(st.sampled_from(NODE_STATES), min_size=1, max_size=4))
    names = [f"node-{i}" for i in range(len(states))]
    nodes = {
        n: node(n, taints=[SPOT_TAINT] if state == "spot" else (), unschedulable=state == "cordoned")
        for n, state in zip(names, states, strict=True)
        if state != "deleted"
    }
    count = draw(st.integers(1, 8))
    low = draw(st.integers(1, max(1, count // 2)))
    job = mpijob(
        workers=count,
        elastic_policy=elastic(low, 8, node_termination_policy=draw(st.sampled_from(["ScaleIn", "Replace"]))),
        status={"conditions": [], "startTime": ts(-600)},
    )
    pods = []
    for i in range(count):
        gone = draw(st.sampled_from(["no"] * 6 + ["evicted", "deleted", "disrupted"]))
        pods.append(
            worker(
                job,
                i,
                node=draw(st.sampled_from(names)),
                phase="Failed" if gone == "evicted" else "Running",
                reason="Evicted" if gone == "evicted" else None,
                terminating=gone == "deleted",
                disruption=draw(st.sampled_from(DISRUPTIONS)) if gone == "disrupted" else None,
            )
        )
    return snap(job, pods, node_map=nodes)


@PROFILE
@given(node_terminations())
def test_node_termination_never_lowers_replicas_below_min_replicas(s: Snapshot) -> None:
    actions = plan(s)
    low = s.job["spec"]["elasticPolicy"]["minReplicas"]
    for a in actions:
        if isinstance(a, Patch) and a.kind == "MPIJob" and a.subresource is None:
            replicas = ((a.patch.get("spec", {}).get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas")
            event(
                "replicas unchanged" if replicas is None else "lowered to the floor" if replicas == low else "lowered"
            )
    check_floor(s, actions)
    check_plan(s, actions)


@PROFILE
@given(snapshots())
def test_every_single_plan_keeps_all_invariants(s: Snapshot) -> None:
    actions = plan(s)
    if any(is_disrupted(p) for p in s.owned_pods):
        event("with a DisruptionTarget")
    for kind in (Create, Patch, Delete):
        if any(isinstance(a, kind) and (a.obj["kind"] if isinstance(a, Create) else a.kind) == "Pod" for a in actions):
            event(f"pod {kind.__name__}")
    check_plan(s, actions)


@st.composite
def scale_ins(draw: st.DrawFn) -> tuple[Snapshot, list[str], int]:
    """A healthy elastic job whose replicas were lowered by k with k of its workers listed (plus maybe junk
    names), sometimes lowered further (then ranked victims go too), never below minReplicas."""
    indexes = draw(st.lists(st.integers(0, 11), unique=True, min_size=1, max_size=9))
    low = draw(st.integers(1, len(indexes)))
    job = mpijob(
        workers=len(indexes),
        elastic_policy=elastic(low, 12, node_termination_policy=draw(st.sampled_from(POLICIES)), grace=30),
        status={"conditions": [], "startTime": ts(-600)},
    )
    node_names = [f"node-{i}" for i in range(draw(st.integers(1, 3)))]
    pods = [
        worker(
            job,
            i,
            node=draw(st.sampled_from(node_names)),
            ready=draw(st.booleans()),
            annotations={c.ANNOTATION_DELETION_COST: str(draw(st.integers(-3, 3)))} if draw(st.booleans()) else None,
        )
        for i in indexes
    ]
    names = [p["metadata"]["name"] for p in pods]
    listed = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names) - low))
    junk = draw(st.lists(st.sampled_from(["pi-launcher", "pi-worker-0x", "pi-worker-99"]), unique=True))
    job["spec"]["elasticPolicy"]["workersToDelete"] = draw(st.permutations(listed + junk))
    further = draw(st.integers(0, len(names) - len(listed) - low))
    replicas = len(names) - len(listed) - further
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    return snap(job, pods, node_map={n: node(n) for n in node_names}), listed, further


@PROFILE
@given(scale_ins())
def test_listed_workers_are_chosen_before_any_unlisted_one(case: tuple[Snapshot, list[str], int]) -> None:
    s, listed, further = case
    actions = plan(s)
    check_plan(s, actions)

    newly = _newly_leaving(actions)
    event(f"listed={len(listed)} further={further}")
    assert {n for n, why in newly.items() if why == "workersToDelete"} == set(listed)
    assert len([n for n, why in newly.items() if why == "scale-down"]) == further
    assert not any(isinstance(a, Create) for a in actions if getattr(a, "obj", {}).get("kind") == "Pod")
    assert not [
        a
        for a in actions
        if isinstance(a, Patch)
        and a.kind == "MPIJob"
        and a.subresource is None
        and "mpiReplicaSpecs" in a.patch["spec"]
    ]


# -- random runs in the world -------------------------------------------------------------------------------


@dataclass
class Step:
    kind: str
    arg: Any = None


def _steps() -> st.SearchStrategy[list[Step]]:
    one = st.one_of(
        st.builds(Step, st.just("taint"), st.integers(0, 3)),
        st.builds(Step, st.just("cordon"), st.integers(0, 3)),
        st.builds(Step, st.just("remove"), st.integers(0, 3)),
        st.builds(Step, st.just("evict"), st.integers(0, 11)),
        st.builds(Step, st.just("delete"), st.integers(0, 11)),
        st.builds(Step, st.just("disrupt"), st.tuples(st.integers(0, 11), st.sampled_from(DISRUPTIONS))),
        st.builds(Step, st.just("shut-down"), st.integers(0, 11)),
        st.builds(Step, st.just("scale"), st.integers(1, 8)),
        st.builds(Step, st.just("scale-in"), st.lists(st.integers(0, 11), unique=True, max_size=3)),
        st.builds(
            Step,
            st.just("bad-names"),
            st.lists(
                st.sampled_from(["pi-launcher", "other-worker-0", "x-y", "pi-worker-77"]),
                unique=True,
                min_size=1,
                max_size=2,
            ),
        ),
        st.builds(Step, st.just("reconcile")),
        st.builds(Step, st.just("time"), st.sampled_from([1, 10, 40])),
    )
    return st.lists(one, max_size=8)


def _healthy(world: World) -> list[str]:
    return sorted(n for n, obj in world.nodes.items() if not obj["spec"])


def perturb(world: World, steps: list[Step], nodes: int, low: int, high: int) -> None:
    """Applies random steps to job "pi": node signals, evictions, deletions, disruptions (DisruptionTarget, and
    the kubelet stopping a pod in a node shutdown), scale edits, reconciles, time."""
    for step in steps:
        workers = world.worker_names("pi")
        job = world.job("pi")
        if step.kind in ("taint", "cordon", "remove"):
            name = f"node-{step.arg % nodes}"
            if name in world.nodes and step.kind == "taint":
                world.taint(name, SPOT_TAINT)
            elif name in world.nodes and step.kind == "cordon":
                world.cordon(name)
            elif name in world.nodes:
                world.remove_node(name)
            world.placement = _healthy(world)
        elif step.kind in ("evict", "delete") and workers:
            victim = workers[step.arg % len(workers)]
            world.kubelet_evict(victim) if step.kind == "evict" else world.delete_pod(victim)
        elif step.kind == "disrupt" and workers:
            index, reason = step.arg
            world.disrupt(workers[index % len(workers)], reason)
        elif step.kind == "shut-down" and workers:
            world.shut_down(workers[step.arg % len(workers)])
        elif step.kind == "scale":
            job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = max(low, min(high, step.arg))
            job["metadata"]["resourceVersion"] = world.next_rv()
        elif step.kind == "scale-in" and workers:
            names = sorted({workers[i % len(workers)] for i in step.arg})
            replicas = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
            job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = max(low, replicas - len(names))
            job["spec"]["elasticPolicy"]["workersToDelete"] = names
            job["metadata"]["resourceVersion"] = world.next_rv()
        elif step.kind == "bad-names":
            job["spec"]["elasticPolicy"]["workersToDelete"] = list(step.arg)
            job["metadata"]["resourceVersion"] = world.next_rv()
        elif step.kind == "reconcile":
            world.reconcile("pi")
        elif step.kind == "time":
            world.advance(step.arg)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 4),
    low=st.integers(1, 3),
    extra=st.integers(0, 4),
    start=st.integers(0, 4),
    policy=st.sampled_from(POLICIES),
    index_policy=st.sampled_from(["FillGaps", "Append"]),
    grace=st.sampled_from([0, 30]),
    foreign=st.lists(st.integers(0, 11), unique=True, max_size=3),
    steps=_steps(),
)
def test_world_reaches_a_fixed_point_with_replicas_kept_workers(
    nodes: int,
    low: int,
    extra: int,
    start: int,
    policy: str,
    index_policy: str,
    grace: int,
    foreign: list[int],
    steps: list[Step],
) -> None:
    high = low + extra
    world = World(observer=check_plan)
    world.add_nodes(*(f"node-{i}" for i in range(nodes)))
    world.placement = _healthy(world)
    strangers = [world.add(foreign_pod(f"pi-worker-{k}", labels=JOB_LABELS)) for k in foreign]
    world.add(mpijob(name="other", workers=1))
    world.settle("other")
    strangers += world.workers("other")
    world.add(
        mpijob(
            workers=low + min(start, extra),
            elastic_policy=elastic(low, high, node_termination_policy=policy, grace=grace, index_policy=index_policy),
        )
    )
    world.settle("pi")
    if world.get("Job", c.launcher_name("pi")) is not None:
        world.start_launcher("pi")  # its pod hears discovery and deadlines through the nudge
        world.settle("pi")

    perturb(world, steps, nodes, low, high)

    world.settle("pi", max_rounds=80)
    event(f"policy={policy}, {'perturbed' if steps else 'untouched'}")

    replicas = world.replicas("pi")
    kept = world.kept_workers("pi")
    # Extra kept workers only while a cordon is held at the floor and its replacements have nowhere to run
    # (make before break, issue 8 rule 8): as many serving on a cordoned node as replacements not running.
    surge = len(kept) - replicas
    cordoned = [
        n
        for n in kept
        if (world.nodes.get(world.pod(n)["spec"].get("nodeName") or "") or {}).get("spec", {}).get("unschedulable")
    ]
    not_running = [n for n in kept if world.pod(n)["status"]["phase"] != "Running"]
    assert surge == 0 or (0 < surge <= len(cordoned) and surge <= len(not_running)), (surge, cordoned, not_running)
    assert low <= replicas <= high
    assert world.worker_names("pi") == kept, "nobody is left leaving, failed or terminating"
    assert world.workers_to_delete("pi") == []
    # Serving: Running, and not being killed (under Ignore a disrupted worker stays, out of discovery).
    running = [n for n in kept if world.pod(n)["status"]["phase"] == "Running" and not is_disrupted(world.pod(n))]
    assert sorted(world.discovered("pi")) == sorted(running)
    for stranger in strangers:
        now = world.get("Pod", stranger["metadata"]["name"])
        assert now is not None and now["metadata"]["uid"] == stranger["metadata"]["uid"]
        assert not is_leaving(now) and not is_terminating(now)
        assert controller_of(now) != world.job("pi")["metadata"]["uid"]
    assert world.errors == []
    assert world.tolerated == []
