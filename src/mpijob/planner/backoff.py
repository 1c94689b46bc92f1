"""Replacement backoff (issue 8, rule 7): no churn from workers that keep crashing. The failures are counted by
elastic.new_failures (a worker lost to its node or to a disruption is none, issue 19); the count and the time
of the last one live in the status, so a restart does not reset them."""

from __future__ import annotations

from dataclasses import replace

from mpijob.planner.draft import PlanContext
from mpijob.planner.snapshot import parse_time
from mpijob.planner.workers import WorkerPlan

BACKOFF_AFTER = 3
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 600.0
# A recorded count above this is a status writer's junk, not failures: read as none.
MAX_RECORDED_FAILURES = 10**6


def replacement_backoff(ctx: PlanContext, decided: WorkerPlan) -> WorkerPlan:
    """The decisions with their creates held back while the job backs off. The first BACKOFF_AFTER - 1
    failures are replaced at once; then each new failure waits 10 s, 20 s, ... up to 5 min after the last
    failure. The count is forgotten after 10 quiet minutes."""
    failed_now = decided.failures  # counted by elastic.new_failures
    recorded = ctx.draft.new_status.recent_worker_failures
    count = recorded if recorded is not None and recorded <= MAX_RECORDED_FAILURES else 0
    # Written, even if unreadable (then it goes at the next status write).
    written = recorded is not None or "recentWorkerFailures" in ctx.previous.invalid
    last = parse_time(ctx.draft.new_status.last_worker_failure_time)
    if failed_now:
        count += failed_now
        last = ctx.snapshot.now
        ctx.draft.new_status.recent_worker_failures = count
        ctx.draft.new_status.last_worker_failure_time = ctx.now
    elif written and (last is None or (ctx.snapshot.now - last).total_seconds() >= BACKOFF_RESET_SECONDS):
        ctx.draft.new_status.recent_worker_failures = None
        ctx.draft.new_status.last_worker_failure_time = None
        return decided
    if count < BACKOFF_AFTER or not (decided.to_create or decided.probes_to_create) or last is None:
        return decided
    delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(count - BACKOFF_AFTER, 16))
    left = (last - ctx.snapshot.now).total_seconds() + delay
    if left <= 0:
        return decided
    ctx.draft.requeue_after.append(left)
    return replace(decided, to_create=(), probes_to_create=())
