"""The runtime refuses to spin (runtime/spin.py): a job whose passes repeat the same writes at the same
resourceVersion, each landing without changing what the next plan reads, is held back with backoff, says so
once (a Warning Event and the ReconcileStalled condition, naming the write) and shows in the metrics; a job
making progress is never held back, and a steady one costs nothing."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mpijob.api import constants as c
from mpijob.app.metrics import Metrics
from mpijob.executor.apply import Executor, Outcome
from mpijob.planner.actions import Defer, Patch, Plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import slim
from mpijob.runtime.controller import Controller
from mpijob.runtime.kinds import BY_KIND
from mpijob.runtime.record import JobRecord
from mpijob.runtime.spin import SPIN_THRESHOLD, SpinGuard
from mpijob.runtime.workqueue import DISCOVERY, LOW, NORMAL, SIGNAL

from .builders import elastic, mpijob
from .fakes import RecordingClient
from .handover import Handover, handed_over, operate
from .world import inform, start_workers_one_by_one

Obj = dict[str, Any]


def _blind_to_config_map_data(h: Handover) -> None:
    """A cache that keeps no ConfigMap contents (what slim.py did to the reference operator's ConfigMap
    before issue 30's fix): every plan wants to write the data, and the write changes nothing on the server."""
    w = h.controller.by_kind["ConfigMap"]
    h.controller.by_kind["ConfigMap"] = replace(w, slim=lambda body: {"metadata": slim._meta(body)})
    h.controller._seen = {}  # type: ignore[attr-defined]  # every object delivered again, slimmed so
    inform(h.controller, h.world)


def _spinning() -> tuple[Handover, Metrics]:
    h = handed_over()
    _blind_to_config_map_data(h)
    metrics = Metrics(CollectorRegistry())
    metrics.attach(h.controller)
    return h, metrics


def _stalled_condition(h: Handover) -> Obj | None:
    conditions = h.world.job("pi")["status"]["conditions"]
    return next((x for x in conditions if x["type"] == "ReconcileStalled"), None)


def test_a_job_repeating_the_same_write_without_effect_is_held_back_with_backoff() -> None:
    h, _ = _spinning()
    operate(h, 1.5, start=True)
    # Unguarded, this loop made ~5,000 passes in 1.5 s (test_handover_reference.py on the old cache).
    # Held after 5 passes, then retried at 0.05, 0.1, 0.2, 0.4, 0.8 s (the work queue's backoff).
    assert h.reconciles <= 12, h.reconciles
    assert h.controller.stats.errors == 0, "held back is not a failure"
    config_map_writes = [w for w in h.api.written if w[1] == "ConfigMap"]
    assert len(config_map_writes) == h.reconciles


def test_a_held_back_job_gets_one_warning_and_a_condition_naming_the_write() -> None:
    h, _ = _spinning()
    operate(h, 1.5, start=True)
    warnings = [e for e in h.world.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["ReconcileStalled"]
    assert "Patch ConfigMap pi-config" in warnings[0].message
    cond = _stalled_condition(h)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "SameWritesRepeated"
    assert cond["message"] == warnings[0].message


def test_a_held_back_job_is_counted_in_the_metrics() -> None:
    h, metrics = _spinning()
    assert metrics.registry.get_sample_value("mpijob_reconcile_spins_total") == 0
    operate(h, 1.0, start=True)
    assert metrics.registry.get_sample_value("mpijob_reconcile_spins_total") == 1
    assert metrics.registry.get_sample_value("mpijob_jobs_held_back") == 1


def test_a_held_back_job_resumes_and_clears_its_condition_once_its_writes_take_effect() -> None:
    h, metrics = _spinning()
    operate(h, 1.0, start=True)
    assert h.controller.spin.held(h.controller.records.get(("team-a", "pi"))) is not None
    # The cache shows the ConfigMap's data again (a relist with a fixed cache): the plan changes.
    w = h.controller.by_kind["ConfigMap"]
    h.controller.by_kind["ConfigMap"] = replace(w, slim=lambda body: slim.owned_object(body, "ConfigMap"))
    cm = copy.deepcopy(h.world.get("ConfigMap", c.config_map_name("pi")))
    assert cm is not None
    h.controller.observed(h.controller.by_kind["ConfigMap"], "MODIFIED", h.controller.by_kind["ConfigMap"].slim(cm))
    assert operate(h, 2.0), "quiet again"
    cond = _stalled_condition(h)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Progressing")
    assert metrics.registry.get_sample_value("mpijob_jobs_held_back") == 0
    before = (h.reconciles, h.api.writes)
    assert operate(h, 0.5)
    assert (h.reconciles, h.api.writes) == before


def test_jobs_making_progress_are_never_held_back() -> None:
    """New jobs whose workers start one by one (a pass per start), and adopted ones."""
    for job in (mpijob(workers=8), mpijob(workers=8, elastic_policy=elastic(2, 8))):
        _, world = start_workers_one_by_one(copy.deepcopy(job), batch=0)
        assert not [e for e in world.events if e.reason == "ReconcileStalled"]
    h = handed_over(("pi", "lm"))
    assert operate(h, start=True)
    assert h.controller.spin.spins == 0


def _patch(data: str) -> Patch:
    return Patch("v1", "ConfigMap", "pi-config", {"data": {"hostfile": data}}, resource_version="7")


def test_the_guard_holds_only_the_same_writes_at_the_same_job_version_repeated() -> None:
    assert SPIN_THRESHOLD == 5
    guard, record = SpinGuard(), JobRecord()
    for _ in range(SPIN_THRESHOLD - 1):
        assert guard.observe(record, "10", [_patch("a"), Defer()]) is None
    assert guard.held(record) is None
    # Another write, or a newer job, starts the count again.
    assert guard.observe(record, "10", [_patch("b")]) is None
    for rv in range(11, 11 + 2 * SPIN_THRESHOLD):
        assert guard.observe(record, str(rv), [_patch("b")]) is None
    for _ in range(SPIN_THRESHOLD - 1):
        guard.observe(record, "99", [_patch("b")])
    message = guard.observe(record, "99", [replace(_patch("b"), resource_version="8")])
    assert message is not None and "Patch ConfigMap pi-config" in message, "preconditions aside"
    assert guard.observe(record, "99", [_patch("b")]) is None, "said once per hold"
    assert guard.held(record) == message
    # A pass that plans no write ends the hold.
    assert guard.observe(record, "99", []) is None and guard.held(record) is None
    assert guard.spins == 1


# -- the pass that ends a hold: its own requeue keeps its priority (runtime/controller.py) -------------------


def _held_controller() -> tuple[Controller, tuple[str, str]]:
    """A controller whose one cached job is held back (the same ConfigMap write, SPIN_THRESHOLD times)."""
    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    controller.cache.ready = True
    job = mpijob(workers=2)
    job["metadata"]["resourceVersion"] = "10"
    controller.observed(BY_KIND["MPIJob"], "ADDED", BY_KIND["MPIJob"].slim(job))
    key = (job["metadata"]["namespace"], job["metadata"]["name"])
    for _ in range(SPIN_THRESHOLD):
        controller.spin.observe(controller.records.of(key), "10", [_patch("a")])
    assert controller.spin.held(controller.records.get(key)) is not None
    return controller, key


@pytest.mark.parametrize(
    "outcome,priority,expected",
    [
        # A node signal's pass writes discovery and defers, with launcher nudges still to go: DISCOVERY.
        (Outcome(deferred=True, applied=1), SIGNAL, DISCOVERY),
        # A 409 keeps the pass's own priority.
        (Outcome(conflict="409 Conflict"), SIGNAL, SIGNAL),
        # Nothing else to do: one prompt pass clears the ReconcileStalled condition.
        (Outcome(applied=1), SIGNAL, NORMAL),
        (Outcome(applied=1, requeue_after=30.0), LOW, NORMAL),
    ],
)
def test_a_pass_that_ends_a_hold_asks_for_a_prompt_pass_without_lowering_its_own_requeue(
    outcome: Outcome, priority: int, expected: int
) -> None:
    """The hold's end asks for one prompt pass (NORMAL) to clear the condition, merged with the pass's own
    requeue as the queue merges two adds (the higher priority, the earlier time). The first version returned
    the prompt pass instead: a signalled job's rest with nudges to go, or its 409 retry, fell to NORMAL,
    behind every ordinary pass (docs/design.md, "The order of work", rule 3)."""
    controller, key = _held_controller()
    plan = Plan(leave_discovery=(_patch("b"),), urgent_rest=True, partial=True)

    async def plan_and_apply(job: Obj, held: str | None = None) -> tuple[Outcome, Plan]:
        assert held is not None, "planned as held back"
        return outcome, plan

    controller._plan_and_apply = plan_and_apply  # type: ignore[method-assign]
    result = asyncio.run(controller.reconcile(key, priority))
    assert controller.spin.held(controller.records.get(key)) is None, "the hold ended"
    controller.queue.take_pending()  # what the job's own events queued
    controller.queue.add(key, LOW, 60.0)  # an event meanwhile, merged too
    controller._requeue(key, result)
    # One entry, due now (the prompt pass), at the higher of the two priorities asked.
    assert controller.queue.get_nowait() == (key, expected)
