"""Side by side: how often a client that creates an MPIJob suspended and then updates the object its create
returned meets a 409, because the operator wrote the job in between. It is the reference's e2e suite's
"suspended on creation" sequence (create, list the namespace's pods, Update with suspend false, no retry),
repeated, against each operator on a fresh one-node testbed with compare.py's client settings (QPS 50,
burst 100, 4 workers, leader election on).

    .venv/bin/python bench/create_then_update.py                    # 30 trials a side, one per second
    .venv/bin/python bench/create_then_update.py --spacing 5 --trials 12
    .venv/bin/python bench/create_then_update.py --only mpijob

Prints per side: the conflicts, and the create -> Update window the client left (median and max).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from compare import (
    NAMESPACE,
    WORK,
    Side,
    install_crd,
    manifest,
    mpijob_side,
    reference_side,
    say,
    wait_lease,
)

from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import load_api_client
from mpijob_testbed import cluster


async def trial(client: Client, name: str) -> tuple[bool, float]:
    """One create -> list -> Update; (whether the Update met a 409, seconds from create sent to Update sent)."""
    job = manifest(name, 1)
    job["spec"]["runPolicy"] = {"suspend": True}
    jobs = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"
    start = time.monotonic()
    created = await client.create(jobs, job)
    await client.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
    resumed = copy.deepcopy(created)
    resumed["spec"]["runPolicy"]["suspend"] = False
    window = time.monotonic() - start
    try:
        await client.request("PUT", f"{jobs}/{name}", resumed)
    except ApiError as err:
        if err.status != 409:
            raise
        return True, window
    return False, window


async def measure(side: Side, kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    client = Client(await load_api_client(str(kubeconfig)), qps=0, burst=1)
    await install_crd(client, side.crd())
    for ns in (NAMESPACE, side.lease[0]):
        await client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    log = WORK / f"{side.name.split()[0]}-create-then-update.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(side.argv(kubeconfig), stdout=log_file, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    try:
        await wait_lease(client, *side.lease)
        await asyncio.sleep(3.0)  # caches filled
        results = []
        for i in range(args.trials):
            results.append(await trial(client, f"job-{i}"))
            await asyncio.sleep(args.spacing)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    windows = [w * 1000 for _, w in results]
    return {
        "operator": side.name,
        "conflicts": sum(1 for conflict, _ in results if conflict),
        "trials": len(results),
        "window_ms_median": statistics.median(windows),
        "window_ms_max": max(windows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--spacing", type=float, default=1.0, help="seconds between trials")
    parser.add_argument("--only", choices=("mpijob", "reference"))
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    sides = [s for s in (reference_side(), mpijob_side()) if args.only in (None, s.name.split()[0])]
    print("| operator | 409s / trials | create -> Update window, median / max ms |\n|---|---|---|")
    for side in sides:
        state = WORK / f"testbed-{side.name.split()[0]}-ctu"
        if cluster.status(state).exists:
            cluster.down(state, echo=say)
        testbed = cluster.up(1, state, echo=say)
        try:
            r = asyncio.run(measure(side, testbed.kubeconfig, args))
        finally:
            cluster.down(state, echo=say)
        window = f"{r['window_ms_median']:.0f} / {r['window_ms_max']:.0f}"
        print(f"| {r['operator']} | {r['conflicts']} / {r['trials']} | {window} |", flush=True)
    print(f"\ncommand: .venv/bin/python bench/{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
