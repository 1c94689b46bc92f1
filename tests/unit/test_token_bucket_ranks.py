"""The client's token bucket serves waiting requests by rank: Events (rank 1, the EVENT write class) wait for
the writes queued with them (rank 0), and never while the budget has room."""

from __future__ import annotations

import asyncio

from mpijob.kube.client import TokenBucket

WORK, EVENT = 0, 1  # the ranks Client.bucket_for gives


async def _order(bucket: TokenBucket, arrivals: list[tuple[str, int]]) -> list[str]:
    served: list[str] = []

    async def one(name: str, rank: int) -> None:
        await bucket.take(rank)
        served.append(name)

    tasks = []
    for name, rank in arrivals:
        tasks.append(asyncio.create_task(one(name, rank)))
        await asyncio.sleep(0)  # arrive in this order
    await asyncio.gather(*tasks)
    return served


def test_an_event_waits_for_the_writes_that_arrive_after_it_while_the_budget_is_spent() -> None:
    async def main() -> list[str]:
        bucket = TokenBucket(qps=200, burst=1)
        await bucket.take()  # spend the burst
        return await _order(bucket, [("event", EVENT), ("pod-0", WORK), ("event-2", EVENT), ("pod-1", WORK)])

    assert asyncio.run(main()) == ["pod-0", "pod-1", "event", "event-2"]


def test_requests_of_one_rank_are_served_in_arrival_order() -> None:
    async def main() -> list[str]:
        bucket = TokenBucket(qps=500, burst=1)
        await bucket.take()
        return await _order(bucket, [(f"r{i}", WORK) for i in range(6)])

    assert asyncio.run(main()) == [f"r{i}" for i in range(6)]


def test_an_event_goes_at_once_while_the_budget_has_room() -> None:
    async def main() -> tuple[list[str], float]:
        bucket = TokenBucket(qps=0.001, burst=3)  # no refill to speak of: only the burst can serve it
        served = await _order(bucket, [("event", EVENT), ("pod", WORK)])
        return served, bucket.tokens

    served, left = asyncio.run(main())
    assert served == ["event", "pod"]
    assert 0.9 < left < 1.1


def test_a_cancelled_waiter_gives_its_place_to_the_next_one() -> None:
    async def main() -> list[str]:
        bucket = TokenBucket(qps=200, burst=1)
        await bucket.take()
        served: list[str] = []

        async def one(name: str) -> None:
            await bucket.take()
            served.append(name)

        first = asyncio.create_task(one("cancelled"))
        await asyncio.sleep(0)
        second = asyncio.create_task(one("next"))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        return served

    assert asyncio.run(main()) == ["next"]


def test_the_budget_still_bounds_the_rate_with_ranks() -> None:
    """20 requests at 100 QPS and burst 5 cannot finish before the 15 tokens beyond the burst have accrued."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        bucket = TokenBucket(qps=100, burst=5)
        started = loop.time()
        await asyncio.gather(*(bucket.take(EVENT if i % 2 else WORK) for i in range(20)))
        return loop.time() - started

    assert asyncio.run(main()) >= 0.14


def test_no_budget_means_no_wait() -> None:
    async def main() -> None:
        bucket = TokenBucket(qps=0, burst=0)
        await asyncio.wait_for(asyncio.gather(*(bucket.take(EVENT) for _ in range(1000))), 5)

    asyncio.run(main())


def test_an_event_leaves_the_last_half_of_the_burst_to_the_work() -> None:
    """A ramp of creates draws the budget down: the Event does not take the tokens the next creates need."""

    async def main() -> tuple[bool, bool]:
        bucket = TokenBucket(qps=0.001, burst=10)  # no refill to speak of
        bucket.tokens = 5.0  # half the burst, and no more
        event = asyncio.create_task(bucket.take(EVENT))
        await asyncio.sleep(0.05)
        waited = not event.done()
        await asyncio.wait_for(bucket.take(WORK), 0.5)  # the work is served from what the Event left
        event.cancel()
        return waited, bucket.tokens < 4.5

    assert asyncio.run(main()) == (True, True)


def test_an_event_goes_once_the_budget_has_refilled_past_half_its_burst() -> None:
    async def main() -> tuple[bool, bool]:
        bucket = TokenBucket(qps=10, burst=10)  # 6 tokens needed: 0.6 s from an empty bucket
        bucket.tokens = 0.0
        event = asyncio.create_task(bucket.take(EVENT))
        await asyncio.sleep(0.2)  # 2 tokens by now: enough for work, not for the Event
        waiting = not event.done()
        await asyncio.wait_for(event, 3.0)
        return waiting, event.done()

    assert asyncio.run(main()) == (True, True)


def test_an_event_that_waited_its_patience_takes_its_turn_without_the_reserve() -> None:
    async def main() -> tuple[bool, float]:
        bucket = TokenBucket(qps=0.001, burst=10, patience=0.3)
        bucket.tokens = 3.0  # below the reserve, and nothing refills it
        event = asyncio.create_task(bucket.take(EVENT))
        await asyncio.sleep(0.1)
        waiting = not event.done()
        await asyncio.wait_for(event, 3.0)
        return waiting, bucket.tokens

    waiting, left = asyncio.run(main())
    assert waiting, "it kept the reserve while patient"
    assert 1.9 < left < 2.1


def test_an_impatient_event_on_a_spent_budget_waits_for_its_token_without_spinning() -> None:
    """Past its patience an Event needs one token; while the work keeps the bucket below one, the bucket
    wakes for the next token, not on every turn of the loop."""

    async def main() -> int:
        bucket = TokenBucket(qps=5, burst=10, patience=0.01)
        bucket.tokens = 0.0
        calls = 0
        dispatch = bucket._dispatch

        def counted() -> None:
            nonlocal calls
            calls += 1
            dispatch()

        bucket._dispatch = counted  # type: ignore[method-assign]
        await asyncio.wait_for(bucket.take(EVENT), 3.0)  # one token at 5 QPS: ~0.2 s
        return calls

    assert asyncio.run(main()) < 10
