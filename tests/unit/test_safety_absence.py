"""Issue 8, rule 1: absence is not deletion.

A node or pod missing from the cache (cold cache after a leader handover, a watch that has not delivered a
new node yet, a watch gap) is confirmed with a live read before any destructive or replica-lowering
decision depends on it. The planner asks (a plan made only of ConfirmAbsence actions, writing nothing);
the runtime reads and plans again with the answers in `Snapshot.absence_checks`.
"""

from __future__ import annotations

import asyncio
import copy

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.planner.actions import ConfirmAbsence, Create, Delete, Patch
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.planner.workers import MAX_CONFIRMATIONS
from mpijob.runtime.controller import Controller

from .builders import (
    NO_REGROW,
    NS,
    deleted_pods,
    elastic,
    emits,
    existing_children,
    mpijob,
    node,
    patched_pods,
    running_elastic_job,
    running_status,
    snap,
    spec_patches,
    status_of,
    worker,
)
from .world import World, WorldApi


def _pods(job: dict) -> list[dict]:  # type: ignore[type-arg]
    return [worker(job, 0, node="node-1"), worker(job, 1, node="node-2"), worker(job, 2, node="node-2")]


def test_node_missing_from_the_cache_is_confirmed_before_anything_is_decided() -> None:
    job = running_elastic_job(workers=3, max_replicas=4, policy="ScaleIn")

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Node", "node-2")]


def test_node_the_api_server_still_has_is_not_treated_as_deleted() -> None:
    job = running_elastic_job(workers=3, max_replicas=4, policy="ScaleIn")
    checks = {("Node", "node-2"): False}  # the watch has not delivered it yet

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks=checks, **existing_children(job)))

    assert spec_patches(actions) == []
    assert patched_pods(actions) == [] and deleted_pods(actions) == []
    assert not [a for a in actions if isinstance(a, ConfirmAbsence)]


def test_node_confirmed_gone_scales_in_as_before() -> None:
    job = running_elastic_job(workers=3, max_replicas=4, policy="ScaleIn")
    checks = {("Node", "node-2"): True}

    actions = plan(snap(job, _pods(job), node_map={"node-1": node("node-1")}, checks=checks, **existing_children(job)))

    [spec] = spec_patches(actions)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    assert sorted(deleted_pods(actions)) == ["pi-worker-1", "pi-worker-2"]


def test_leaving_worker_on_a_missing_node_waits_for_the_read_before_an_immediate_delete() -> None:
    job = mpijob(
        workers=2,
        elastic_policy=elastic(1, 4, node_termination_policy="Ignore", workers_to_delete=["pi-worker-1"]),
        status=running_status(),
    )
    pods = [worker(job, 0, node="node-1"), worker(job, 1, node="node-2")]

    actions = plan(snap(job, pods, node_map={"node-1": node("node-1")}, checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Node", "node-2")]


def test_worker_missing_from_the_cache_is_not_counted_as_lost_until_confirmed() -> None:
    job = running_elastic_job(workers=3, max_replicas=4, policy="ScaleIn")
    job["status"]["discoveredHosts"] = ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    pods = [worker(job, 0), worker(job, 1)]  # pi-worker-2 is not in the cache

    asked = plan(snap(job, pods, checks={}, **existing_children(job)))
    assert list(asked) == [ConfirmAbsence("Pod", "pi-worker-2")]

    present = plan(snap(job, pods, checks={("Pod", "pi-worker-2"): False}, **existing_children(job)))
    assert spec_patches(present) == []  # no decrement: it exists, the cache is behind

    gone = plan(snap(job, pods, checks={("Pod", "pi-worker-2"): True}, **existing_children(job)))
    [spec] = spec_patches(gone)
    assert spec.patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_live_reads_per_plan_are_bounded_whatever_the_status_says() -> None:
    job = running_elastic_job(workers=1, max_replicas=4, policy="ScaleIn")
    job["spec"]["elasticPolicy"]["maxReplicas"] = 10_000
    job["status"]["discoveredHosts"] = [f"pi-worker-{i}" for i in range(5000)] + ["not-ours", "pi-launcher"]

    actions = plan(snap(job, [worker(job, 0)], checks={}, **existing_children(job)))

    assert len(actions) == MAX_CONFIRMATIONS
    assert all(isinstance(a, ConfirmAbsence) and a.name.startswith("pi-worker-") for a in actions)


def test_world_node_deleted_is_confirmed_by_a_read_then_scaled_in() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 4, grace=0, regrow=NO_REGROW)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    reads = world.reads

    world.remove_node("node-2")
    world.settle("pi")

    assert world.reads > reads
    assert world.replicas("pi") == 2
    assert all(world.pod(n)["spec"]["nodeName"] == "node-1" for n in world.kept_workers("pi"))
    assert not [a for a in world.applied if isinstance(a, Create | Delete | Patch) and getattr(a, "kind", "") == "Node"]


# -- a removal request for a worker the cache does not show yet -------------------------------------------


def _listing(to_delete: list[str], *, suspend: bool = False) -> dict:  # type: ignore[type-arg]
    """A job that has allocated indexes 0-3 (lastWorkerIndex 3: pi-worker-3 was created moments ago, its
    watch event not delivered yet) and lists `to_delete`."""
    status = running_status()
    status["lastWorkerIndex"] = 3
    job = mpijob(
        workers=4,
        elastic_policy=elastic(1, 8, workers_to_delete=to_delete),
        status=status,
        run_policy={"suspend": suspend} if suspend else None,
    )
    return job


def test_a_listed_worker_missing_from_the_cache_is_confirmed_before_its_name_is_dropped() -> None:
    job = _listing(["pi-worker-3"])

    actions = plan(snap(job, _pods(job), checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Pod", "pi-worker-3")]


def test_a_finished_job_makes_no_live_read_for_a_listed_name() -> None:
    """A finished job acts on no removal request, so a listed name it never saw is not read for: the read
    would repeat on every reconcile of the finished job, forever (the finish path never drops the name)."""
    job = _listing(["pi-worker-3"])
    job["status"]["conditions"].append(
        {
            "type": "Succeeded",
            "status": "True",
            "reason": "MPIJobSucceeded",
            "message": "done",
            "lastTransitionTime": job["status"]["startTime"],
            "lastUpdateTime": job["status"]["startTime"],
        }
    )

    actions = plan(snap(job, _pods(job), checks={}, **existing_children(job)))

    assert not [a for a in actions if isinstance(a, ConfirmAbsence)]


def test_a_listed_worker_the_api_server_has_stays_listed_until_the_cache_shows_it() -> None:
    job = _listing(["pi-worker-3"])
    checks = {("Pod", "pi-worker-3"): False}  # created moments ago: the cache is behind

    actions = plan(snap(job, _pods(job), checks=checks, **existing_children(job)))

    assert spec_patches(actions) == []  # the name stays in workersToDelete
    assert not [e for e in emits(actions, "Warning", "InvalidWorkerToDelete")]
    status = status_of(actions)
    # Not recorded as leaving either: a leaving name whose pod is absent is dropped as gone.
    assert status is None or "pi-worker-3" not in (status.get("leavingWorkers") or [])


def test_a_listed_worker_confirmed_absent_is_dropped_with_a_warning() -> None:
    job = _listing(["pi-worker-3"])

    actions = plan(snap(job, _pods(job), checks={("Pod", "pi-worker-3"): True}, **existing_children(job)))

    [warning] = emits(actions, "Warning", "InvalidWorkerToDelete")
    assert "spec.elasticPolicy.workersToDelete" in warning.message and "no such pod" in warning.message
    [spec] = spec_patches(actions)
    assert spec.patch == {"spec": {"elasticPolicy": {"workersToDelete": []}}}


def test_a_name_the_job_never_allocated_is_dropped_at_once_without_a_read() -> None:
    job = _listing(["pi-worker-4", "other-worker-0", "nope"])

    actions = plan(snap(job, _pods(job), checks={}, **existing_children(job)))

    assert not actions.confirm
    [warning] = emits(actions, "Warning", "InvalidWorkerToDelete")
    assert all(repr(n) in warning.message for n in ("pi-worker-4", "other-worker-0", "nope"))


def test_a_suspended_job_confirms_a_listed_worker_missing_from_the_cache_too() -> None:
    job = _listing(["pi-worker-3"], suspend=True)

    actions = plan(snap(job, _pods(job), checks={}, **existing_children(job)))

    assert list(actions) == [ConfirmAbsence("Pod", "pi-worker-3")]


def test_world_a_worker_listed_before_the_cache_shows_it_is_removed_once_it_does() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, elastic_policy=elastic(1, 8, grace=0)))
    world.settle("pi")
    # A scale-up creates pi-worker-3; the user lists it (and scales back) before the operator's cache
    # shows it.
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 4
    world.reconcile("pi")
    assert "pi-worker-3" in world.worker_names("pi")
    world.uncached.add("pi-worker-3")
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = ["pi-worker-3"]
    reads = world.reads

    for _ in range(3):
        world.reconcile("pi")

    assert world.workers_to_delete("pi") == ["pi-worker-3"]
    assert world.reads > reads  # each reconcile asked the API server, which still has the pod
    assert not [e for e in world.events if e.type == "Warning"]

    world.uncached.clear()
    world.settle("pi")

    assert "pi-worker-3" not in world.worker_names("pi")
    assert sorted(world.worker_names("pi")) == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    assert world.workers_to_delete("pi") == []
    assert not [e for e in world.events if e.type == "Warning"]


def test_a_long_list_of_stale_names_is_worked_through_a_bounded_round_of_reads_per_reconcile() -> None:
    # An Append job that has allocated indexes up to 200; the user lists 100 names of workers long gone.
    # Each reconcile makes one round of at most MAX_CONFIRMATIONS live reads and then plans (the controller
    # gives up after a few rounds: a plan that needed every name answered first would never be made).
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 8, grace=0, index_policy="Append")))
    world.settle("pi")
    world.job("pi")["status"]["lastWorkerIndex"] = 200
    stale = [f"pi-worker-{i}" for i in range(100, 200)]
    world.job("pi")["spec"]["elasticPolicy"]["workersToDelete"] = stale

    rounds = []
    for _ in range(20):
        reads, plans = world.reads, len(world.plans)
        world.reconcile("pi")
        rounds.append(len(world.plans) - plans)
        assert world.reads - reads <= MAX_CONFIRMATIONS
        if not world.workers_to_delete("pi"):
            break

    assert world.workers_to_delete("pi") == []
    assert max(rounds) <= 2  # one round of reads, then the plan
    assert len(world.worker_names("pi")) == 2
    warnings = [e for e in world.events if e.reason == "InvalidWorkerToDelete"]
    assert warnings and all("no such pod" in e.message for e in warnings)


class _WorldCache:
    """The controller's cache, read from the world (always up to date here)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def mpijob(self, key: tuple[str, str]) -> dict | None:  # type: ignore[type-arg]
        return copy.deepcopy(self.world.get("MPIJob", key[1]))

    def pod(self, namespace: str, name: str) -> dict | None:  # type: ignore[type-arg]
        return self.world.get("Pod", name)

    def config_map_version(self, namespace: str, job: str) -> object:
        cm = self.world.get("ConfigMap", c.config_map_name(job))
        return None if cm is None else cm["metadata"]["resourceVersion"]

    def snapshot(self, job: dict, now: object, config: object) -> object:  # type: ignore[type-arg]
        return self.world.snapshot(job["metadata"]["name"])


def test_a_job_needing_more_live_reads_than_one_reconcile_makes_is_planned_after_a_few() -> None:
    # 60 workers of a ScaleIn job went away while the operator was down: each must be confirmed gone by a
    # live read before it counts as lost, more than one reconcile may read (3 rounds of 16). The controller
    # carries the answers over to the next reconcile (queued at once) until the plan can be made.
    world = World()
    world.add_nodes("node-1")
    made = world.add(mpijob(workers=62, elastic_policy=elastic(1, 64, node_termination_policy="ScaleIn")))
    names = [f"pi-worker-{i}" for i in range(62)]
    made["status"] = {**running_status(), "discoveredHosts": names, "lastWorkerIndex": 61}
    for i in range(2):
        world.add(worker(made, i))
    controller = Controller(Executor(WorldApi(world), post_events=False), OperatorConfig())  # type: ignore[arg-type]
    controller.cache = _WorldCache(world)  # type: ignore[assignment]
    controller.clock = lambda: world.now
    controller.leading.set()

    again = [asyncio.run(controller.reconcile((NS, "pi"))) for _ in range(2)]

    assert again[0].requeue_after == 0.0  # out of rounds: requeued at once, answers kept
    for _ in range(5):
        if world.replicas("pi") != 62:
            break
        asyncio.run(controller.reconcile((NS, "pi")))
    assert world.replicas("pi") == 2
    assert sorted(world.workers_to_delete("pi")) == sorted(names[2:])
    assert controller.stats.live_reads <= 60 + 16
    assert controller.records.of((NS, "pi")).carried_checks == {}
