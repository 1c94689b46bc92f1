"""The hand-over from the reference operator, over the World: what v0.8.2 left (reference_v082.py), then
our controller, cache, planner and executor operating on it. Shared by test_handover_reference.py and
test_spin_guard.py."""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass

from mpijob.executor.apply import Executor
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller

from .reference_v082 import reference_children, reference_job
from .world import InformedApi, World, inform


@dataclass
class Handover:
    world: World
    controller: Controller
    api: InformedApi

    @property
    def reconciles(self) -> int:
        return self.controller.stats.reconciles

    def writes_to(self, kind: str, verb: str | None = None) -> list[str]:
        """Names of the objects of `kind` written (by `verb`), in order, one entry per request."""
        return [n for v, k, n in self.api.written if k == kind and verb in (None, v)]


def handed_over(jobs: tuple[str, ...] = ("pi",)) -> Handover:
    world = World()
    world.add_nodes("node-1")
    for name in jobs:
        job = reference_job(name)
        world.add(job)
        for child in reference_children(job):
            world.add(child)
    api = InformedApi(world)
    controller = Controller(Executor(api, post_events=True), OperatorConfig(), reconcilers=2)  # type: ignore[arg-type]
    api.controller = controller
    controller.clock = lambda: world.now
    for w in controller.kinds:
        controller.cache.listed.add(w.kind)
    inform(controller, world)
    for name in world.nodes:
        controller.observed(controller.by_kind["Node"], "ADDED", copy.deepcopy(world.nodes[name]))
    return Handover(world, controller, api)


def operate(h: Handover, seconds: float = 1.5, *, start: bool = False) -> bool:
    """Runs the operator's reconcilers until nothing is queued, running or due for 0.25 s, or `seconds` pass.
    `start`: as the operator starts (every cached job queued once). Returns whether it went quiet."""
    controller = h.controller

    async def run() -> bool:
        controller.cache.ready = True
        controller.warm.set()
        controller.leading.set()
        if start:
            for key in controller.cache.mpijob_keys():
                controller.queue.add(key)
        workers = asyncio.gather(*(controller.reconciler() for _ in range(controller.reconcilers)))
        deadline = time.monotonic() + seconds
        idle = 0
        try:
            while idle < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                q = controller.queue
                busy = q.busy() or q.queued()
                idle = 0 if busy else idle + 1
            return idle >= 5
        finally:
            workers.cancel()
            await asyncio.gather(workers, return_exceptions=True)
            controller.queue.shutdown()

    return asyncio.run(run())
