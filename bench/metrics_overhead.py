"""What the metrics cost the reconcile loop: `Metrics.applied` (run after every executor batch) and
`Metrics.api_response` (after every API response), as ratios to planning the same job; and one scrape of
the gauges read from the cache (jobs by state, worker pods, jobs below minReplicas) with `--jobs` jobs of
`--workers` workers cached. Pure, no cluster.

    .venv/bin/python bench/metrics_overhead.py [--workers 8] [--rounds 2000] [--jobs 500]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mpijob.app.metrics import Metrics, _CacheCollector, _JobStateCollector
from mpijob.planner.plan import plan
from mpijob.runtime.cache import Cache
from unit.builders import mpijob, snap, worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=500)
    args = parser.parse_args()
    job = mpijob(workers=args.workers)
    pods = [worker(job, i) for i in range(args.workers)]
    snapshot = snap(job, pods)
    actions = plan(snapshot)  # a first reconcile: creates, status, events
    cache = Cache()
    for name in Cache.INDEXES:
        cache.indexes[name] = {}
    for pod in pods:
        cache.indexes["pods"][(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    metrics = Metrics()
    n = args.rounds
    t_plan = timeit.timeit(lambda: plan(snapshot), number=n) / n
    t_applied = timeit.timeit(lambda: metrics.applied(cache, job, actions), number=n) / n
    t_api = timeit.timeit(lambda: metrics.api_response("PATCH", "/api/v1/namespaces/a/pods/p", 200), number=n) / n
    print("| measure | per call | ratio to plan() |\n|---|---|---|")
    print(f"| plan() ({len(actions)} actions) | {t_plan * 1e6:.1f} us | 1 |")
    print(f"| Metrics.applied | {t_applied * 1e6:.1f} us | {t_applied / t_plan:.3f} |")
    print(f"| Metrics.api_response | {t_api * 1e6:.2f} us | {t_api / t_plan:.3f} |")
    # A scrape: every job's status and every pod read once, as the collectors do at scrape time.
    running = {
        **job,
        "status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]},
    }
    for i in range(args.jobs):
        cache.indexes["mpijobs"][("ns", f"j{i}")] = running
        for k, pod in enumerate(pods):
            cache.indexes["pods"][("ns", f"j{i}-worker-{k}")] = pod
    collectors = (_CacheCollector(cache), _JobStateCollector(cache))
    scrapes = max(1, n // 100)
    t_scrape = timeit.timeit(lambda: [list(col.collect()) for col in collectors], number=scrapes) / scrapes
    print(
        f"| one scrape of the cache gauges ({args.jobs} jobs, {args.jobs * args.workers} worker pods) "
        f"| {t_scrape * 1e3:.1f} ms | {t_scrape / t_plan:.0f} |"
    )


if __name__ == "__main__":
    main()
