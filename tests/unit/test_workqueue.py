"""The work queue (runtime/workqueue.py): one entry per key, the highest ready priority first (first in, first
out within it), a re-add keeps the higher priority and the earlier ready time, a key added while it is
processed runs again after, never twice at once; passes below DISCOVERY hold at most `limit` reconcilers."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.runtime.workqueue import DISCOVERY, LOW, NORMAL, SIGNAL, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _queue(limit: int | None = None) -> tuple[WorkQueue, Clock]:
    clock = Clock()
    return WorkQueue(limit=limit, clock=clock), clock


def _drain(queue: WorkQueue) -> list[tuple[Hashable, int]]:
    taken = []
    while (item := queue.get_nowait()) is not None:
        taken.append(item)
        queue.done(item[0])
    return taken


def test_the_highest_priority_goes_first_and_each_priority_in_arrival_order() -> None:
    queue, _ = _queue()
    for key, priority in [("sweep", LOW), ("a", NORMAL), ("taint-1", SIGNAL), ("b", NORMAL), ("rest", DISCOVERY)]:
        queue.add(key, priority)
    queue.add("taint-2", SIGNAL)

    assert [key for key, _ in _drain(queue)] == ["taint-1", "taint-2", "rest", "a", "b", "sweep"]


def test_a_re_add_keeps_one_entry_at_the_higher_priority_and_the_earlier_time() -> None:
    queue, clock = _queue()
    queue.add("j", NORMAL, delay=30)
    queue.add("j", SIGNAL, delay=60)  # higher priority, later time: the priority is raised, the time kept
    queue.add("j", LOW)  # lower priority, now: ready now, the priority kept
    queue.add("other", NORMAL)

    assert queue.queued() == 2
    assert _drain(queue) == [("j", SIGNAL), ("other", NORMAL)]
    clock.now += 120
    assert _drain(queue) == [], "the merged entry ran once; nothing of it is left"


def test_a_delayed_key_is_not_work_until_its_time() -> None:
    queue, clock = _queue()
    queue.add("j", SIGNAL, delay=5)

    assert (len(queue), queue.queued(), queue.get_nowait()) == (0, 1, None)
    clock.now += 5
    assert len(queue) == 1 and queue.get_nowait() == ("j", SIGNAL)


def test_a_key_added_while_it_is_processed_runs_again_after_not_twice_at_once() -> None:
    queue, _ = _queue()
    queue.add("j")
    assert queue.get_nowait() == ("j", NORMAL)
    queue.add("j", SIGNAL)  # an event during the pass
    queue.add("j", NORMAL)  # and the pass's own requeue

    assert queue.get_nowait() is None, "never two passes of one key at once"
    queue.done("j")
    assert _drain(queue) == [("j", SIGNAL)]


def test_passes_below_discovery_hold_at_most_limit_reconcilers_and_signals_pass_them() -> None:
    queue, _ = _queue(limit=1)
    for key in ("rest-1", "rest-2"):
        queue.add(key, NORMAL)
    assert queue.get_nowait() == ("rest-1", NORMAL)
    assert queue.get_nowait() is None, "the second ordinary pass waits for the first"

    queue.add("nudges", DISCOVERY)
    queue.add("taint", SIGNAL)
    assert queue.get_nowait() == ("taint", SIGNAL)
    assert queue.get_nowait() == ("nudges", DISCOVERY)
    queue.done("rest-1")
    assert queue.get_nowait() == ("rest-2", NORMAL)


def test_a_failed_key_backs_off_exponentially_by_its_failures_in_a_row_at_its_priority() -> None:
    queue, clock = _queue()
    delays = [queue.add_rate_limited("j", SIGNAL, failures) for failures in range(3)]
    assert delays == [0.05, 0.1, 0.2]
    clock.now += 0.05
    assert queue.get_nowait() == ("j", SIGNAL)
    queue.done("j")
    # The failures in a row are the job's record's (runtime/record.py): forgotten, they start again at 0.
    assert queue.add_rate_limited("j", NORMAL, 0) == 0.05
    assert queue.add_rate_limited("j", NORMAL, 10_000) == queue.max_delay, "capped, however many"


def test_a_reconciler_waiting_in_get_wakes_when_a_delayed_key_is_due() -> None:
    async def main() -> tuple[Hashable, int]:
        queue = WorkQueue()
        queue.add("j", DISCOVERY, delay=0.05)
        return await asyncio.wait_for(queue.get(), 2)

    assert asyncio.run(main()) == ("j", DISCOVERY)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_delayed_keys_come_due_on_either_event_loop_even_when_one_was_due_before_the_next_add(loop: str) -> None:
    """On both of the operator's event loops (`--event-loop`). A timer for a time already past is uvloop's
    plain Handle, without `when()`: the first version asked it on the next add, which raised in the
    reconciler's requeue, and the reconcilers died one by one (the 1,000 x 8 restart deleted 5 jobs' workers
    of 500)."""
    clock = Clock()

    async def main() -> list[Hashable]:
        queue = WorkQueue(clock=clock)
        queue.add("a", NORMAL, delay=1)
        clock.now += 2  # "a" is due, not taken yet (a busy loop)
        queue.add("b", NORMAL, delay=1)  # the timer is now for a time already past
        queue.add("c", NORMAL, delay=3)
        taken = [(await asyncio.wait_for(queue.get(), 2))[0]]
        clock.now += 3
        for _ in range(2):
            taken.append((await asyncio.wait_for(queue.get(), 2))[0])
        return taken

    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop) if loop == "uvloop" else asyncio.Runner()
    with runner:
        assert runner.run(main()) == ["a", "b", "c"]  # type: ignore[type-var]


def test_a_reconciler_waiting_for_an_admission_slot_wakes_when_one_is_free() -> None:
    async def main() -> list[Hashable]:
        queue = WorkQueue(limit=1)
        queue.add("a")
        queue.add("b")
        first, _ = await queue.get()
        second = asyncio.create_task(queue.get())
        await asyncio.sleep(0.01)
        assert not second.done()
        queue.done(first)
        key, _ = await asyncio.wait_for(second, 2)
        return [first, key]

    assert asyncio.run(main()) == ["a", "b"]


# -- the property: any sequence of adds, re-adds, delays, completions and failures --------------------------

KEYS = ["a", "b", "c", "d"]
PRIORITIES = [LOW, NORMAL, DISCOVERY, SIGNAL]
DELAYS = [0.0, 0.0, 1.0, 3.0]
OPS = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(KEYS), st.sampled_from(PRIORITIES), st.sampled_from(DELAYS)),
    st.tuples(st.just("get")),
    st.tuples(st.just("done"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1.0, 2.0])),
)


@dataclass
class Model:
    """What the queue owes each key: the highest priority and the earliest ready time added since it was last
    taken (adds during a pass count for the next one)."""

    limit: int
    owed: dict[Hashable, tuple[int, float]] = field(default_factory=dict)
    running: dict[Hashable, int] = field(default_factory=dict)

    def add(self, key: Hashable, priority: int, ready_at: float) -> None:
        old = self.owed.get(key)
        self.owed[key] = (priority, ready_at) if old is None else (max(old[0], priority), min(old[1], ready_at))

    def ready(self, now: float) -> dict[Hashable, int]:
        return {k: p for k, (p, at) in self.owed.items() if at <= now and k not in self.running}

    def below(self) -> int:
        return sum(p < DISCOVERY for p in self.running.values())

    def check_take(self, taken: tuple[Hashable, int] | None, now: float) -> None:
        ready = self.ready(now)
        if taken is None:
            top = max(ready.values(), default=None)
            assert top is None or (top < DISCOVERY and self.below() >= self.limit), "work was ready and allowed"
            return
        key, priority = taken
        assert key not in self.running, "a key ran twice at once"
        assert key in ready, "a key was taken before it was due, or never added"
        assert priority == ready[key], "the pass lost the highest priority added for it"
        assert priority == max(ready.values()), "a lower priority went first"
        del self.owed[key]
        self.running[key] = priority
        assert self.below() <= self.limit, "the admission rule was broken"


@settings(max_examples=400, deadline=None)
@given(st.lists(OPS, max_size=60), st.integers(1, 3))
def test_the_queue_loses_no_key_runs_none_twice_and_takes_the_highest_ready_priority_first(
    ops: list[tuple[object, ...]], limit: int
) -> None:
    queue, clock = _queue(limit)
    model = Model(limit)
    failures: dict[str, int] = {}
    for op in ops:
        if op[0] == "add":
            _, key, priority, delay = op
            assert isinstance(key, str) and isinstance(priority, int) and isinstance(delay, float)
            queue.add(key, priority, delay)
            model.add(key, priority, clock.now + delay)
        elif op[0] == "get":
            taken = queue.get_nowait()
            model.check_take(taken, clock.now)
        elif op[0] in ("done", "fail") and model.running:
            assert isinstance(op[1], int)
            key = sorted(model.running, key=str)[op[1] % len(model.running)]
            if op[0] == "fail":
                priority = model.running[key]
                failures[key] = failures.get(key, -1) + 1
                model.add(key, priority, clock.now + queue.add_rate_limited(key, priority, failures[key]))
            queue.done(key)
            del model.running[key]
        elif op[0] == "tick":
            assert isinstance(op[1], float)
            clock.now += op[1]
    # Then everything finishes and time passes: every key owed a pass gets exactly one.
    for key in list(model.running):
        queue.done(key)
        del model.running[key]
    clock.now += 1000
    while (taken := queue.get_nowait()) is not None:
        model.check_take(taken, clock.now)
        queue.done(taken[0])
        del model.running[taken[0]]
    assert model.owed == {}, "a key was lost"
    assert queue.queued() == 0 and not queue.busy()
