"""Newcomers created together join the launcher's discovery in one change (planner/joining.py): Horovod 0.28.1
drops a host update that arrives while its ranks reset for the previous one, so two newcomers listed a second
apart could leave the job one short of its size."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.planner.actions import RequeueAfter
from mpijob.planner.joining import HOLD_SECONDS

from .builders import elastic, mpijob
from .world import World


def _world(workers: int = 2) -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=workers, elastic_policy=elastic(1, 8, grace=0)))
    world.settle("pi")
    return world


def _scale_out_bound_not_started(world: World, replicas: int) -> list[str]:
    """The user raises replicas; the operator creates the newcomers and the scheduler binds them (the World
    places at create), but no kubelet has started them yet. Returns their names."""
    before = set(world.worker_names("pi"))
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    world.reconcile("pi")
    new = sorted(set(world.worker_names("pi")) - before)
    assert new and all(world.pod(n)["spec"].get("nodeName") for n in new)
    return new


def _requeues(actions: list[object]) -> list[float]:
    return [a.seconds for a in actions if isinstance(a, RequeueAfter)]


def test_a_ready_newcomer_waits_for_its_bound_peer_and_both_join_in_one_change() -> None:
    world = _world()
    first, second = _scale_out_bound_not_started(world, 4)
    world.advance(1)
    world.run(first)
    actions = world.reconcile("pi")
    assert world.discovered("pi") == ["pi-worker-0", "pi-worker-1"], "held back while its peer starts"
    assert any(0 < s <= HOLD_SECONDS for s in _requeues(actions)), "requeued for the end of the hold"

    world.advance(1.5)
    world.run(second)
    world.reconcile("pi")
    assert sorted(world.discovered("pi")) == ["pi-worker-0", "pi-worker-1", first, second]


def test_a_peer_that_never_turns_ready_holds_a_newcomer_back_for_the_bound_only() -> None:
    world = _world()
    first, second = _scale_out_bound_not_started(world, 4)
    world.run(first)
    world.run(second, ready=False)  # Running, its sshd never answers its readiness probe
    world.reconcile("pi")
    assert first not in world.discovered("pi")

    world.advance(HOLD_SECONDS)
    world.reconcile("pi")
    assert first in world.discovered("pi")
    assert second not in world.discovered("pi")


def test_a_peer_with_no_node_holds_nothing_back() -> None:
    world = _world()
    world.placement = []  # no capacity: the newcomers stay unbound
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 4
    world.reconcile("pi")
    first, second = sorted(set(world.worker_names("pi")) - {"pi-worker-0", "pi-worker-1"})
    world.schedule(first, "node-1")
    world.run(first)
    world.reconcile("pi")
    assert first in world.discovered("pi")
    assert not world.pod(second)["spec"].get("nodeName")


def test_workers_created_apart_do_not_wait_for_each_other() -> None:
    world = _world()
    (first,) = _scale_out_bound_not_started(world, 3)
    world.advance(60)
    (second,) = _scale_out_bound_not_started(world, 4)
    world.run(first)
    world.reconcile("pi")
    assert first in world.discovered("pi"), "a replacement is not held back by a later, unrelated one"
    assert second not in world.discovered("pi")


def test_a_job_starting_lists_its_first_ready_workers_at_once() -> None:
    world = World(placement=["node-1"])
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 8, grace=0)))
    world.reconcile("pi")
    world.run("pi-worker-0")
    world.reconcile("pi")
    assert world.discovered("pi") == ["pi-worker-0"], "nothing listed yet: no change to batch, Horovod waits"


def test_a_listed_worker_is_never_taken_out_to_wait_for_a_newcomer() -> None:
    world = _world()
    first, _peer = _scale_out_bound_not_started(world, 4)
    world.run(first)
    world.advance(HOLD_SECONDS)
    world.reconcile("pi")
    assert first in world.discovered("pi")
    # A new round starts while `first` is listed: `first` stays listed whatever its peers do.
    (third,) = _scale_out_bound_not_started(world, 5)
    world.pod(third)["metadata"]["creationTimestamp"] = world.pod(first)["metadata"]["creationTimestamp"]
    world.reconcile("pi")
    assert first in world.discovered("pi")


@settings(max_examples=60, deadline=None)
@given(
    delays=st.lists(st.floats(min_value=0, max_value=3 * HOLD_SECONDS), min_size=2, max_size=4),
    never_ready=st.integers(min_value=0, max_value=4),
)
def test_newcomers_are_listed_at_most_the_bound_after_ready_and_nothing_listed_is_withdrawn(
    delays: list[float], never_ready: int
) -> None:
    """Any round of newcomers turning Ready at any times (one of them perhaps never): each is listed no later
    than HOLD_SECONDS after it turned Ready, and once listed stays listed."""
    world = _world()
    names = _scale_out_bound_not_started(world, 2 + len(delays))
    ready_at: dict[str, float] = {}
    listed_ever: set[str] = set()
    start = world.now.timestamp()
    schedule = sorted((d, n) for d, n in zip(delays, names, strict=True) if names.index(n) != never_ready)
    end = start + max(delays) + HOLD_SECONDS + 1
    while world.now.timestamp() < end:
        for d, n in schedule:
            if n not in ready_at and world.now.timestamp() >= start + d:
                world.run(n)
                ready_at[n] = world.now.timestamp()
        world.reconcile("pi")
        listed = set(world.discovered("pi"))
        assert listed_ever <= listed, "a listed worker was withdrawn"
        listed_ever |= listed
        for n, t in ready_at.items():
            assert n in listed or world.now.timestamp() - t < HOLD_SECONDS, (n, t, world.now)
        world.advance(0.5)
    assert set(ready_at) <= listed_ever
