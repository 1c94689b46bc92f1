"""How long one plan blocks the event loop at the schema's limits (issue 8, rule 4).

    .venv/bin/python bench/plan_worst_case.py [--repeat 5] [--sizes 100,1000,10000]

Elastic job with N Running workers, steady state, and status.lastWorkerIndex at its largest accepted value
(99,999: the foreign-name scan runs up to it); the same job the moment every worker has failed (all leave
discovery in one plan, which marks and deletes the first 500); static job at creation (slow start creates
16). Each number is the best of --repeat plans of the same snapshot (the least disturbed by the other work
of a shared machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Snapshot
from unit.builders import elastic, existing_children, mpijob, running_status, snap, worker


def best_ms(snapshot: Snapshot, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        plan(snapshot)
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="plans per number; the best is printed")
    parser.add_argument("--sizes", default="100,1000,10000", help="worker counts, comma-separated")
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        job = mpijob(workers=n, elastic_policy=elastic(1, 10_000), status=running_status())
        job["status"]["lastWorkerIndex"] = 99_999
        pods = [worker(job, i, node=f"node-{i % 50}") for i in range(n)]
        steady = snap(job, pods, **existing_children(job))
        elastic_ms = best_ms(steady, args.repeat)
        failed = [worker(job, i, node=f"node-{i % 50}", phase="Failed") for i in range(n)]
        failed_ms = best_ms(snap(job, failed, **existing_children(job)), args.repeat)
        fresh = snap(mpijob(workers=n))
        static_ms = best_ms(fresh, args.repeat)
        print(
            f"{n:>6} workers: elastic steady plan {elastic_ms:6.0f} ms; all failed {failed_ms:6.0f} ms;"
            f" static first plan {static_ms:5.0f} ms (best of {args.repeat})"
        )


if __name__ == "__main__":
    main()
