"""Events go out off the reconcile path: the reconcile does not wait for them, one job's Events keep their
order, a failed post is dropped with a log line, and past the limit the caller waits (bounded memory)."""

from __future__ import annotations

import asyncio
from typing import Any

from mpijob.executor.apply import Executor
from mpijob.executor.client import LOW, ApiError
from mpijob.executor.events import EventPoster
from mpijob.planner.actions import Emit


class SlowClient:
    """Answers each create when the test releases it; records what it was asked, and at which priority."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []
        self.release = asyncio.Event()
        self.fail: set[str] = set()

    async def create(self, path: str, obj: Any, *, priority: int = 0) -> Any:
        self.asked.append((obj["reason"], priority))
        await self.release.wait()
        if obj["reason"] in self.fail:
            raise ApiError(500, "Internal Server Error", "")
        return obj


def _job(uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "uid": uid, "resourceVersion": "1"}}


def test_a_reconcile_does_not_wait_for_its_events_and_they_are_posted_at_low_priority() -> None:
    async def main() -> tuple[list[tuple[str, int]], int]:
        client = SlowClient()
        poster = EventPoster(client)
        executor = Executor(client, events=poster)  # type: ignore[arg-type]  # a fake client
        await asyncio.wait_for(executor.apply(_job(), [Emit("Normal", "MPIJobCreated", "created")]), 1)
        pending = len(poster.pending)
        client.release.set()
        await poster.drain(5)
        return client.asked, pending

    asked, pending = asyncio.run(main())
    assert pending == 1
    assert asked == [("MPIJobCreated", LOW)]


def test_one_jobs_events_keep_their_order_and_other_jobs_do_not_wait_for_them() -> None:
    async def main() -> list[tuple[str, int]]:
        client = SlowClient()
        poster = EventPoster(client)
        await poster.post("/p", {"reason": "A1"}, "a")
        await poster.post("/p", {"reason": "A2"}, "a")
        await poster.post("/p", {"reason": "B1"}, "b")
        for _ in range(5):
            await asyncio.sleep(0)
        seen = list(client.asked)  # A2 waits for A1; B1 does not
        client.release.set()
        await poster.drain(5)
        return seen + [("then", 0)] + client.asked[len(seen) :]

    assert asyncio.run(main()) == [("A1", LOW), ("B1", LOW), ("then", 0), ("A2", LOW)]


def test_a_failed_post_is_counted_and_the_next_event_of_the_job_still_goes() -> None:
    async def main() -> tuple[int, int]:
        client = SlowClient()
        client.fail.add("A1")
        client.release.set()
        poster = EventPoster(client)
        await poster.post("/p", {"reason": "A1"}, "a")
        await poster.post("/p", {"reason": "A2"}, "a")
        await poster.drain(5)
        return poster.failed, poster.posted

    assert asyncio.run(main()) == (1, 1)


def test_past_the_limit_the_caller_waits_for_its_event() -> None:
    async def main() -> tuple[bool, int]:
        client = SlowClient()
        poster = EventPoster(client, limit=2)
        await poster.post("/p", {"reason": "A"}, "a")
        await poster.post("/p", {"reason": "B"}, "b")
        third = asyncio.create_task(poster.post("/p", {"reason": "C"}, "c"))
        for _ in range(5):
            await asyncio.sleep(0)
        waited = not third.done()
        client.release.set()
        await third
        await poster.drain(5)
        return waited, poster.posted

    assert asyncio.run(main()) == (True, 3)


def test_drain_drops_what_it_could_not_post_in_time() -> None:
    async def main() -> tuple[int, int]:
        client = SlowClient()  # never released
        poster = EventPoster(client)
        await poster.post("/p", {"reason": "A"}, "a")
        await poster.post("/p", {"reason": "B"}, "b")
        dropped = await poster.drain(0.05)
        return dropped, len(poster.pending)

    assert asyncio.run(main()) == (2, 0)
