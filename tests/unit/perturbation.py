"""Random runs of a running elastic job "pi" in the World: steps drawn by hypothesis (node signals, evictions,
deletions, disruptions, scale edits, reconciles, time) and the world they leave; shared by the property
tests that perturb a job and then check what the planner does with it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from mpijob.planner.actions import ConfirmAbsence, Plan
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Snapshot

from .builders import SPOT_TAINT, elastic, mpijob
from .invariants import DISRUPTIONS, POLICIES
from .world import World


@dataclass
class Step:
    kind: str
    arg: Any = None


def random_steps() -> st.SearchStrategy[list[Step]]:
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


def healthy_nodes(world: World) -> list[str]:
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
            world.placement = healthy_nodes(world)
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


def answered(world: World, snapshot: Snapshot) -> tuple[Snapshot, Plan]:
    """The snapshot the controller acts on (the live reads its plan asks for answered from the world first),
    and its plan."""
    made = plan(snapshot)
    if not made.confirm:
        return snapshot, made
    checks = {
        (a.kind, a.name): (a.name not in world.nodes if a.kind == "Node" else world.get(a.kind, a.name) is None)
        for a in made.confirm
        if isinstance(a, ConfirmAbsence)
    }
    snapshot = replace(snapshot, absence_checks=checks)
    return snapshot, plan(snapshot)


def perturbed_world(nodes: int, low: int, extra: int, policy: str, grace: int, steps: list[Step]) -> World:
    """A running elastic job "pi" over `nodes` nodes, settled, then perturbed by `steps`."""
    world = World()
    world.add_nodes(*(f"node-{i}" for i in range(nodes)))
    world.placement = healthy_nodes(world)
    world.add(
        mpijob(
            workers=low + extra // 2,
            elastic_policy=elastic(low, low + extra, node_termination_policy=policy, grace=grace),
        )
    )
    world.settle("pi")
    perturb(world, steps, nodes, low, low + extra)
    return world


# perturbed_world's arguments, drawn.
WORLD_ARGS = {
    "nodes": st.integers(1, 4),
    "low": st.integers(1, 3),
    "extra": st.integers(0, 4),
    "policy": st.sampled_from(POLICIES),
    "grace": st.sampled_from([0, 30]),
    "steps": random_steps(),
}
