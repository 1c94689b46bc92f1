"""Restart mode (`elasticPolicy.mode: Restart`): elastic for MPI programs that cannot change size while running.

The launcher runs the user's command under `mpijob-run` (mpijob_run.sh beside this module), which restarts
the MPI run whenever the job's discovery list changes. So the discovery list is the run's host set, and
this module decides only two things about it:
- `hold_growth`: which Ready newcomers stay out of the list. At the job's start, everyone until no peer bound
  to a node is still starting (bounded by START_HOLD_SECONDS) and at least minReplicas are Ready: the first
  run starts at full size, not one worker at a time. Later, newcomers (a regrow) wait until
  `restart.minIntervalSeconds` has passed since the last restart, then join in one change. Leaving workers
  are never held: a scale-in restarts the run at once, within their deadline.
- `note_restart`: a list change while a run goes on is a restart: counted in `status.restarts` with its cause
  and size, and announced by a `Restarted` Event, with the status write that records the new list.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

from mpijob.api.models import ElasticMode, ElasticPolicy, JobStatus, RestartOptions, RestartStatus
from mpijob.api.objects import Obj, condition, name_of, parse_time, pod_node, pod_ready
from mpijob.planner.actions import Emit

# The supervisor the launcher's command runs under (ConfigMap key RUN_SCRIPT_KEY).
RUN_SCRIPT = resources.files(__package__).joinpath("mpijob_run.sh").read_text(encoding="utf-8")
# How long the first run waits for workers that are bound to a node and still starting (pulling, booting).
START_HOLD_SECONDS = 120.0
SCALE_IN, REGROW = "scale-in", "regrow"


def applies(policy: ElasticPolicy | None) -> bool:
    return policy is not None and policy.mode is ElasticMode.RESTART


@dataclass(frozen=True)
class Held:
    names: tuple[str, ...] = ()
    # Seconds until the hold may end (the job is requeued then), or None.
    requeue_after: float | None = None


def _ready_since(pod: Obj) -> datetime | None:
    ready = condition(pod, "Ready")
    return parse_time(ready.get("lastTransitionTime")) if ready else None


def hold_growth(
    policy: ElasticPolicy,
    ready: Sequence[Obj],
    others: Sequence[Obj],
    listed: Collection[str],
    status: JobStatus,
    now: datetime,
) -> Held:
    """The Ready workers (`ready`, the candidates for discovery) kept out of this listing. `others`: the job's
    other kept workers (not Ready); `listed`: the names our list holds now; `status`: the last status."""
    newcomers = [p for p in ready if name_of(p) not in listed]
    if not newcomers:
        return Held()
    if not listed:
        return _hold_start(policy, newcomers, others, now)
    options = policy.restart or RestartOptions()
    last = parse_time((status.restarts.last_time if status.restarts else None) or status.start_time)
    left = options.min_interval_seconds - (now - last).total_seconds() if last else 0.0
    if left > 0:
        return Held(tuple(name_of(p) for p in newcomers), left)
    # Past the interval: still one change for a round, as at the start (peers bound and starting).
    return _hold_start(policy, newcomers, others, now, floor=0)


def _hold_start(
    policy: ElasticPolicy, newcomers: Sequence[Obj], others: Sequence[Obj], now: datetime, floor: int | None = None
) -> Held:
    starting = [p for p in others if pod_node(p) is not None and not pod_ready(p)]
    times = [t for t in (_ready_since(p) for p in newcomers) if t is not None]
    waited = (now - min(times)).total_seconds() if times else 0.0
    enough = len(newcomers) >= (policy.min_replicas if floor is None else floor)
    if enough and (not starting or waited >= START_HOLD_SECONDS):
        return Held()
    names = tuple(name_of(p) for p in newcomers)
    # Below minReplicas nothing runs; the next pod event brings the next look.
    return Held(names, START_HOLD_SECONDS - waited if enough else None)


def note_restart(
    previous: JobStatus, before: Sequence[str], after: Sequence[str], running: bool, now: str
) -> tuple[RestartStatus | None, Emit | None]:
    """A change of the listed workers while a launcher runs with a list: the run restarts. Returns the new
    `status.restarts` and its Event, or (the status as it was, None) when this is no restart."""
    if not running or not before or set(before) == set(after):
        return previous.restarts, None
    gone = sorted(set(before) - set(after))
    cause = SCALE_IN if gone else REGROW
    count = (previous.restarts.count if previous.restarts else 0) + 1
    restarts = RestartStatus(count=count, last_cause=cause, last_workers=len(after), last_time=now)
    why = f"{', '.join(gone)} left" if gone else f"{', '.join(sorted(set(after) - set(before)))} joined"
    message = f"{cause}: the MPI run restarts on {len(after)} workers (was {len(before)}; {why})"
    return restarts, Emit("Normal", "Restarted", message)
