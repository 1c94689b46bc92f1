"""How long one plan blocks the event loop at the schema's limits (issue 8, rule 4).

    .venv/bin/python bench/plan_worst_case.py

Elastic job with N Running workers, steady state, and status.lastWorkerIndex at its largest accepted value
(99,999: the foreign-name scan runs up to it); static job at creation (slow start creates 16).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mpijob.planner.plan import plan
from unit.builders import elastic, existing_children, mpijob, running_status, snap, worker


def main() -> None:
    for n in (100, 1000, 10_000):
        job = mpijob(workers=n, elastic_policy=elastic(1, 10_000), status=running_status())
        job["status"]["lastWorkerIndex"] = 99_999
        pods = [worker(job, i, node=f"node-{i % 50}") for i in range(n)]
        steady = snap(job, pods, **existing_children(job))
        started = time.perf_counter()
        plan(steady)
        elastic_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        plan(snap(mpijob(workers=n)))
        static_ms = (time.perf_counter() - started) * 1000
        print(f"{n:>6} workers: elastic steady plan {elastic_ms:6.0f} ms; static first plan {static_ms:5.0f} ms")


if __name__ == "__main__":
    main()
