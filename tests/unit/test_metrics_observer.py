"""The metrics attach to the runtime by composition (runtime/controller.py:Observer): the controller and the
executor are the plain ones, the controller tells the metrics of each batch applied and each pass."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from mpijob.app.metrics import Metrics
from mpijob.executor.apply import Executor
from mpijob.kube.client import ApiError
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller
from mpijob.runtime.kinds import BY_KIND

from .builders import mpijob
from .fakes import RecordingClient


def _one_pass(refusal: int | None = None) -> tuple[Controller, Metrics]:
    """A new job's first pass, through the reconciler; `refusal`: the API server answers every patch so."""
    metrics = Metrics(CollectorRegistry())
    client = RecordingClient()
    if refusal is not None:

        async def refuse(path: str, patch: Any, **_: Any) -> Any:
            raise ApiError(refusal, "Refused", path)

        client.merge_patch = refuse  # type: ignore[method-assign]
    controller = Controller(Executor(client), OperatorConfig(), observer=metrics)  # type: ignore[arg-type]
    metrics.attach(controller)
    metrics.register(controller, OperatorConfig())
    controller.cache.ready = True
    job = mpijob(workers=2)
    job["metadata"]["resourceVersion"] = "10"
    controller.observed(BY_KIND["MPIJob"], "ADDED", BY_KIND["MPIJob"].slim(job))

    async def run() -> None:
        controller.warm.set()
        controller.leading.set()
        worker = asyncio.ensure_future(controller.reconciler())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if controller.stats.reconciles:
                break
        await asyncio.sleep(0.01)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        controller.queue.shutdown()

    asyncio.run(run())
    return controller, metrics


def _value(m: Metrics, name: str) -> float:
    return m.registry.get_sample_value(name) or 0.0


def test_the_metrics_hear_each_pass_and_what_its_batch_applied() -> None:
    controller, m = _one_pass()
    assert type(controller) is Controller and type(controller.executor) is Executor, "no subclass"
    assert _value(m, "mpijob_reconcile_duration_seconds_count") >= 1
    assert _value(m, "mpi_operator_jobs_created_total") == 1, "the first status write's Created condition"
    assert _value(m, "mpijob_reconcile_errors_total") == 0
    assert _value(m, "mpijob_reconcile_conflicts_total") == 0


def test_the_metrics_count_a_failed_pass_and_a_conflict() -> None:
    _, failed = _one_pass(refusal=500)
    assert _value(failed, "mpijob_reconcile_errors_total") >= 1
    assert _value(failed, "mpi_operator_jobs_created_total") == 0, "nothing applied, nothing counted"
    _, stale = _one_pass(refusal=409)
    assert _value(stale, "mpijob_reconcile_conflicts_total") >= 1
    assert _value(stale, "mpijob_reconcile_errors_total") == 0, "a conflict is retried on fresh data, no failure"
