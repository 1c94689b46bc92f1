"""Which worker leaves when an elastic job has one worker too many (no names listed).

Order: unscheduled / Pending first, then on a terminating node, not Ready, lower pod-deletion-cost, more
workers of the job on the same node, higher index.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mpijob.api import constants as c
from mpijob.planner.plan import plan
from mpijob.planner.ranking import deletion_cost, rank_victims
from mpijob.planner.snapshot import Obj

from .builders import (
    SPOT_TAINT,
    elastic,
    existing_children,
    mpijob,
    node,
    patches,
    running_status,
    snap,
    worker,
)

# Ignore: a worker on a terminating node is only *ranked* first here, not removed by the node reaction.
JOB = mpijob(workers=3, elastic_policy=elastic(1, 8, node_termination_policy="Ignore"), status=running_status())
NODES = {n: node(n) for n in ("node-a", "node-b", "node-c", "node-d")} | {"node-x": node("node-x", taints=[SPOT_TAINT])}


def _cost(value: str) -> dict[str, str]:
    return {c.ANNOTATION_DELETION_COST: value}


def _costed(i: int, cost: str) -> Callable[[], Obj]:
    return lambda: worker(JOB, i, node=_spread(i), annotations=_cost(cost))


def _spread(i: int) -> str:
    return ["node-a", "node-b", "node-c", "node-d"][i]


def _victim(pods: list[Obj]) -> str:
    actions = plan(snap(JOB, pods, node_map=NODES, **existing_children(JOB)))
    leaving = [p for p in patches(actions, "Pod")]
    assert len(leaving) == 1, [p.name for p in leaving]
    assert leaving[0].patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_REASON] == "scale-down"
    return leaving[0].name


def _base() -> list[Obj]:
    """Four equal workers, one per node: with nothing else to tell them apart, the highest index goes."""
    return [worker(JOB, i, node=_spread(i)) for i in range(4)]


def _with(changes: dict[int, Callable[[], Obj]]) -> list[Obj]:
    pods = _base()
    for i, make in changes.items():
        pods[i] = make()
    return pods


CRITERIA: dict[str, tuple[dict[int, Callable[[], Obj]], str]] = {
    "unscheduled": ({1: lambda: worker(JOB, 1, node=None, phase="Pending")}, "pi-worker-1"),
    "pending": ({1: lambda: worker(JOB, 1, node="node-b", phase="Pending")}, "pi-worker-1"),
    "unknown phase": ({1: lambda: worker(JOB, 1, node="node-b", phase="Unknown")}, "pi-worker-1"),
    "terminating node": ({1: lambda: worker(JOB, 1, node="node-x")}, "pi-worker-1"),
    "not ready": ({1: lambda: worker(JOB, 1, node="node-b", ready=False)}, "pi-worker-1"),
    "lower deletion cost": ({i: _costed(i, "-5" if i == 1 else "100") for i in range(4)}, "pi-worker-1"),
    "more workers on the node": ({1: lambda: worker(JOB, 1, node="node-a")}, "pi-worker-1"),
    "higher index": ({}, "pi-worker-3"),
}


@pytest.mark.parametrize("changes,expected", CRITERIA.values(), ids=CRITERIA.keys())
def test_each_criterion_picks_its_victim(changes: dict[int, Callable[[], Obj]], expected: str) -> None:
    assert _victim(_with(changes)) == expected


PRECEDENCE: dict[str, tuple[dict[int, Callable[[], Obj]], str]] = {
    "unscheduled before terminating node": (
        {0: lambda: worker(JOB, 0, node=None, phase="Pending"), 2: lambda: worker(JOB, 2, node="node-x")},
        "pi-worker-0",
    ),
    "pending before terminating node": (
        {0: lambda: worker(JOB, 0, node="node-a", phase="Pending"), 2: lambda: worker(JOB, 2, node="node-x")},
        "pi-worker-0",
    ),
    "terminating node before not ready": (
        {0: lambda: worker(JOB, 0, node="node-x"), 2: lambda: worker(JOB, 2, node="node-c", ready=False)},
        "pi-worker-0",
    ),
    "not ready before lower cost": (
        {
            0: lambda: worker(JOB, 0, node="node-a", ready=False, annotations=_cost("1000")),
            2: lambda: worker(JOB, 2, node="node-c", annotations=_cost("-1000")),
        },
        "pi-worker-0",
    ),
    "lower cost before crowded node": (
        {
            0: lambda: worker(JOB, 0, node="node-a", annotations=_cost("-1")),
            2: lambda: worker(JOB, 2, node="node-b"),
            3: lambda: worker(JOB, 3, node="node-b"),
        },
        "pi-worker-0",
    ),
    "crowded node before higher index": (
        {0: lambda: worker(JOB, 0, node="node-b")},
        "pi-worker-1",
    ),
}


@pytest.mark.parametrize("changes,expected", PRECEDENCE.values(), ids=PRECEDENCE.keys())
def test_earlier_criterion_wins_over_a_later_one(changes: dict[int, Callable[[], Obj]], expected: str) -> None:
    assert _victim(_with(changes)) == expected


def test_listed_workers_go_before_any_ranked_victim() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 8, workers_to_delete=["pi-worker-0"]), status=running_status())
    pods = [worker(job, 0), worker(job, 1, node=None, phase="Pending"), worker(job, 2), worker(job, 3)]

    actions = plan(snap(job, pods, **existing_children(job)))

    reasons = {p.name: p.patch["metadata"]["annotations"][c.ANNOTATION_LEAVING_REASON] for p in patches(actions, "Pod")}
    assert reasons == {"pi-worker-0": "workersToDelete", "pi-worker-1": "scale-down"}


def test_rank_victims_orders_a_mixed_set_fully() -> None:
    pods = [
        worker(JOB, 0, node="node-a"),
        worker(JOB, 1, node="node-a", annotations=_cost("-10")),
        worker(JOB, 2, node="node-b", ready=False),
        worker(JOB, 3, node="node-x"),
        worker(JOB, 4, node=None, phase="Pending"),
        worker(JOB, 5, node="node-c", phase="Pending"),
        worker(JOB, 6, node="node-d"),
        worker(JOB, 7, node="node-a"),
    ]

    ranked = rank_victims(
        pods,
        lambda p: int(p["metadata"]["name"].rsplit("-", 1)[1]),
        lambda n: n == "node-x",
    )

    assert [p["metadata"]["name"].rsplit("-", 1)[1] for p in ranked] == ["4", "5", "3", "2", "1", "7", "0", "6"]


@pytest.mark.parametrize(
    "value,cost",
    [(None, 0), ("5", 5), ("-3", -3), ("junk", 0), ("99999999999", 2**31 - 1), ("-99999999999", -(2**31))],
)
def test_deletion_cost_is_read_like_the_replicaset_controller(value: str | None, cost: int) -> None:
    pod = worker(JOB, 0, annotations=_cost(value) if value is not None else None)
    assert deletion_cost(pod) == cost
