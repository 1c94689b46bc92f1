"""Issue 8, rules 4 and 6: bounded work, and our keys are ours.

- The operator's annotations (`mpijob.kubeflow.org/*`) in user templates are stripped: a template cannot
  make every worker be born "leaving" (and deleted at once).
- Timestamps and numbers read back from the API are parsed strictly: a bad one is ignored (and corrected
  where it is ours), never a crash loop.
- Creates per reconcile start small and grow (slow start); a long list of bad names is one Event; a mass
  failure costs work linear in the workers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mpijob.api import constants as c
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import parse_time
from mpijob.planner.worker_writes import SLOW_START_CREATES, create_budget

from .builders import (
    created_names,
    creates,
    elastic,
    emits,
    existing_children,
    mpijob,
    patched_pods,
    running_status,
    snap,
    spec_patches,
    status_of,
    template,
    worker,
)
from .world import World

OURS = {c.ANNOTATION_LEAVING_SINCE: "2020-01-01T00:00:00Z", c.ANNOTATION_LEAVING_REASON: "x", "team": "a"}


def test_our_annotations_in_the_worker_template_are_stripped() -> None:
    tmpl = template()
    tmpl["metadata"] = {"annotations": dict(OURS)}
    job = mpijob(worker={"replicas": 2, "template": tmpl}, elastic_policy=elastic(1, 4))

    pods = creates(plan(snap(job)), "Pod")

    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["annotations"] == {"team": "a"}


def test_our_annotations_in_the_launcher_template_are_stripped() -> None:
    tmpl = template()
    tmpl["metadata"] = {"annotations": dict(OURS)}
    job = mpijob(launcher={"replicas": 1, "template": tmpl})

    [launcher] = creates(plan(snap(job)), "Job")

    assert launcher["spec"]["template"]["metadata"]["annotations"] == {"team": "a"}


def test_workers_from_a_template_with_leaving_since_stay() -> None:
    world = World()
    world.add_nodes("node-1")
    tmpl = template()
    tmpl["metadata"] = {"annotations": {c.ANNOTATION_LEAVING_SINCE: "2020-01-01T00:00:00Z"}}
    world.add(mpijob(worker={"replicas": 3, "template": tmpl}, elastic_policy=elastic(1, 4, grace=0)))

    world.settle("pi")

    assert len(world.kept_workers("pi")) == 3
    assert not [a for plan_ in world.plans for a in plan_ if a.__class__.__name__ == "Delete"]


@pytest.mark.parametrize(
    "since",
    [
        "2026-03-01T11:00:00",  # no timezone
        "9999-12-31T23:59:59Z",  # adding the grace period would overflow
        "0001-01-01T00:00:00Z",
        "2100-01-01T00:00:00Z",  # in the future
        "yesterday",
        "",
        "2026-13-45T99:00:00Z",
    ],
)
def test_bad_leaving_since_is_remarked_and_the_worker_goes_after_the_grace_period(since: str) -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, grace=30)))
    world.settle("pi")
    world.job("pi")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    world.settle("pi", follow_requeue=False)
    [gone] = [n for n in world.worker_names("pi") if n not in world.kept_workers("pi")]
    world.pod(gone)["metadata"]["annotations"][c.ANNOTATION_LEAVING_SINCE] = since

    world.reconcile("pi")  # never a crash; the worker is marked again with a good time
    assert parse_time(world.pod(gone)["metadata"]["annotations"][c.ANNOTATION_LEAVING_SINCE]) == world.now
    world.reconcile("pi")
    assert not world.pod(gone)["metadata"].get("deletionTimestamp")  # not at once

    world.advance(31)
    world.reconcile("pi")
    assert world.pod(gone)["metadata"].get("deletionTimestamp")  # and not never


@pytest.mark.parametrize("value", ["abc", 10**15, -5, True, 3.5, {"a": 1}])
def test_bad_last_worker_index_is_ignored_and_corrected(value: object) -> None:
    status = running_status()
    status["lastWorkerIndex"] = value
    job = mpijob(workers=3, elastic_policy=elastic(1, 4, index_policy="Append"), status=status)
    pods = [worker(job, 0), worker(job, 4)]

    actions = plan(snap(job, pods, **existing_children(job)))

    assert created_names(actions, "Pod") == ["pi-worker-5"]
    written = status_of(actions)
    assert written is not None and written["lastWorkerIndex"] == 5


@pytest.mark.parametrize("junk", ["pi-worker-\u00b2", "pi-worker-\u0663"])
def test_a_worker_name_with_non_ascii_digits_in_the_status_is_not_a_worker(junk: str) -> None:
    # "²" made the plan raise at every reconcile; "٣" read as index 3, so a live read was asked for (and,
    # once it answered "no such pod", the name counted as a lost worker). Nothing has been read live here.
    status = running_status()
    status["discoveredHosts"] = ["pi-worker-0", "pi-worker-1", junk]
    job = mpijob(workers=2, elastic_policy=elastic(1, 4), status=status)

    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], checks={}, **existing_children(job)))

    assert not actions.confirm and not spec_patches(actions) and not actions.delete


def test_a_thousand_bad_names_are_one_event() -> None:
    names = [f"nope-{i}" for i in range(1000)]
    job = mpijob(workers=2, elastic_policy=elastic(1, 4, workers_to_delete=names), status=running_status())

    actions = plan(snap(job, [worker(job, 0), worker(job, 1)], **existing_children(job)))

    [warning] = emits(actions, "Warning", "InvalidWorkerToDelete")
    assert "spec.elasticPolicy.workersToDelete" in warning.message and "990 more" in warning.message
    assert len(warning.message) < 1024


def test_creates_per_reconcile_start_small_and_grow() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=300))

    world.settle("pi", max_rounds=30)

    per_plan = [len(created_names(p, "Pod")) for p in world.plans]
    assert per_plan[0] == SLOW_START_CREATES
    assert max(per_plan) <= create_budget(300)
    assert len(world.worker_names("pi")) == 300
    # It grows: each batch is allowed about twice what exists.
    batches = [n for n in per_plan if n]
    assert batches[:3] == [16, 32, 96]


class _CountedPod(dict[str, object]):
    """A pod that counts how often it is compared whole with another."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _CountedPod.comparisons += 1
        return dict.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]


def test_a_mass_failure_is_planned_without_comparing_pods_pairwise() -> None:
    # Comparing each worker with a list of the others made a mass failure quadratic: 10,000 failed workers
    # blocked the event loop ~13 s (bench/plan_worst_case.py), longer than the Lease's renew deadline.
    n = 200
    job = mpijob(workers=n, elastic_policy=elastic(1, n), status=running_status())
    pods = [_CountedPod(worker(job, i, node=f"node-{i % 5}", phase="Failed")) for i in range(n)]
    _CountedPod.comparisons = 0

    actions = plan(snap(job, pods, **existing_children(job)))

    assert len(actions.delete) == n  # every failed worker leaves and goes, as before
    assert _CountedPod.comparisons < n


class _LookupBudget(dict[str, object]):
    """The namespace's pods by name, failing the test (instead of hanging it) past a number of lookups."""

    def __init__(self, pods: dict[str, object], budget: int) -> None:
        super().__init__(pods)
        self.left = budget

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.left -= 1
        assert self.left >= 0, "unbounded scan of worker names"
        return super().get(key, default)


def test_a_worker_of_ours_with_a_huge_index_does_not_make_the_plan_scan_to_it() -> None:
    # A pod the job owns (ownerReference, worker label) named by hand "<job>-worker-1000000000000": the scan
    # for foreign names used to run up to its index, blocking the event loop for hours.
    job = mpijob(workers=2, elastic_policy=elastic(1, 4), status=running_status())
    pods = [worker(job, 0), worker(job, 1), worker(job, 10**12)]
    snapshot = snap(job, pods, **existing_children(job))
    snapshot = replace(snapshot, pods_by_name=_LookupBudget(dict(snapshot.pods_by_name), 1_000_000))

    actions = plan(snapshot)

    # One worker too many: the one with the highest index leaves (ranking), nothing is created.
    assert patched_pods(actions) == [c.worker_name("pi", 10**12)]
    assert not creates(actions, "Pod")
