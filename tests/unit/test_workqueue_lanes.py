"""The work queue's later lane: the rest of a deferred pass waits there, and never takes every worker, so a
newly signalled job's urgent pass finds a free worker (the mass scale-in at 1,000 x 8: each patched job
waited for a worker while all 16 waited on the shared QPS budget)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.runtime.workqueue import WorkQueue


async def _take(queue: WorkQueue, within: float = 0.2) -> Hashable | None:
    try:
        return await asyncio.wait_for(queue.get(), within)
    except TimeoutError:
        return None


def test_a_job_added_while_deferred_passes_fill_their_share_is_taken_at_once() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=2)
        for job in ("d1", "d2", "d3"):
            queue.add_later(job)
        taken = [await _take(queue), await _take(queue)]
        assert taken == ["d1", "d2"]
        assert await _take(queue) is None, "a third deferred pass would take a worker the ready lane needs"
        queue.add("signalled")
        assert await _take(queue) == "signalled"
        queue.done("d1")
        assert await _take(queue) == "d3", "a finished deferred pass frees its slot"

    asyncio.run(scenario())


def test_the_later_lane_is_served_first_while_under_its_limit() -> None:
    """Not starved by a steady ready lane: its share of workers keeps working through it."""

    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add("a")
        queue.add("b")
        queue.add_later("deferred")
        assert await _take(queue) == "deferred"
        assert await _take(queue) == "a"

    asyncio.run(scenario())


def test_while_a_burst_waits_in_the_ready_lane_later_passes_run_one_at_a_time() -> None:
    """A spot taint queues every job on the node at once: their urgent passes get the workers (and the CPU),
    and the later lane still moves, one pass at a time (never starved, however long the burst)."""

    async def scenario() -> None:
        queue = WorkQueue(later_limit=4)
        for job in ("d1", "d2", "d3"):
            queue.add_later(job)
        for job in ("u1", "u2", "u3", "u4"):
            queue.add(job)
        taken = [await _take(queue) for _ in range(4)]
        assert taken == ["d1", "u1", "u2", "u3"], "one later pass, then the burst"
        queue.done("d1")
        assert await _take(queue) == "d2", "the finished later pass hands its turn to the next one"
        assert await _take(queue) == "u4"
        assert await _take(queue) == "d3", "the ready lane is empty: the later lane may use its whole share"

    asyncio.run(scenario())


def test_a_burst_arriving_while_later_passes_run_starts_no_more_of_them() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=3)
        for job in ("d1", "d2", "d3", "d4"):
            queue.add_later(job)
        assert [await _take(queue), await _take(queue)] == ["d1", "d2"]
        queue.add("u1")
        queue.add("u2")
        assert [await _take(queue), await _take(queue)] == ["u1", "u2"]
        assert await _take(queue) == "d3", "below its share again once the burst is taken"
        assert await _take(queue) is None, "at its share (3): the rest stay for the ready lane"

    asyncio.run(scenario())


def test_an_event_for_a_key_in_the_later_lane_leaves_it_there() -> None:
    """The deferred pass's own ConfigMap write comes back as an event at once: it must not jump the queue."""

    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add_later("j")
        queue.add("j")
        assert len(queue) == 1
        queue.add("other")
        assert await _take(queue) == "j"  # from the later lane, once
        assert await _take(queue) == "other"
        assert await _take(queue) is None

    asyncio.run(scenario())


def test_a_key_deferred_while_processing_goes_to_the_later_lane_when_done() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add("j")
        assert await _take(queue) == "j"
        queue.add_later("j")  # the pass deferred itself
        queue.add("k")
        assert await _take(queue) == "k", "never two passes of one key at once"
        queue.done("j")
        assert await _take(queue) == "j"

    asyncio.run(scenario())


def test_the_rest_of_a_pass_goes_to_the_later_lane_even_when_its_own_write_came_back_during_the_pass() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add("j")
        assert await _take(queue) == "j"
        queue.add("j")  # the event of the pass's own write, while it runs
        queue.add_later("j")  # then the pass deferred itself
        queue.done("j")
        queue.add("signalled")
        taken = await _take(queue)
        assert taken == "j" and queue.in_later_lane("j"), "the rest of a deferred pass runs in the later lane"
        assert await _take(queue) == "signalled"
        assert await _take(queue) is None

    asyncio.run(scenario())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "later", "first", "take", "done"]), st.integers(0, 4)), max_size=40))
def test_every_added_key_is_taken_once_and_never_twice_at_once(ops: list[tuple[str, int]]) -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=2)
        running: set[Hashable] = set()
        pending: set[Hashable] = set()
        for op, n in ops:
            key = f"j{n}"
            if op == "add":
                queue.add(key)
                pending.add(key)
            elif op in ("later", "first"):
                queue.add_later(key, first=op == "first")
                pending.add(key)
            elif op == "take":
                got = await _take(queue, 0.01)
                if got is not None:
                    assert got not in running
                    running.add(got)
                    pending.discard(got)
            elif key in running:
                running.discard(key)
                queue.done(key)
        for key in list(running):
            queue.done(key)
        drained = set()
        while (got := await _take(queue, 0.01)) is not None:
            drained.add(got)
            queue.done(got)
        assert drained == pending

    asyncio.run(scenario())


def test_the_rest_of_a_pass_cut_before_its_nudges_is_taken_before_the_later_lanes_other_keys() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add_later("rest")
        queue.add("j")
        assert await _take(queue) == "rest"
        assert await _take(queue) == "j"
        queue.add("j")  # its own write's event, while it runs
        queue.add_later("j", first=True)
        queue.add_later("other-rest")
        queue.done("j")
        queue.done("rest")
        assert await _take(queue) == "j", "ahead of the lane's other keys"
        assert queue.in_later_lane("j")

    asyncio.run(scenario())


def test_take_pending_empties_both_lanes_and_leaves_a_running_pass_alone() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add("running")
        assert await _take(queue) == "running"
        queue.add("a")
        queue.add_later("b")
        queue.add("running")  # added while it runs: queued again when done, not before
        assert sorted(map(str, queue.take_pending())) == ["a", "b"]
        assert len(queue) == 1
        queue.done("running")
        assert await _take(queue) == "running"

    asyncio.run(scenario())


def test_a_later_pass_waiting_for_its_own_writes_event_goes_back_to_the_later_lane_when_it_comes() -> None:
    """The rest of a deferred pass starts before the event of its urgent ConfigMap write, so it waits; that
    event must send it back to the later lane, not to the ready lane where it would hold a worker on the
    shared budget (what held the scale-in's median at 5.6 s, docs/results.md)."""

    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add_later("j")
        assert await _take(queue) == "j"
        assert queue.in_later_lane("j")
        queue.add_after("j", 30.0, later=True)  # waits for its write's event
        queue.done("j")
        queue.add("signalled")
        queue.add("j")  # the event
        assert await _take(queue) == "j", "back in the later lane, which is taken first"
        assert await _take(queue) == "signalled"
        queue.done("j")
        queue.done("signalled")
        assert await _take(queue, 0.05) is None, "its timer went with the event"

    asyncio.run(scenario())


def test_a_later_pass_whose_wait_ends_without_the_event_is_taken_from_the_later_lane() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add_later("j")
        assert await _take(queue) == "j"
        queue.add_after("j", 0.01, later=True)
        queue.done("j")
        assert await _take(queue) == "j"
        assert queue.in_later_lane("j")

    asyncio.run(scenario())


def test_a_ready_pass_that_waits_stays_a_ready_pass() -> None:
    async def scenario() -> None:
        queue = WorkQueue(later_limit=1)
        queue.add("j")
        assert await _take(queue) == "j"
        assert not queue.in_later_lane("j")
        queue.add_after("j", 30.0)
        queue.done("j")
        queue.add("j")
        assert await _take(queue) == "j"
        assert not queue.in_later_lane("j")

    asyncio.run(scenario())


def test_the_queue_is_busy_while_a_key_is_pending_or_running_and_not_for_a_timer() -> None:
    async def scenario() -> None:
        queue = WorkQueue()
        assert not queue.busy()
        queue.add_after("timer", 60)
        assert not queue.busy(), "a requeue_after is not work yet"
        queue.add("job")
        assert queue.busy()
        assert await _take(queue) == "job"
        assert queue.busy(), "being reconciled"
        queue.done("job")
        assert not queue.busy()

    asyncio.run(scenario())
