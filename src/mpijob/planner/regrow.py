"""Regrow: an elastic ScaleIn job that lost workers to its nodes grows back to its target size once the cluster
can place workers again (issue 19). Pure steps, run by elastic.plan_elastic:

1. `read_target`  the target: the size its user asked for before the operator scaled the job in for losses.
   It lives in two annotations of the MPIJob written in the one spec patch that changes Worker replicas
   (`regrow-target`, and `regrow-replicas`: the replicas written with it). Replicas that differ from
   `regrow-replicas` are someone else's edit (`kubectl scale`, a patch of replicas and workersToDelete): that
   edit is the new target, so a manual scale-in is never undone. Absent at the target: a steady job writes
   nothing.
2. `counted_probes` probes that got a node: Worker replicas are raised by as many (never above the target),
   in the same spec patch.
3. `decide`       probes: at most maxProbes new workers at a time, each with a fresh index (a name Horovod
   never saw, so never blacklisted). A probe that is not bound to a node within probeTimeoutSeconds is
   deleted; the next round waits a capped, jittered backoff (deterministic: from the job's uid and the round).
   A probe does not count toward Worker replicas until it is bound, so replicas keep the reference's meaning
   (the workers the job has) and no Pending pod of the job lives longer than the bound while there is no
   capacity.

Not for Kueue-managed jobs (Kueue admitted a Worker count; their losses are replaced within it, never scaled
in, elastic.effective_termination_policy), nor for Replace or Ignore jobs (their replicas never drop).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from mpijob.api import constants
from mpijob.api.models import ElasticPolicy, IndexPolicy, JobStatus, NodeTerminationPolicy, RegrowPolicy, RegrowStatus
from mpijob.api.objects import (
    FINISHED_PHASES,
    Obj,
    annotations_of,
    format_time,
    is_terminating,
    labels_of,
    meta,
    name_of,
    parse_time,
    pod_node,
    pod_phase,
    uid_of,
)
from mpijob.api.rules import MAX_REPLICAS
from mpijob.planner.actions import Emit
from mpijob.planner.indexes import new_indexes
from mpijob.planner.snapshot import Snapshot

# A backoff is shortened by up to this fraction (deterministic jitter), never lengthened past its ceiling.
JITTER = 0.2
# The Delete's reason for a probe that timed out (the metrics tell it from other deletes by it).
TIMED_OUT = "regrow probe got no node in time"


def settings(policy: ElasticPolicy) -> RegrowPolicy:
    return policy.regrow or RegrowPolicy()


def applies(snapshot: Snapshot, policy: ElasticPolicy) -> bool:
    """Regrow is on for this job: enabled (the default), ScaleIn, and not managed by Kueue (its admitted count
    rules: no second accounting of quota)."""
    kueue = bool(labels_of(snapshot.job).get(constants.LABEL_KUEUE_QUEUE_NAME))
    return settings(policy).enabled and policy.node_termination_policy is NodeTerminationPolicy.SCALE_IN and not kueue


def is_probe(pod: Obj) -> bool:
    """A probe still looking for a node: created to regrow, not bound yet. It does not count toward replicas."""
    return constants.ANNOTATION_REGROW_PROBE in annotations_of(pod) and pod_node(pod) is None


def _count(value: object) -> int | None:
    """An annotation's count, read strictly (ASCII digits, no sign or leading zero, at most MAX_REPLICAS)."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 6:
        return None
    if len(value) > 1 and value[0] == "0":
        return None
    number = int(value)
    return number if number <= MAX_REPLICAS else None


def read_target(snapshot: Snapshot, policy: ElasticPolicy, replicas: int, *, lowered_from: int | None) -> int:
    """The size to grow back to. The recorded target while replicas are what the operator wrote with it; else
    (nothing recorded, unreadable, or replicas edited by someone) the replicas as they are. `lowered_from`:
    this plan scales in for losses from these replicas, which the target then covers. Never above maxReplicas."""
    recorded = annotations_of(snapshot.job)
    target = _count(recorded.get(constants.ANNOTATION_REGROW_TARGET))
    written = _count(recorded.get(constants.ANNOTATION_REGROW_REPLICAS))
    value = target if target is not None and written == replicas else replicas
    if lowered_from is not None:
        value = max(value, lowered_from)
    return max(replicas, min(value, policy.max_replicas or MAX_REPLICAS))


def counted_probes(countable: Sequence[Obj], replicas: int, target: int) -> int:
    """How many probes that got a node raise Worker replicas now: those beyond the replicas among the workers
    that count (`countable`: not listed, leaving, terminating, finished or held on a cordoned node), never above
    the target. Idempotent: once replicas are raised, the same workers raise nothing."""
    bound = sum(1 for p in countable if constants.ANNOTATION_REGROW_PROBE in annotations_of(p))
    return max(0, min(bound, len(countable) - replicas, target - replicas))


@dataclass(frozen=True)
class Regrow:
    """What regrow decided in one plan."""

    target: int
    replicas: int
    # The MPIJob annotations to write with the spec patch (None: unchanged; a None value removes one).
    annotations: dict[str, str | None] | None
    to_create: tuple[int, ...]
    to_delete: tuple[Obj, ...]
    requeue_after: float | None
    status: RegrowStatus | None
    events: tuple[Emit, ...]
    # The Regrown Event: said by the spec patch that raises Worker replicas back to the target (with the
    # decisions it records), not with the status, so no later write of the batch can lose it.
    raised: tuple[Emit, ...] = ()
    timeout: int = 0
    max_probes: int = 0


def backoff_seconds(config: RegrowPolicy, attempts: int, uid: str) -> float:
    """The wait after `attempts` timed-out rounds in a row: backoffSeconds doubled per further round, at most
    maxBackoffSeconds, shortened by a jitter of up to 20% drawn from the job's uid and the round (jobs that lost
    their nodes together do not all probe at the same moment; the planner stays deterministic)."""
    ceiling = max(config.backoff_seconds, config.max_backoff_seconds)
    base = min(float(ceiling), config.backoff_seconds * 2.0 ** min(max(attempts - 1, 0), 20))
    digest = hashlib.sha256(f"{uid}/{attempts}".encode()).digest()
    fraction = int.from_bytes(digest[:4], "big") / 2**32
    return base * (1.0 - JITTER * fraction)


def _age(pod: Obj, now: datetime) -> float:
    created = parse_time(meta(pod).get("creationTimestamp")) or parse_time(
        annotations_of(pod).get(constants.ANNOTATION_REGROW_PROBE)
    )
    return 0.0 if created is None else (now - created).total_seconds()


def target_annotations(job: Obj, target: int, replicas: int, active: bool) -> dict[str, str | None] | None:
    """The annotations patch that records the target with the replicas (removed at the target), or None."""
    keys = (constants.ANNOTATION_REGROW_TARGET, constants.ANNOTATION_REGROW_REPLICAS)
    want = {keys[0]: str(target), keys[1]: str(replicas)} if active and target > replicas else {}
    have = {k: v for k, v in annotations_of(job).items() if k in keys}
    if want == have:
        return None
    return {k: want.get(k) for k in keys if want.get(k) != have.get(k)}


@dataclass(frozen=True)
class Inputs:
    """What `decide` needs from the other elastic steps."""

    policy: ElasticPolicy
    on: bool  # regrow applies (see `applies`)
    suspended: bool
    target: int
    replicas: int  # Worker replicas after this plan (scale-in for losses, raised for bound probes)
    raised: int  # bound probes counted now
    probes: Sequence[Obj]  # `is_probe` workers
    # The job's own workers are all placed (none Pending without a node, none missing): probing makes sense.
    placed: bool
    taken: Collection[int]  # indexes of all workers and of this plan's other creates
    last_index: int
    previous: JobStatus


def decide(snapshot: Snapshot, inputs: Inputs) -> Regrow:
    """Probes to create and delete, the status and the Events (see the module docstring)."""
    config = settings(inputs.policy)
    now = snapshot.now
    prev = inputs.previous.regrow or RegrowStatus()
    job_name = name_of(snapshot.job)
    pending = sorted(
        (p for p in inputs.probes if not is_terminating(p)),
        key=lambda p: constants.worker_index(job_name, name_of(p)) or 0,
    )
    late = [p for p in pending if pod_phase(p) in FINISHED_PHASES or _age(p, now) >= config.probe_timeout_seconds]
    alive = [p for p in pending if p not in late]
    attempts, last_timed_out = prev.timed_out_attempts or 0, list(prev.last_timed_out)
    next_at = parse_time(prev.next_attempt_time)
    events: list[Emit] = []
    fresh = [name_of(p) for p in late if name_of(p) not in last_timed_out]
    if fresh:
        attempts += 1
        next_at = now + timedelta(seconds=backoff_seconds(config, attempts, uid_of(snapshot.job) or ""))
        last_timed_out = [name_of(p) for p in late]
        message = (
            f"probe workers {', '.join(fresh)} got no node within {config.probe_timeout_seconds}s: deleted; "
            f"next attempt at {format_time(next_at)} (round {attempts} in a row without capacity)"
        )
        events.append(Emit("Normal", "RegrowBackoff", message))
    if inputs.raised:
        attempts, next_at, last_timed_out = 0, None, []  # capacity came back: the backoff is over
    active = inputs.on and not inputs.suspended
    deficit = inputs.target - inputs.replicas if active else 0
    wanted = min(config.max_probes, max(0, deficit))
    excess = alive[wanted:] if len(alive) > wanted else []
    alive = alive[: len(alive) - len(excess)]
    waiting = next_at is not None and next_at > now
    count = 0 if waiting or not inputs.placed else max(0, wanted - len(alive))
    last_used = max([inputs.last_index, *inputs.taken], default=-1)
    blocked = lambda i: _foreign(snapshot, i)  # noqa: E731
    to_create = tuple(new_indexes(count, inputs.taken, blocked, IndexPolicy.APPEND, last_used))
    raised: tuple[Emit, ...] = ()
    if inputs.raised and inputs.replicas >= inputs.target:
        raised = (Emit("Normal", "Regrown", f"back at the target size: Worker replicas {inputs.replicas}"),)
    requeues = [config.probe_timeout_seconds - _age(p, now) for p in alive]
    requeues += [float(config.probe_timeout_seconds)] if to_create else []
    requeues += [(next_at - now).total_seconds()] if waiting and next_at is not None and deficit > 0 else []
    status = _status(inputs, alive, attempts, last_timed_out, next_at if waiting else None, prev)
    return Regrow(
        target=inputs.target,
        replicas=inputs.replicas,
        annotations=target_annotations(snapshot.job, inputs.target, inputs.replicas, inputs.on),
        to_create=to_create,
        to_delete=(*late, *excess),
        requeue_after=min(requeues) if requeues else None,
        status=status,
        events=tuple(events),
        raised=raised,
        timeout=config.probe_timeout_seconds,
        max_probes=config.max_probes,
    )


def _foreign(snapshot: Snapshot, index: int) -> bool:
    pod = snapshot.pods_by_name.get(constants.worker_name(name_of(snapshot.job), index))
    if pod is None:
        return False
    refs = meta(pod).get("ownerReferences") or []
    return not any(r.get("controller") and r.get("uid") == uid_of(snapshot.job) for r in refs)


def _status(
    inputs: Inputs,
    alive: Sequence[Obj],
    attempts: int,
    last_timed_out: list[str],
    next_at: datetime | None,
    prev: RegrowStatus,
) -> RegrowStatus | None:
    """status.regrow: present while the job is below its target, has probes or backs off; None at the target.
    Its message is written by `settle`, once the probes that really go out are known."""
    if not inputs.on or (inputs.replicas >= inputs.target and not alive):
        return None
    if alive:
        reason = "Probing"
    elif next_at is not None:
        reason = "Backoff"
    else:
        reason = "Waiting"
    return RegrowStatus(
        target=inputs.target,
        current=inputs.replicas,
        probes=[name_of(p) for p in alive],
        timed_out_attempts=attempts or None,
        last_timed_out=last_timed_out,
        last_attempt_time=prev.last_attempt_time,
        next_attempt_time=format_time(next_at) if next_at is not None else None,
        reason=reason,
    )


def _message(status: RegrowStatus, decision: Regrow, suspended: bool) -> str:
    if status.probes:
        why = f"probe workers {', '.join(status.probes)} are waiting for a node"
    elif status.reason == "Backoff":
        why = f"no capacity for the last probes; next attempt at {status.next_attempt_time}"
    elif suspended:
        why = "the job is suspended"
    else:
        why = "waiting for the job's own workers to be placed (or the replacement backoff) before probing"
    return (
        f"{why} (target {decision.target}, Worker replicas {decision.replicas}; a probe gets "
        f"{decision.timeout}s to be bound to a node, at most {decision.max_probes} at a time)"
    )


def settle(
    decision: Regrow, created: Sequence[int], job_name: str, now: str, *, suspended: bool
) -> tuple[RegrowStatus | None, list[Emit]]:
    """The status and Events once it is known which probes really go out (the replacement backoff, a foreign
    child or the create budget may hold them back): only those are named, and only they move lastAttemptTime."""
    events = list(decision.events)
    status = decision.status
    if status is None:
        return None, events
    if created:
        names = [constants.worker_name(job_name, i) for i in created]
        status = status.model_copy(
            update={"probes": [*status.probes, *names], "last_attempt_time": now, "reason": "Probing"}
        )
        message = (
            f"created probe workers {', '.join(names)} to grow back to {decision.target} "
            f"(Worker replicas {decision.replicas}); each is deleted if it gets no node within {decision.timeout}s"
        )
        events.append(Emit("Normal", "RegrowProbe", message))
    status = status.model_copy(update={"message": _message(status, decision, suspended)})
    return status, events
