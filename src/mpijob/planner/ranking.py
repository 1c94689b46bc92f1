"""Which workers go first when an elastic job has more workers than it wants.

Order (first = removed first), following the ReplicaSet ranking where it applies:
1. listed in elasticPolicy.workersToDelete (handled before ranking: always removed);
2. not yet scheduled, then Pending, Failed or Unknown, before Running;
3. on a node with a termination signal;
4. not Ready;
5. lower `controller.kubernetes.io/pod-deletion-cost`;
6. more workers of this job on the same node (spreads the survivors);
7. higher index.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from mpijob.api.constants import ANNOTATION_DELETION_COST
from mpijob.planner.snapshot import Obj, annotations_of, pod_node, pod_phase, pod_ready

_PHASE_RANK = {"Pending": 0, "Failed": 0, "Unknown": 0, "Succeeded": 0, "Running": 1}


def deletion_cost(pod: Obj) -> int:
    raw = annotations_of(pod).get(ANNOTATION_DELETION_COST)
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return 0
    return max(-(2**31), min(2**31 - 1, value))


def rank_victims(
    workers: Sequence[Obj], index_of: Callable[[Obj], int], node_terminating: Callable[[str], bool]
) -> list[Obj]:
    """Workers sorted so that the first ones are the best to remove."""
    per_node = Counter(pod_node(p) for p in workers if pod_node(p))

    def key(pod: Obj) -> tuple[int, int, int, int, int, int, int]:
        node = pod_node(pod)
        return (
            0 if node is None else 1,
            _PHASE_RANK.get(pod_phase(pod), 0),
            0 if node is not None and node_terminating(node) else 1,
            1 if pod_ready(pod) else 0,
            deletion_cost(pod),
            -per_node[node] if node else 0,
            -index_of(pod),
        )

    return sorted(workers, key=key)
