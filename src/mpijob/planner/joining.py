"""Newcomers join discovery together: workers created together (a regrow round, a scale-out) are listed in one
change of the launcher's host list rather than one by one as each turns Ready.

Why: Horovod 0.28.1's elastic driver notifies the ranks of each host change, and a rank that is still resetting
for the previous change replaces its queue of host updates (`State.on_reset()`), dropping the second
notification; nothing is sent again until the host set changes once more. Two newcomers Ready a second apart
were listed in two changes and the job stayed at size 3 of 4 for minutes (docs/results.md, "Regrow
under Horovod"). So a newcomer that is Ready is held back while a peer created with it is bound to a
node and still starting, for at most HOLD_SECONDS after it turned Ready: a slow or broken peer delays its
round by that bound, never more, and a peer with no node (no capacity) holds nothing back.

Only ever additions: a listed host is never held back (that would read as the host leaving), nor is anything
while the current listing is unknown, nor at a job's start (no host listed yet: Horovod waits for its first
`-np` hosts anyway)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from mpijob.api.objects import Obj, condition, is_terminating, meta, name_of, parse_time, pod_node, pod_phase, pod_ready

# How long a Ready newcomer may wait for the peers of its round (measured: two probes bound on one node were
# Ready 1.4 s apart; a peer on another node pulls nothing, the images are the same).
HOLD_SECONDS = 10.0
# Workers created within this of each other are one round (the planner creates a round in one reconcile).
ROUND_SECONDS = 5.0


@dataclass(frozen=True)
class Joining:
    held: tuple[str, ...] = ()
    # Seconds until the first hold expires (the job is requeued then), or None.
    requeue_after: float | None = None


def _created(pod: Obj) -> datetime | None:
    return parse_time(meta(pod).get("creationTimestamp"))


def _ready_since(pod: Obj) -> datetime | None:
    ready = condition(pod, "Ready")
    return parse_time(ready.get("lastTransitionTime")) if ready else None


def _starting(pod: Obj) -> bool:
    """Bound to a node and on its way to Ready: a peer worth waiting for."""
    return (
        pod_node(pod) is not None
        and pod_phase(pod) in ("Pending", "Running")
        and not is_terminating(pod)
        and not pod_ready(pod)
    )


def hold_back(ready: Sequence[Obj], others: Sequence[Obj], listed: Collection[str] | None, now: datetime) -> Joining:
    """Which of the `ready` workers (the candidates for discovery) to keep out of this listing. `others` are
    the job's other kept workers, `listed` the names the launcher's list holds now (None: unknown)."""
    if not listed:
        return Joining()
    starting = [c for c in (_created(p) for p in others if _starting(p)) if c is not None]
    held: list[str] = []
    remaining: list[float] = []
    for pod in ready:
        if name_of(pod) in listed:
            continue
        created, since = _created(pod), _ready_since(pod)
        if created is None or since is None:
            continue  # unreadable times: list it (a hold must be bounded)
        left = HOLD_SECONDS - (now - since).total_seconds()
        if left > 0 and any(abs((created - c).total_seconds()) <= ROUND_SECONDS for c in starting):
            held.append(name_of(pod))
            remaining.append(left)
    return Joining(tuple(held), min(remaining) if remaining else None)
