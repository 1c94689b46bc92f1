"""The controller keeps the rest of a deferred pass in the later lane while the cache is behind its own
urgent write (Expectations): the write's event must not move it to the ready lane."""

from __future__ import annotations

import asyncio

from mpijob.executor.apply import Executor, Outcome
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.controller import Controller
from mpijob.runtime.kinds import BY_KIND

from .builders import NS, mpijob
from .test_safety_fence import RecordingClient

MPIJOBS = BY_KIND["MPIJob"]


def _controller_with_a_job_behind_our_write() -> tuple[Controller, tuple[str, str], RecordingClient]:
    client = RecordingClient()
    controller = Controller(Executor(client), OperatorConfig(), reconcilers=2)  # type: ignore[arg-type]
    controller.cache.ready = True
    job = mpijob(workers=2)
    controller.observed(MPIJOBS, "ADDED", MPIJOBS.slim(job))
    controller.queue.take_pending()
    key = (NS, job["metadata"]["name"])
    # Our last write to the job made a version the cache has not shown yet.
    controller.expectations.job_rv[key] = int(job["metadata"]["resourceVersion"]) + 10
    return controller, key, client


def test_a_later_lane_pass_behind_its_own_write_waits_in_the_later_lane_and_writes_nothing() -> None:
    async def scenario() -> None:
        controller, key, client = _controller_with_a_job_behind_our_write()
        queue = controller.queue
        queue.add_later(key)
        assert await queue.get() == key
        assert await controller.reconcile(key) is None
        queue.done(key)
        assert client.writes == []
        queue.add(("other", "job"))
        queue.add(key)  # the event of our write
        assert await queue.get() == key, "the later lane is taken first, and the key is there"
        queue.shutdown()

    asyncio.run(scenario())


def test_a_ready_lane_pass_behind_its_own_write_asks_to_be_looked_at_again() -> None:
    async def scenario() -> float | None:
        controller, key, _ = _controller_with_a_job_behind_our_write()
        controller.queue.add(key)
        assert await controller.queue.get() == key
        return await controller.reconcile(key)

    assert asyncio.run(scenario()) == 1.0


def test_a_pass_cut_before_its_launcher_nudges_goes_ahead_of_the_later_lanes_other_passes() -> None:
    """The ConfigMap went first; the nudges (the launcher's file) are urgent too, but never ahead of another
    job's first pass: the front of the later lane, which runs one pass at a time while signalled jobs wait
    in the ready lane. A pass whose cut part is ordinary waits behind it."""

    async def scenario() -> None:
        controller, key, _ = _controller_with_a_job_behind_our_write()
        queue = controller.queue
        queue.add(("other", "signalled"))
        assert controller._next_look(("other", "cut"), Outcome(deferred=True)) is None
        assert controller._next_look(key, Outcome(deferred=True, urgent_rest=True)) is None

        nudges_pass = await asyncio.wait_for(queue.get(), 2)
        assert nudges_pass == key and queue.in_later_lane(key), "the nudges' pass is the later lane's first"
        assert await asyncio.wait_for(queue.get(), 2) == ("other", "signalled"), "the later lane's one pass"
        queue.done(key)
        assert await asyncio.wait_for(queue.get(), 2) == ("other", "cut")
        queue.shutdown()

    asyncio.run(scenario())
