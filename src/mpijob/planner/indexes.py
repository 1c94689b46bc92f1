"""Worker indexes. Gaps are allowed: a surviving worker keeps its name (and so its host name) for life.

FillGaps takes the lowest free index, so a job that shrank and grew again looks like a fresh one.
Append takes indexes above the highest ever used (remembered in status.lastWorkerIndex): Horovod
blacklists a host that failed, and a new worker reusing that host name could be left unused.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from mpijob.api.models import IndexPolicy


def new_indexes(
    count: int, taken: Collection[int], blocked: Callable[[int], bool], policy: IndexPolicy, last_used: int
) -> list[int]:
    """`count` free indexes. `taken`: indexes of this job's existing workers; `blocked(i)`: the name of
    index i is held by someone else's pod; `last_used`: the highest index ever created (-1 for none)."""
    candidate = max([last_used, *taken], default=-1) + 1 if policy is IndexPolicy.APPEND else 0
    chosen: list[int] = []
    while len(chosen) < count:
        if candidate not in taken and not blocked(candidate):
            chosen.append(candidate)
        candidate += 1
    return chosen
