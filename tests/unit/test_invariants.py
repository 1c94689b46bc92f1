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

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mpijob.api import constants as c
from mpijob.planner.actions import Create, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Snapshot, is_owned_by

from .builders import (
    SPOT_TAINT,
    at,
    disruption_target,
    elastic,
    foreign_pod,
    leaving,
    mpijob,
    node,
    snap,
    ts,
    worker,
)
from .invariants import (
    DISRUPTIONS,
    POLICIES,
    PROFILE,
    check_floor,
    check_foreign_untouched,
    check_plan,
    is_disrupted,
    newly_leaving,
    owned_by_name,
)
from .perturbation import Step, healthy_nodes, perturb, random_steps
from .world import World, controller_of, is_leaving, is_terminating

NODE_STATES = ["healthy", "healthy", "spot", "cordoned", "deleted"]
PHASES = ["Running", "Running", "Running", "Pending", "Failed", "Succeeded", "Unknown"]
JOB_LABELS = {c.LABEL_JOB_NAME: "pi", c.LABEL_JOB_ROLE: c.ROLE_WORKER}


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
    if set(s.job["spec"]["elasticPolicy"].get("workersToDelete") or []) - set(owned_by_name(s)):
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

    newly = newly_leaving(actions)
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
    steps=random_steps(),
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
    world.placement = healthy_nodes(world)
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
