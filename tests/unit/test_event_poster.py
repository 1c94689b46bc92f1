"""Events go out off the reconcile path: the reconcile does not wait for them, one job's Events keep their
order, a post that meets a loaded API server is tried again with backoff, what cannot be posted is counted
by why, and past the limit the caller waits (bounded memory)."""

from __future__ import annotations

import asyncio
from typing import Any

from mpijob.app.metrics import Metrics
from mpijob.executor.apply import Executor
from mpijob.executor.events import EventPoster
from mpijob.kube.client import ApiError, WriteClass
from mpijob.planner.actions import Emit


class SlowClient:
    """Answers each create when the test releases it; records what it was asked, and in which write class."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, WriteClass | None]] = []
        self.release = asyncio.Event()
        self.fail: set[str] = set()

    async def create(self, path: str, obj: Any, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        self.asked.append((obj["reason"], write_class))
        await self.release.wait()
        if obj["reason"] in self.fail:
            raise ApiError(500, "Internal Server Error", "")
        return obj


def test_a_reconcile_does_not_wait_for_its_events_and_they_are_posted_in_the_event_class() -> None:
    async def main() -> tuple[list[tuple[str, WriteClass | None]], int]:
        client = SlowClient()
        poster = EventPoster(client)
        executor = Executor(client, events=poster)  # type: ignore[arg-type]  # a fake client
        # Only what an Event's involvedObject reads of the job.
        job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}}
        await asyncio.wait_for(executor.apply(job, [Emit("Normal", "MPIJobCreated", "created")]), 1)
        pending = len(poster.pending)
        client.release.set()
        await poster.drain(5)
        return client.asked, pending

    asked, pending = asyncio.run(main())
    assert pending == 1
    assert asked == [("MPIJobCreated", WriteClass.EVENT)]


def test_one_jobs_events_keep_their_order_and_other_jobs_do_not_wait_for_them() -> None:
    async def main() -> list[tuple[str, WriteClass | None]]:
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
        return seen + [("then", None)] + client.asked[len(seen) :]

    event = WriteClass.EVENT
    assert asyncio.run(main()) == [("A1", event), ("B1", event), ("then", None), ("A2", event)]


def test_a_post_that_keeps_failing_is_dropped_after_its_last_try_and_the_next_event_of_the_job_still_goes() -> None:
    async def main() -> tuple[dict[str, int], int, list[str]]:
        client = SlowClient()
        client.fail.add("A1")
        client.release.set()
        poster = EventPoster(client, tries=3, first_wait=0.001)
        await poster.post("/p", {"reason": "A1"}, "a")
        await poster.post("/p", {"reason": "A2"}, "a")
        await poster.drain(5)
        return dict(poster.dropped), poster.posted, [reason for reason, _ in client.asked]

    assert asyncio.run(main()) == ({"retries": 1}, 1, ["A1", "A1", "A1", "A2"])


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


class Server:
    """An API server's Event collection: answers each try with the next scripted outcome (a status code, or
    "timeout-landed": the Event is stored but the answer never comes), then 201. Stores Events by name."""

    def __init__(self, *script: int | str) -> None:
        self.script = list(script)
        self.stored: dict[str, Any] = {}
        self.tries = 0

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        self.tries += 1
        name = obj["metadata"]["name"]
        if name in self.stored:
            raise ApiError(409, "Conflict", f"events {name!r} already exists")
        step = self.script.pop(0) if self.script else 201
        if step == "timeout-landed":
            self.stored[name] = obj
            raise TimeoutError
        if isinstance(step, int) and step >= 300:
            raise ApiError(step, "", "")
        self.stored[name] = obj
        return obj


def _event(reason: str = "WorkerLost") -> dict[str, Any]:
    return {"metadata": {"generateName": "j.", "namespace": "ns"}, "reason": reason}


def _post(server: Server, *events: dict[str, Any], tries: int = 6) -> EventPoster:
    async def main() -> EventPoster:
        poster = EventPoster(server, tries=tries, first_wait=0.001)
        for event in events:
            await poster.post("/p", event, "a")
        await poster.drain(5)
        return poster

    return asyncio.run(main())


def test_a_loaded_api_server_delays_an_event_but_does_not_lose_it() -> None:
    server = Server(429, 500, 503)

    poster = _post(server, _event())

    assert [e["reason"] for e in server.stored.values()] == ["WorkerLost"]
    assert (poster.posted, poster.retried, dict(poster.dropped)) == (1, 3, {})


def test_a_retry_of_a_post_that_landed_does_not_make_a_second_event() -> None:
    server = Server("timeout-landed")

    poster = _post(server, _event())

    assert len(server.stored) == 1 and server.tries == 2
    assert (poster.posted, dict(poster.dropped)) == (1, {})


def test_a_rejected_event_is_not_tried_again_and_is_counted_as_rejected() -> None:
    server = Server(403)

    poster = _post(server, _event())

    assert server.tries == 1 and not server.stored
    assert dict(poster.dropped) == {"rejected": 1}


def test_a_post_still_failing_after_the_last_try_is_counted_as_dropped() -> None:
    server = Server(*[500] * 4)

    poster = _post(server, _event(), tries=4)

    assert server.tries == 4 and not server.stored
    assert dict(poster.dropped) == {"retries": 1}


def test_each_event_gets_its_own_name_from_the_jobs_prefix() -> None:
    server = Server()

    _post(server, *[_event(f"R{i}") for i in range(50)])

    assert len(server.stored) == 50
    assert all(name.startswith("j.") and len(name) > len("j.") for name in server.stored)
    assert all("generateName" not in e["metadata"] for e in server.stored.values())


def test_events_not_posted_when_the_operator_stops_are_counted_as_stopping() -> None:
    async def main() -> dict[str, int]:
        poster = EventPoster(SlowClient())  # never answers
        await poster.post("/p", _event(), "a")
        await poster.drain(0.05)
        return dict(poster.dropped)

    assert asyncio.run(main()) == {"stopping": 1}


def test_dropped_events_are_exported_by_why_and_every_why_is_there_at_zero_from_the_start() -> None:
    metrics = Metrics()
    poster = EventPoster(Server())
    metrics.attach_events(poster)
    for why in ("rejected", "retries", "stopping"):
        assert metrics.registry.get_sample_value("mpijob_events_dropped_total", {"reason": why}) == 0

    _post(Server(403), _event())  # another poster: this one's counts stay
    poster.dropped["retries"] += 2
    poster.posted, poster.retried = 5, 7

    assert metrics.registry.get_sample_value("mpijob_events_dropped_total", {"reason": "retries"}) == 2
    assert metrics.registry.get_sample_value("mpijob_events_posted_total") == 5
    assert metrics.registry.get_sample_value("mpijob_event_retries_total") == 7
