"""The urgent-first plan (`plan(..., urgent_first=True)`, as the operator plans) is the whole plan cut
at its Defer: when workers leave discovery it holds exactly the whole plan's urgent writes and a Defer, and
nothing else; otherwise it is the whole plan. So the executor (which stops at a Defer) writes the same either
way, and the deferred pass plans the rest from fresh data, as it did before."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, given, settings

from mpijob.planner.actions import Defer
from mpijob.planner.plan import plan

from .builders import SPOT_TAINT, elastic, mpijob
from .perturbation import WORLD_ARGS, Step, answered, perturbed_world
from .world import World


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**WORLD_ARGS)
def test_the_urgent_first_plan_is_the_whole_plan_cut_at_its_defer(
    nodes: int, low: int, extra: int, policy: str, grace: int, steps: list[Step]
) -> None:
    world = perturbed_world(nodes, low, extra, policy, grace, steps)
    snapshot, whole = answered(world, world.snapshot("pi"))
    urgent = plan(snapshot, urgent_first=True)
    if whole.leave_discovery:
        event("workers leave discovery")
        # What the executor applies of the whole plan: its urgent writes, then (when more follows) a Defer.
        assert list(whole)[: len(whole.leave_discovery)] == list(whole.leave_discovery)
        assert list(urgent) == [*whole.leave_discovery, Defer()]
    else:
        event("nobody leaves discovery")
        assert list(urgent) == list(whole)


def test_a_spot_taint_plans_only_the_discovery_write_then_defers() -> None:
    world = World()
    world.add_nodes("node-0", "node-1")
    world.placement = ["node-0", "node-1"]
    world.add(mpijob(workers=4, elastic_policy=elastic(1, 4)))
    world.settle("pi")
    world.taint("node-0", SPOT_TAINT)
    world.placement = ["node-1"]
    snapshot, whole = answered(world, world.snapshot("pi"))
    urgent = plan(snapshot, urgent_first=True)
    assert whole.leave_discovery and whole.record and whole.mark and whole.status
    assert urgent.leave_discovery == whole.leave_discovery
    assert not (urgent.record or urgent.mark or urgent.status or urgent.delete or urgent.create)
    assert list(urgent) == [*whole.leave_discovery, Defer()]
    # The deferred pass plans the rest: the same world reaches the same fixed point either way.
    world.urgent_first = True
    other = copy.deepcopy(world)
    other.urgent_first = False
    world.settle("pi")
    other.settle("pi")
    assert world.discovered("pi") == other.discovered("pi")
    assert world.workers_to_delete("pi") == other.workers_to_delete("pi")
    assert sorted(world.worker_names("pi")) == sorted(other.worker_names("pi"))
