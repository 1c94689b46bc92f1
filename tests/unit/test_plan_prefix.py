"""The plan's order is safe at every prefix: a reconcile that stops after any of its actions (a crash, a 409, a
lost lease) leaves a state from which the next plans reach the same decisions as the uninterrupted run, and
never delete a pod that run would have kept.

Each example perturbs a running elastic job (node signals, evictions, deletions, scale edits), makes one plan,
applies only its first k actions with the real executor, then reconciles to a fixed point (no kubelet, no
clock change) and compares with the world that applied the whole plan.

How many are kept is compared too: the replacement backoff counts a failure when the worker starts leaving, from
durable state (elastic.new_failures), so an interrupted plan creates its replacements no earlier.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from .perturbation import WORLD_ARGS, Step, answered, perturbed_world
from .world import World, is_terminating


def _uids(world: World) -> dict[str, str]:
    return {p["metadata"]["uid"]: p["metadata"]["name"] for p in world.workers("pi") if not is_terminating(p)}


def _outcome(world: World, before: dict[str, str]) -> dict[str, object]:
    """What the decisions amount to: who is deleted (by uid: a new pod may take a deleted one's name), who is
    kept, what the spec, discovery and the backoff count say."""
    present = _uids(world)
    return {
        "deleted": sorted(name for uid, name in before.items() if uid not in present),
        "replicas": world.replicas("pi"),
        "workersToDelete": world.workers_to_delete("pi"),
        "discovered": sorted(world.discovered("pi")),
        # How many, not which: a replacement created after its predecessor is gone may reuse its index.
        "kept": len(world.kept_workers("pi")),
        "recentWorkerFailures": world.job("pi")["status"].get("recentWorkerFailures"),
    }


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**WORLD_ARGS, cut=st.floats(0, 1))
def test_any_prefix_of_a_plan_is_repaired_by_the_next_plans_without_a_wrong_deletion(
    nodes: int, low: int, extra: int, policy: str, grace: int, steps: list[Step], cut: float
) -> None:
    world = perturbed_world(nodes, low, extra, policy, grace, steps)

    _, made = answered(world, world.snapshot("pi"))
    actions = list(made)
    assume(made.writes())
    k = int(cut * len(actions))
    event(f"phase cut: {next((name for name, phase in made.phases() if actions[k:] and actions[k] in phase), 'end')}")
    before = _uids(world)
    whole, interrupted = world, copy.deepcopy(world)
    whole.apply(actions, whole.job("pi"))
    interrupted.apply(actions[:k], interrupted.job("pi"))
    for repaired in (whole, interrupted):
        # The pods this plan deleted go away before the next reconcile (the worst case for a decision that
        # is not recorded yet).
        repaired.finish_deletions([n for n in before.values() if is_terminating(repaired.pod(n))])
        repaired.settle("pi", kubelet=False, follow_requeue=False, max_rounds=20)

    expected, got = _outcome(whole, before), _outcome(interrupted, before)
    assert set(got["deleted"]) <= set(expected["deleted"]), f"wrong deletion after {k} of {actions}"  # type: ignore[call-overload]
    assert got == expected, f"after {k} of {len(actions)} actions"
