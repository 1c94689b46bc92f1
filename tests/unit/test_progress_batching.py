"""Pods that start together cost one discovery write and one status write (issue 20, item 3): a pod event that
only moves a pod forward (bound, Running, an IP, Ready) queues its job a moment later, so its siblings' events
are read by the same reconcile; any other pod event queues the job at once. The end state is the same."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mpijob.api import constants as c
from mpijob.executor.apply import Executor
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller
from mpijob.runtime.kinds import BY_KIND

from .builders import NS, elastic, mpijob, worker
from .fakes import RecordingClient
from .world import World, start_workers_one_by_one

PODS = BY_KIND["Pod"]
Obj = dict[str, Any]


def _queued_now_and_later(controller: Controller, *events: Obj, wait: float = 0.1) -> tuple[int, int]:
    """Keys in the queue right after `events` (MODIFIED pods), and after `wait` seconds."""

    async def run() -> tuple[int, int]:
        for pod in events:
            controller.observed(PODS, "MODIFIED", PODS.slim(pod))
        now = len(controller.queue)
        await asyncio.sleep(wait)
        return now, len(controller.queue)

    return asyncio.run(run())


def _controller(batch: float = 0.05) -> tuple[Controller, Obj]:
    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    controller.cache.ready = True
    controller.progress_batch = batch
    job = mpijob(workers=2)
    pending = worker(job, 0, phase="Pending", node=None, rv="11")
    controller.observed(PODS, "ADDED", PODS.slim(pending))
    assert len(controller.queue) == 1  # a new pod is news: at once
    asyncio.run(_drain(controller))
    return controller, pending


async def _drain(controller: Controller) -> None:
    while len(controller.queue):
        key, _ = await controller.queue.get()
        controller.queue.done(key)


def _running(pod: Obj, rv: str) -> Obj:
    made = copy.deepcopy(pod)
    made["metadata"]["resourceVersion"] = rv
    made["spec"]["nodeName"] = "node-1"
    made["status"] = {
        "phase": "Running",
        "podIP": "10.0.0.7",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return made


def test_a_pod_that_starts_queues_its_job_after_the_batch_period_not_at_once() -> None:
    controller, pending = _controller()
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "node-1"
    bound["metadata"]["resourceVersion"] = "12"

    assert _queued_now_and_later(controller, bound, _running(bound, "13")) == (0, 1)


def test_pod_changes_that_are_not_progress_queue_the_job_at_once() -> None:
    controller, pending = _controller()
    disrupted = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    edits: list[tuple[str, str, Any]] = [
        ("metadata", "deletionTimestamp", "2026-03-01T12:00:00Z"),
        ("status", "phase", "Failed"),
        ("status", "conditions", [{"type": "Ready", "status": "False"}]),
        ("status", "conditions", [{"type": "Ready", "status": "True"}, disrupted]),
        ("metadata", "annotations", {c.ANNOTATION_LEAVING_SINCE: "2026-03-01T12:00:00Z"}),
        ("spec", "nodeName", "node-2"),
        ("status", "podIP", "10.0.0.8"),
    ]

    async def run() -> list[int]:
        queued = []
        for rv, (where, field, value) in enumerate(edits):
            start = _running(pending, str(100 + 2 * rv))
            controller.observed(PODS, "MODIFIED", PODS.slim(start))  # the starting point: Running and Ready
            await asyncio.sleep(0.1)
            await _drain(controller)
            pod = copy.deepcopy(start)
            pod["metadata"]["resourceVersion"] = str(101 + 2 * rv)
            pod[where][field] = value
            controller.observed(PODS, "MODIFIED", PODS.slim(pod))
            queued.append(len(controller.queue))
            await _drain(controller)
        return queued

    assert asyncio.run(run()) == [1] * len(edits)


async def _drain_after(controller: Controller, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await _drain(controller)


def test_progress_of_a_job_already_queued_adds_no_later_pass() -> None:
    controller, pending = _controller()
    controller.queue.add((NS, "pi"))

    assert _queued_now_and_later(controller, _running(pending, "12")) == (1, 1)
    asyncio.run(_drain_after(controller, 0.1))
    assert len(controller.queue) == 0


def test_a_pass_queued_by_other_news_reads_the_progress_too_and_no_later_pass_follows() -> None:
    controller, pending = _controller()

    async def run() -> tuple[int, int]:
        controller.observed(PODS, "MODIFIED", PODS.slim(_running(pending, "12")))  # progress: a timer
        controller.queue.add((NS, "pi"))  # news of another kind: at once
        key, _ = await controller.queue.get()  # this pass reads the cache, the progress included
        controller.queue.done(key)
        await asyncio.sleep(0.1)
        return len(controller.queue), controller.queue.queued()

    assert asyncio.run(run()) == (0, 0)


# -- the write count, with the real controller, executor and planner over the World -----------------------


def _what_the_user_sees(world: World) -> tuple[Any, ...]:
    status = dict(world.job("pi")["status"])
    status.pop("sshSecretUID", None)  # a uid: differs between two worlds
    launcher = next(p for p in world.pods() if p["metadata"]["name"].startswith(c.launcher_name("pi")))
    return (
        status,
        world.config_data("pi"),
        world.worker_names("pi"),
        launcher["metadata"].get("annotations"),
        sorted((e.type, e.reason) for e in world.events),
    )


@pytest.mark.parametrize(
    "job",
    [mpijob(workers=8), mpijob(workers=8, elastic_policy=elastic(2, 8))],
    ids=["static", "elastic"],
)
def test_workers_starting_together_cost_one_discovery_and_one_status_write_and_end_the_same(job: Obj) -> None:
    one_by_one, unbatched = start_workers_one_by_one(copy.deepcopy(job), batch=0)
    together, batched = start_workers_one_by_one(copy.deepcopy(job), batch=0.3)

    elastic_job = job["spec"].get("elasticPolicy") is not None
    creates = 16 if elastic_job else 12  # elastic: + PDB, ServiceAccount, Role, RoleBinding
    # Batched: the first status write (the Secret's uid in it), the discovery ConfigMap and the status once
    # for the 8 workers, the status once for the launcher (elastic: and its discovery annotation). One by one,
    # each worker's start wrote the status (and, static, the ConfigMap's list) again.
    assert together == creates + (5 if elastic_job else 4)
    assert one_by_one >= together + 7
    assert _what_the_user_sees(batched) == _what_the_user_sees(unbatched)
