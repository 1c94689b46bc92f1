"""Objects nothing waits for (the PodDisruptionBudget, the discovery Role and RoleBinding) are created after a
new elastic job's pods and launcher, in a pass of their own queued behind every other job's ordinary work:
under a shared QPS budget they no longer delay another job's pods (docs/design.md, "The order of work")."""

from __future__ import annotations

import asyncio

from mpijob.api import constants as c
from mpijob.executor.apply import Executor, Outcome
from mpijob.planner.actions import Create, Defer, Plan
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller
from mpijob.runtime.workqueue import LOW, NORMAL

from .builders import creates, elastic, existing_children, mpijob, snap, status_of, worker, writes
from .fakes import RecordingClient
from .world import World

SETTLE_KINDS = ["PodDisruptionBudget", "Role", "RoleBinding"]


def _kinds(actions: object) -> list[str]:
    return [a.obj["kind"] for a in actions if isinstance(a, Create)]  # type: ignore[attr-defined]


def test_a_new_elastic_jobs_pods_launcher_and_account_come_before_its_budget_and_discovery_grant() -> None:
    job = mpijob(workers=4, elastic_policy=elastic(2, 4))

    actions = plan(snap(job))

    [cut] = [i for i, a in enumerate(actions) if isinstance(a, Defer)]
    assert actions[cut] == Defer(settle=True)
    before, after = _kinds(actions[:cut]), _kinds(actions[cut + 1 :])
    assert after == SETTLE_KINDS
    # The launcher runs as its ServiceAccount: that one is created before it, in the first pass.
    assert before.index("ServiceAccount") < before.index("Job")
    assert before.count("Pod") == 4 and not set(SETTLE_KINDS) & set(before)


def test_a_settled_job_whose_budget_and_grant_are_gone_gets_them_back_in_one_pass_without_a_cut() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 2)))
    world.settle("pi")
    name = c.discovery_rbac_name("pi")
    for kind, obj in (("PodDisruptionBudget", c.pdb_name("pi")), ("Role", name), ("RoleBinding", name)):
        assert world.get(kind, obj) is not None, f"{kind} created once the job settled"
        world.objects.pop((kind, obj))

    actions = world.reconcile("pi")

    assert not any(isinstance(a, Defer) for a in actions)
    assert [w.obj["kind"] for w in writes(actions) if isinstance(w, Create)] == SETTLE_KINDS
    assert creates(actions, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1


def test_a_pass_that_creates_no_pod_writes_the_budget_and_grant_before_the_status_that_says_running() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 2))
    kids = existing_children(job)
    kids.update(pdb_obj=None, role_obj=None, role_binding_obj=None)

    actions = plan(snap(job, [worker(job, i) for i in range(2)], **kids))

    assert not any(isinstance(a, Defer) for a in actions)
    kinds = [a.obj["kind"] if isinstance(a, Create) else a.kind for a in writes(actions)]  # type: ignore[union-attr]
    status = next(i for i, a in enumerate(writes(actions)) if _running(a))
    assert all(kinds.index(kind) < status for kind in SETTLE_KINDS)


def _running(action: object) -> bool:
    status = status_of([action]) or {}  # type: ignore[list-item]
    return any(x["type"] == "Running" and x["status"] == "True" for x in status.get("conditions") or [])


def test_a_plain_job_has_nothing_to_settle() -> None:
    actions = plan(snap(mpijob(workers=2)))

    assert not any(isinstance(a, Defer) for a in actions)


def test_the_executor_stops_before_the_settle_creates_and_says_so() -> None:
    client = RecordingClient()
    job = {"metadata": {"name": "pi", "namespace": "team-a", "uid": "u", "resourceVersion": "1"}}
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pi-workers"}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pi-launcher"}}
    actions = Plan(children=(Create(account),), settle=(Create(budget),))

    outcome = asyncio.run(Executor(client, post_events=True).apply(job, actions))  # type: ignore[arg-type]

    assert client.writes == [("POST", "/api/v1/namespaces/team-a/serviceaccounts")]
    assert outcome.deferred and outcome.settled_later


def test_the_settle_pass_is_queued_below_every_ordinary_pass() -> None:
    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    key = ("team-a", "pi")
    later = controller._next_look(key, Outcome(deferred=True, settled_later=True), Plan(), NORMAL)
    urgent = controller._next_look(key, Outcome(deferred=True), Plan(), NORMAL)

    assert (later.requeue_after, later.priority) == (0.0, LOW)
    assert urgent.priority == NORMAL
