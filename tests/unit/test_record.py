"""What the runtime remembers of a job is one record (runtime/record.py): made on first sight, dropped in one
call when the job is gone, and shared with nothing (the executor reports into the record it is given)."""

from __future__ import annotations

import asyncio
import copy
import time

from prometheus_client import CollectorRegistry

from mpijob.app.metrics import Metrics
from mpijob.executor.apply import Executor
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller, Result
from mpijob.runtime.kinds import BY_KIND
from mpijob.runtime.record import JobRecord, Leaving
from mpijob.runtime.workqueue import NORMAL

from .builders import mpijob
from .fakes import RecordingClient


def _controller() -> tuple[Controller, dict[str, object], tuple[str, str]]:
    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    controller.cache.ready = True
    job = BY_KIND["MPIJob"].slim(mpijob(workers=2))
    job["metadata"]["resourceVersion"] = "10"
    return controller, job, (job["metadata"]["namespace"], job["metadata"]["name"])


def _remembering(record: JobRecord) -> None:
    """Something in every part of the record."""
    record.job_rv, record.config_map_rv, record.job_writing = 12, 7, 1
    record.pods = ({"pi-worker-0"}, 1e12)
    record.deleted = ({"pi-worker-1": "u1"}, 1e12)
    record.created = {("Secret", "pi-ssh"): "u2"}
    record.carried_checks = {("Pod", "pi-worker-2"): True}
    record.failures = 3
    record.stamps.discovery = 1.0
    record.stamps.leaving["pi-worker-1"] = Leaving("scale-down", 0.5)


def test_a_job_is_remembered_from_its_first_sight_and_forgotten_whole_when_deleted() -> None:
    controller, job, key = _controller()
    metrics = Metrics(CollectorRegistry())
    metrics.register(controller, OperatorConfig())
    controller.observed(BY_KIND["MPIJob"], "ADDED", job)
    record = controller.records.get(key)
    assert record is not None and record.stamps.generation is not None, "the metrics' stamp is in the record"
    _remembering(record)
    assert controller.records.of(key) is record
    controller.observed(BY_KIND["MPIJob"], "DELETED", job)
    assert key not in controller.records and len(controller.records) == 0


def test_a_pass_that_finds_its_job_gone_forgets_it() -> None:
    controller, _, key = _controller()
    _remembering(controller.records.of(key))
    assert asyncio.run(controller.reconcile(key)) == Result(), "nothing asked of the queue"
    assert key not in controller.records


def test_failures_in_a_row_back_off_and_a_pass_that_works_starts_them_again() -> None:
    controller, job, key = _controller()
    controller.observed(BY_KIND["MPIJob"], "ADDED", job)
    controller.queue.take_pending()
    for _ in range(3):
        controller._failed(key, NORMAL, RuntimeError("boom"))
    assert controller.records.of(key).failures == 3
    controller.queue.take_pending()

    async def one_pass() -> None:
        controller.warm.set()
        controller.leading.set()
        controller.queue.add(key)
        worker = asyncio.ensure_future(controller.reconciler())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if controller.stats.reconciles and not controller.queue.busy():
                break
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)

    asyncio.run(one_pass())
    assert controller.stats.reconciles >= 1 and controller.records.of(key).failures == 0


def test_the_executor_keeps_no_memory_of_jobs() -> None:
    executor = Executor(RecordingClient())  # type: ignore[arg-type]
    assert not any(isinstance(value, dict) for value in vars(executor).values())


def test_a_job_deleted_and_created_again_under_its_name_unseen_starts_with_a_fresh_record() -> None:
    controller, job, key = _controller()
    controller.observed(BY_KIND["MPIJob"], "ADDED", job)
    record = controller.records.get(key)
    assert record is not None and record.uid == job["metadata"]["uid"]
    _remembering(record)
    record.first_seen -= 60.0
    again = copy.deepcopy(job)
    again["metadata"]["uid"], again["metadata"]["resourceVersion"] = "another-uid", "20"
    # A relist delivers the new object as a change of the old one: no DELETED in between.
    controller.observed(BY_KIND["MPIJob"], "MODIFIED", again)
    fresh = controller.records.get(key)
    assert fresh is not None and fresh is not record and fresh.uid == "another-uid"
    assert fresh.failures == 0 and fresh.job_rv == 0 and fresh.pods is None and not fresh.created
    assert time.monotonic() - fresh.first_seen < 5.0, "its settle wait counts from its own first sight"


def test_a_change_of_the_same_job_keeps_its_record() -> None:
    controller, job, key = _controller()
    controller.observed(BY_KIND["MPIJob"], "ADDED", job)
    record = controller.records.get(key)
    assert record is not None
    _remembering(record)
    changed = copy.deepcopy(job)
    changed["metadata"]["resourceVersion"] = "30"
    controller.observed(BY_KIND["MPIJob"], "MODIFIED", changed)
    assert controller.records.get(key) is record and record.failures == 3
