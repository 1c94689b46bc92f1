"""The spin guard: a job whose passes keep planning the same writes at the same resourceVersion, each landing
without changing what the next plan reads, is held back instead of reconciled again at once.

Such a loop has no natural end: a write the server already holds changes nothing (no new resourceVersion,
no watch event), and a pass that defers (`Defer`) is queued again at once, so a cache that does not show
what the plan compares (issue 30: an adopted job's ConfigMap cached without its data) costs a pass every
few milliseconds, forever and silently. Level-triggered like the rest: it compares each pass with the
job's previous one only (the MPIJob's resourceVersion and the writes planned, their preconditions aside);
a pass that plans no write, or other writes, or runs on a newer job, ends the hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from mpijob.planner.actions import Action, Create, Delete, Patch
from mpijob.runtime.record import JobRecord, SpinSeen

# Passes in a row with the same writes at the same job resourceVersion before the job is held back: a
# retried pass repeats its writes once or twice (a 409 after a stale read); a loop repeats them forever.
SPIN_THRESHOLD = 5


def _describe(action: Create | Patch | Delete) -> str:
    if isinstance(action, Create):
        return f"Create {action.obj.get('kind')} {(action.obj.get('metadata') or {}).get('name')}"
    sub = f"/{action.subresource}" if isinstance(action, Patch) and action.subresource else ""
    return f"{type(action).__name__} {action.kind}{sub} {action.name}"


def _writes(actions: Sequence[Action]) -> tuple[bytes, list[str]]:
    """The planned writes as one comparable value (their bodies, the resourceVersion preconditions aside:
    a write that lands and leaves the object as it was is the same write again), and how each is named."""
    writes = [a for a in actions if isinstance(a, Create | Patch | Delete)]
    body = [
        [_describe(a), a.obj if isinstance(a, Create) else a.patch if isinstance(a, Patch) else a.uid] for a in writes
    ]
    return orjson.dumps(body, default=repr, option=orjson.OPT_SORT_KEYS), [_describe(a) for a in writes]


class SpinGuard:
    """The rule; what it saw of each job is in the job's record (`JobRecord.spin`, runtime/record.py)."""

    def __init__(self, threshold: int = SPIN_THRESHOLD) -> None:
        self.threshold = threshold
        # Spins found (each hold once), for the metric.
        self.spins = 0

    @staticmethod
    def held(record: JobRecord | None) -> str | None:
        """What the job waits for while it is held back, else None."""
        return None if record is None or record.spin is None else record.spin.held

    def observe(self, record: JobRecord, job_rv: str, actions: Sequence[Action]) -> str | None:
        """One pass whose writes landed (no conflict, no error). Returns what the job waits for when this
        pass makes it spin (once per hold); None otherwise. `held(record)` says whether it is held now."""
        body, names = _writes(actions)
        seen = record.spin
        if not names:
            record.spin = None
            return None
        if seen is None or seen.job_rv != job_rv or seen.writes != body:
            record.spin = SpinSeen(job_rv, body)
            return None
        seen.passes += 1
        if seen.held is not None or seen.passes < self.threshold:
            return None
        seen.held = (
            f"the same writes ({', '.join(names)}) were planned {seen.passes} times at resourceVersion {job_rv} "
            "and each left what the next plan reads unchanged; waiting for the cache to show them, retried "
            "with backoff"
        )
        self.spins += 1
        return seen.held

    @staticmethod
    def moved_to(record: JobRecord, job_rv: str | None) -> None:
        """Our own write of the job (the condition saying it is held) made `job_rv`: not progress."""
        if record.spin is not None and job_rv is not None:
            record.spin.job_rv = job_rv

    @staticmethod
    def release(record: JobRecord) -> bool:
        """Forgets what it saw (a pass that stopped on a conflict or an error); True if the job was held."""
        seen, record.spin = record.spin, None
        return seen is not None and seen.held is not None
