"""What the metrics cost the reconcile loop: `Metrics.applied` (run after every executor batch) and
`Metrics.api_response` (after every API response), as ratios to planning the same job. Pure, no cluster.

    .venv/bin/python bench/metrics_overhead.py [--workers 8] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime.cache import Cache
from mpijob.runtime.metrics import Metrics
from unit.builders import mpijob, snap, worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    job = mpijob(workers=args.workers)
    pods = [worker(job, i) for i in range(args.workers)]
    snapshot = snap(job, pods)
    actions = plan(snapshot)  # a first reconcile: creates, status, events
    cache = Cache()
    for name in Cache.INDEXES:
        cache.indexes[name] = {}
    for pod in pods:
        cache.indexes["pods"][(pod["metadata"]["namespace"], pod["metadata"]["name"])] = [pod]
    metrics = Metrics()
    config = OperatorConfig()
    n = args.rounds
    t_plan = timeit.timeit(lambda: plan(snapshot), number=n) / n
    t_applied = timeit.timeit(lambda: metrics.applied(cache, config, job, actions), number=n) / n
    t_api = timeit.timeit(lambda: metrics.api_response("PATCH", "/api/v1/namespaces/a/pods/p", 200), number=n) / n
    print("| measure | per call | ratio to plan() |\n|---|---|---|")
    print(f"| plan() ({len(actions)} actions) | {t_plan * 1e6:.1f} us | 1 |")
    print(f"| Metrics.applied | {t_applied * 1e6:.1f} us | {t_applied / t_plan:.3f} |")
    print(f"| Metrics.api_response | {t_api * 1e6:.2f} us | {t_api / t_plan:.3f} |")


if __name__ == "__main__":
    main()
