"""The client's token bucket serves waiting requests by priority: Events (LOW) wait for the writes queued
with them, and never while the budget has room."""

from __future__ import annotations

import asyncio

from mpijob.executor.client import LOW, NORMAL, TokenBucket


async def _order(bucket: TokenBucket, arrivals: list[tuple[str, int]]) -> list[str]:
    served: list[str] = []

    async def one(name: str, priority: int) -> None:
        await bucket.take(priority)
        served.append(name)

    tasks = []
    for name, priority in arrivals:
        tasks.append(asyncio.create_task(one(name, priority)))
        await asyncio.sleep(0)  # arrive in this order
    await asyncio.gather(*tasks)
    return served


def test_a_low_priority_request_waits_for_normal_ones_that_arrive_after_it_while_the_budget_is_spent() -> None:
    async def main() -> list[str]:
        bucket = TokenBucket(qps=200, burst=1)
        await bucket.take()  # spend the burst
        return await _order(bucket, [("event", LOW), ("pod-0", NORMAL), ("event-2", LOW), ("pod-1", NORMAL)])

    assert asyncio.run(main()) == ["pod-0", "pod-1", "event", "event-2"]


def test_requests_of_one_priority_are_served_in_arrival_order() -> None:
    async def main() -> list[str]:
        bucket = TokenBucket(qps=500, burst=1)
        await bucket.take()
        return await _order(bucket, [(f"r{i}", NORMAL) for i in range(6)])

    assert asyncio.run(main()) == [f"r{i}" for i in range(6)]


def test_a_low_priority_request_goes_at_once_while_the_budget_has_room() -> None:
    async def main() -> tuple[list[str], float]:
        bucket = TokenBucket(qps=0.001, burst=3)  # no refill to speak of: only the burst can serve it
        served = await _order(bucket, [("event", LOW), ("pod", NORMAL)])
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


def test_the_budget_still_bounds_the_rate_with_priorities() -> None:
    """20 requests at 100 QPS and burst 5 cannot finish before the 15 tokens beyond the burst have accrued."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        bucket = TokenBucket(qps=100, burst=5)
        started = loop.time()
        await asyncio.gather(*(bucket.take(LOW if i % 2 else NORMAL) for i in range(20)))
        return loop.time() - started

    assert asyncio.run(main()) >= 0.14


def test_no_budget_means_no_wait() -> None:
    async def main() -> None:
        bucket = TokenBucket(qps=0, burst=0)
        await asyncio.wait_for(asyncio.gather(*(bucket.take(LOW) for _ in range(1000))), 5)

    asyncio.run(main())
