"""Regrow (issue 19): a ScaleIn job that lost workers to its nodes grows back to its target once the cluster can
place workers again, with a bounded number of probes that never wait for a node longer than their timeout."""

from __future__ import annotations

import itertools
from datetime import datetime

from hypothesis import event, given
from hypothesis import strategies as st

from mpijob.api import constants as c
from mpijob.api.models import RegrowPolicy
from mpijob.planner.actions import Action, Create, Delete, Patch, RequeueAfter
from mpijob.planner.plan import plan
from mpijob.planner.regrow import JITTER, backoff_seconds
from mpijob.planner.snapshot import Obj, Snapshot, parse_time

from .builders import SPOT_TAINT, elastic, mpijob
from .invariants import DISRUPTIONS, PROFILE, check_plan
from .world import World, is_terminating

TIMEOUT = 60
BACKOFF = 20
MAX_BACKOFF = 100
REGROW = {"maxProbes": 2, "probeTimeoutSeconds": TIMEOUT, "backoffSeconds": BACKOFF, "maxBackoffSeconds": MAX_BACKOFF}


def _is_probe(pod: Obj) -> bool:
    return c.ANNOTATION_REGROW_PROBE in (pod["metadata"].get("annotations") or {})


def _waiting_probes(world: World) -> list[Obj]:
    return [p for p in world.pods() if _is_probe(p) and not p["spec"].get("nodeName") and not is_terminating(p)]


class Recorder:
    """Every plan's invariants (invariants.check_plan), and when each probe was created and deleted."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.created: dict[str, datetime] = {}
        self.deleted: dict[str, datetime] = {}
        self.max_waiting = 0
        world.observer = self

    def __call__(self, s: Snapshot, actions: list[Action]) -> None:
        check_plan(s, actions)
        # Deletes of probes still waiting for a node (a bound one is a worker and leaves like any other).
        bound = {p["metadata"]["name"] for p in s.owned_pods if p["spec"].get("nodeName")}
        for a in actions:
            if isinstance(a, Create) and a.obj["kind"] == "Pod" and _is_probe(a.obj):
                self.created[a.obj["metadata"]["name"]] = s.now
            if isinstance(a, Delete) and a.kind == "Pod" and a.name in self.created and a.name not in bound:
                self.deleted.setdefault(a.name, s.now)

    def note(self) -> None:
        self.max_waiting = max(self.max_waiting, len(_waiting_probes(self.world)))


def run(world: World, seconds: float, job: str = "pi", recorder: Recorder | None = None) -> None:
    """Reconciles for `seconds` of simulated time: the scheduler binds what it can, the kubelet runs and removes
    pods, and the clock jumps to the next requeue when nothing else happens."""
    end = world.now.timestamp() + seconds
    for _ in range(2000):
        actions = world.reconcile(job)
        busy = any(isinstance(a, Create | Patch | Delete) for a in actions)
        busy = world.bind_pending() or busy
        busy = world.kubelet() or busy
        if recorder is not None:
            recorder.note()
        if busy:
            continue
        waits = [a.seconds for a in actions if isinstance(a, RequeueAfter)]
        left = end - world.now.timestamp()
        if left <= 0:
            return
        world.advance(min([left, *waits]) if waits else left)
    raise AssertionError("no end of simulated time")


def _world(workers: int = 4, regrow: Obj | None = None, **labels: str) -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    job = mpijob(workers=workers, elastic_policy=elastic(1, 8, grace=0, regrow=REGROW if regrow is None else regrow))
    if labels:
        job["metadata"]["labels"] = labels
    world.add(job)
    world.settle("pi")
    return world


def _annotations(world: World) -> dict[str, str]:
    return {k: v for k, v in (world.job("pi")["metadata"].get("annotations") or {}).items() if "regrow" in k}


def test_spot_taint_shrinks_then_a_new_node_brings_the_job_back_to_its_target() -> None:
    world = _world()
    recorder = Recorder(world)
    world.taint("node-2", SPOT_TAINT)
    world.placement = []  # the spot pool is empty: nothing can be placed
    run(world, 5, recorder=recorder)
    assert world.replicas("pi") == 2
    assert _annotations(world) == {c.ANNOTATION_REGROW_TARGET: "4", c.ANNOTATION_REGROW_REPLICAS: "2"}
    regrow = world.job("pi")["status"]["regrow"]
    assert (regrow["target"], regrow["current"], regrow["reason"]) == (4, 2, "Probing")

    world.remove_node("node-2")
    run(world, 300, recorder=recorder)
    assert world.replicas("pi") == 2, "no capacity: still at 2"

    world.add_nodes("node-3")
    world.placement = ["node-3"]
    run(world, 300, recorder=recorder)

    assert world.replicas("pi") == 4
    assert len(world.kept_workers("pi")) == 4
    assert sorted(world.discovered("pi")) == sorted(world.kept_workers("pi"))
    assert _annotations(world) == {}, "no target left behind at the target"
    assert "regrow" not in world.job("pi")["status"]
    assert [e.reason for e in world.events].count("Regrown") == 1
    assert recorder.max_waiting <= 2


def test_regrown_workers_get_names_no_worker_of_the_job_ever_had() -> None:
    world = _world()
    before = set(world.worker_names("pi"))
    world.taint("node-2", SPOT_TAINT)
    world.add_nodes("node-3")
    world.placement = ["node-1", "node-3"]
    run(world, 30)
    assert world.replicas("pi") == 4
    new = set(world.worker_names("pi")) - before
    assert len(new) == 2
    highest = max(c.worker_index("pi", n) or 0 for n in before)
    # FillGaps would have reused pi-worker-2 and -3, which Horovod may have blacklisted.
    assert all((c.worker_index("pi", n) or 0) > highest for n in new)


def test_without_capacity_at_most_max_probes_wait_and_each_goes_within_its_timeout_with_capped_backoff() -> None:
    world = _world()
    recorder = Recorder(world)
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 1200, recorder=recorder)

    assert recorder.max_waiting <= 2
    assert recorder.created, "it probed"
    for name, made in recorder.created.items():
        gone = recorder.deleted.get(name)
        if gone is None:
            assert (world.now - made).total_seconds() < TIMEOUT, f"{name} outlived its timeout"
        else:
            assert (gone - made).total_seconds() <= TIMEOUT, f"{name} lived {(gone - made).total_seconds()}s"
    # The gaps between probe rounds: each a backoff, growing, never above the ceiling.
    rounds = sorted(set(recorder.created.values()))
    gaps = [(b - a).total_seconds() - TIMEOUT for a, b in itertools.pairwise(rounds)]
    assert len(gaps) >= 4
    assert all(BACKOFF * (1 - JITTER) <= g <= MAX_BACKOFF + 1e-6 for g in gaps), gaps
    assert gaps[-1] >= MAX_BACKOFF * (1 - JITTER) - 1e-6, "reaches the ceiling"
    assert gaps[1] > gaps[0] * 1.2, "grows"
    regrow = world.job("pi")["status"]["regrow"]
    assert regrow["timedOutAttempts"] >= len(gaps)
    assert any(e.reason == "RegrowBackoff" for e in world.events)
    assert world.replicas("pi") == 2


def test_a_manual_scale_in_after_a_loss_is_the_new_target_and_is_not_undone() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 5)
    assert world.replicas("pi") == 2
    # The user shrinks further, naming the worker: that is their size now.
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    job["spec"]["elasticPolicy"]["workersToDelete"] = [world.kept_workers("pi")[0]]
    job["metadata"]["resourceVersion"] = world.next_rv()
    world.add_nodes("node-3")
    world.placement = ["node-1", "node-3"]
    run(world, 600)

    assert world.replicas("pi") == 1
    assert len(world.kept_workers("pi")) == 1
    assert _annotations(world) == {}
    assert not [p for p in world.pods() if _is_probe(p) and not is_terminating(p) and not p["spec"].get("nodeName")]


def test_a_manual_scale_in_of_a_job_at_its_target_is_never_undone() -> None:
    world = _world()
    world.add_nodes("node-3")
    job = world.job("pi")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    job["metadata"]["resourceVersion"] = world.next_rv()
    run(world, 600)
    assert world.replicas("pi") == 2
    assert _annotations(world) == {}
    assert not any(_is_probe(p) for p in world.pods())


def test_the_target_is_never_above_max_replicas_even_when_the_annotation_says_so() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 5)
    job = world.job("pi")
    job["metadata"]["annotations"][c.ANNOTATION_REGROW_TARGET] = "50"  # edited by hand
    job["metadata"]["resourceVersion"] = world.next_rv()
    world.add_nodes("node-3")
    world.placement = ["node-1", "node-3"]
    run(world, 600)
    assert world.replicas("pi") == 8, "maxReplicas"
    assert _annotations(world) == {}


def test_an_unreadable_target_annotation_is_dropped_and_nothing_grows() -> None:
    world = _world()
    job = world.job("pi")
    job["metadata"].setdefault("annotations", {})[c.ANNOTATION_REGROW_TARGET] = "+7"
    job["metadata"]["annotations"][c.ANNOTATION_REGROW_REPLICAS] = "4"
    job["metadata"]["resourceVersion"] = world.next_rv()
    run(world, 60)
    assert world.replicas("pi") == 4
    assert _annotations(world) == {}


def test_regrow_off_leaves_the_job_at_its_shrunk_size() -> None:
    world = _world(regrow={"enabled": False})
    world.taint("node-2", SPOT_TAINT)
    world.add_nodes("node-3")
    world.placement = ["node-1", "node-3"]
    run(world, 600)
    assert world.replicas("pi") == 2
    assert _annotations(world) == {}
    assert not any(_is_probe(p) for p in world.pods())


def test_a_kueue_managed_job_replaces_within_its_admission_and_never_probes_beyond_it() -> None:
    world = _world(**{c.LABEL_KUEUE_QUEUE_NAME: "team-a"})
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    seen: list[int] = []
    world.observer = lambda s, _a: seen.append(s.job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])
    run(world, 600)
    world.add_nodes("node-3")
    world.placement = ["node-3"]
    run(world, 60)
    assert set(seen) == {4}, "the admitted count rules"
    assert not any(_is_probe(p) for p in world.pods())
    assert _annotations(world) == {}
    assert len(world.kept_workers("pi")) == 4


def test_the_target_survives_a_lost_status_and_a_restart() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 5)
    # A new operator process reads only what the API holds; even status.regrow lost does not lose the target.
    world.job("pi")["status"].pop("regrow", None)
    world.add_nodes("node-3")
    world.placement = ["node-3"]
    run(world, 300)
    assert world.replicas("pi") == 4


def test_a_steady_job_at_its_target_costs_zero_writes() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.add_nodes("node-3")
    world.placement = ["node-1", "node-3"]
    run(world, 120)
    assert world.replicas("pi") == 4
    writes_before = len(world.applied)
    for _ in range(5):
        actions = world.reconcile("pi")
        assert not [a for a in actions if isinstance(a, Create | Patch | Delete)]
        world.advance(600)
    assert len(world.applied) == writes_before


def test_a_job_below_target_waiting_in_backoff_costs_zero_writes() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, TIMEOUT + 1)  # the first probes timed out: backing off
    assert world.job("pi")["status"]["regrow"]["reason"] == "Backoff"
    actions = world.reconcile("pi")
    assert not [a for a in actions if isinstance(a, Create | Patch | Delete)]


def test_backoff_is_capped_jittered_down_and_deterministic() -> None:
    config = RegrowPolicy.model_validate({"backoffSeconds": 10, "maxBackoffSeconds": 300})
    delays = [backoff_seconds(config, n, "uid-1") for n in range(1, 12)]
    assert delays == [backoff_seconds(config, n, "uid-1") for n in range(1, 12)]
    assert all(d <= 300 for d in delays)
    assert delays[0] >= 10 * (1 - JITTER)
    assert delays[-1] >= 300 * (1 - JITTER)
    assert backoff_seconds(config, 3, "uid-1") != backoff_seconds(config, 3, "uid-2")


def test_probe_deadlines_come_from_the_snapshot_clock_alone() -> None:
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 5)
    s = world.snapshot("pi")
    assert list(plan(s)) == list(plan(s)), "pure: the same snapshot, the same plan"
    [wait] = [a.seconds for a in plan(s) if isinstance(a, RequeueAfter)]
    probe = _waiting_probes(world)[0]
    made = parse_time(probe["metadata"]["creationTimestamp"])
    assert made is not None
    assert abs(wait - (TIMEOUT - (s.now - made).total_seconds())) < 1e-6


@st.composite
def _losses(draw: st.DrawFn) -> list[tuple[str, int]]:
    kinds = st.sampled_from(["taint", "remove", "evict", "delete", "disrupt", "capacity-off", "capacity-on", "wait"])
    return draw(st.lists(st.tuples(kinds, st.integers(0, 11)), max_size=10))


@PROFILE
@given(start=st.integers(2, 6), probes=st.integers(1, 3), steps=_losses())
def test_after_any_losses_and_capacity_changes_the_job_returns_to_its_target(
    start: int, probes: int, steps: list[tuple[str, int]]
) -> None:
    world = World(placement=["node-0", "node-1", "node-2"])
    world.add_nodes("node-0", "node-1", "node-2")
    regrow = {**REGROW, "maxProbes": probes}
    world.add(mpijob(workers=start, elastic_policy=elastic(1, 8, grace=0, regrow=regrow)))
    world.settle("pi")
    recorder = Recorder(world)
    fresh = 3
    for kind, arg in steps:
        workers = world.kept_workers("pi")
        healthy = sorted(n for n, obj in world.nodes.items() if not obj["spec"])
        if kind == "taint" and healthy:
            world.taint(healthy[arg % len(healthy)], SPOT_TAINT)
        elif kind == "remove" and world.nodes:
            world.remove_node(sorted(world.nodes)[arg % len(world.nodes)])
        elif kind in ("evict", "delete", "disrupt") and workers:
            victim = workers[arg % len(workers)]
            if kind == "evict":
                world.kubelet_evict(victim)
            elif kind == "delete":
                world.delete_pod(victim)
            else:
                world.disrupt(victim, DISRUPTIONS[arg % len(DISRUPTIONS)])
        elif kind == "capacity-off":
            world.placement = []
        elif kind == "capacity-on":
            world.add_nodes(f"node-{fresh}")
            fresh += 1
        if kind != "capacity-off":
            world.placement = sorted(n for n, obj in world.nodes.items() if not obj["spec"]) if world.placement else []
        run(world, arg * 20, recorder=recorder)
        assert recorder.max_waiting <= probes
    event(f"lowest replicas {min(3, world.replicas('pi'))}")
    # Capacity returns for good.
    world.add_nodes("node-new-a", "node-new-b")
    world.placement = sorted(n for n, obj in world.nodes.items() if not obj["spec"])
    run(world, 3 * (TIMEOUT + MAX_BACKOFF), recorder=recorder)

    assert world.replicas("pi") == start
    assert len(world.kept_workers("pi")) == start
    assert _annotations(world) == {}
    assert "regrow" not in world.job("pi")["status"]
    assert recorder.max_waiting <= probes
    for name, made in recorder.created.items():
        gone = recorder.deleted.get(name)
        if gone is not None:
            assert (gone - made).total_seconds() <= TIMEOUT


def test_workers_lost_to_disruptions_evictions_and_deletions_are_regrown_like_node_losses() -> None:
    world = _world()
    workers = world.kept_workers("pi")
    world.disrupt(workers[0], "EvictionByEvictionAPI")
    world.disrupt(workers[1], "TerminationByKubelet")
    world.shut_down(workers[1])
    world.delete_pod(workers[2])  # someone else deletes it
    run(world, 120)
    assert world.replicas("pi") == 4
    assert len(world.kept_workers("pi")) == 4
    assert not set(workers[:3]) & set(world.worker_names("pi"))
    assert _annotations(world) == {}
    assert world.job("pi")["status"].get("recentWorkerFailures") is None, "losses, not failures"


def test_the_return_to_the_target_is_announced_once_even_when_a_write_after_the_raise_meets_a_409() -> None:
    """Seen under load on the kwok testbed: the pass that raised replicas back to the target had its ConfigMap
    write meet a 409 (a stale cache) after the spec patch had landed; the Regrown Event went with the status
    write after it, so it was never posted, and the next plan (replicas already at the target) raises nothing."""
    world = _world()
    world.taint("node-2", SPOT_TAINT)
    world.placement = []
    run(world, 5)
    world.remove_node("node-2")
    world.add_nodes("node-3")
    world.placement = ["node-3"]

    def raises_to_target(actions: list[Action]) -> bool:
        spec = [a for a in actions if isinstance(a, Patch) and a.kind == "MPIJob" and a.subresource is None]
        return bool(spec) and spec[0].patch.get("spec", {}).get("mpiReplicaSpecs", {}).get("Worker") == {"replicas": 4}

    for _ in range(200):
        actions = plan(world.snapshot("pi"))
        if raises_to_target(actions):
            break
        busy = any(isinstance(a, Create | Patch | Delete) for a in actions)
        world.apply(actions)
        busy = world.bind_pending() or world.kubelet() or busy
        if not busy:
            world.advance(5)
    else:
        raise AssertionError("no plan raised replicas back to 4")
    later = [a for a in actions if isinstance(a, Patch) and a.kind == "ConfigMap" and a.resource_version]
    assert later, "the raise's pass writes the ConfigMap after the spec patch"
    world.objects[("ConfigMap", later[0].name)]["metadata"]["resourceVersion"] = world.next_rv()  # someone's write

    err = world.apply(actions)
    world.settle("pi")

    assert err is not None and err.code == 409
    assert world.replicas("pi") == 4
    assert [e.reason for e in world.events].count("Regrown") == 1
