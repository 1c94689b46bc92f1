"""What one API request costs the operator's process in CPU: `Client.request` (create, get, merge patch,
delete of a ConfigMap, sequentially, no QPS budget) against the testbed's real API server, as CPU
microseconds per request (`time.process_time`, this process only: the API server is another process).

    .venv/bin/python bench/request_cost.py [--rounds 300] [--state-dir /tmp/request-cost]

Run it on two checkouts (e.g. `PYTHONPATH=/path/to/other/src`) to compare request paths; the ratio is what
counts on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from harness import measure_on_testbed, print_table

from mpijob.executor.client import Client
from mpijob.executor.kubeconfig import load_api_client

NS_PATH = "/api/v1/namespaces/default/configmaps"


def _config_map(name: str) -> dict[str, Any]:
    # About the size of a discovery ConfigMap of an 8-worker job.
    hosts = "".join(f"echo job-worker-{i}.job.default.svc:1\n" for i in range(8))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "request-cost"}},
        "data": {"discover_hosts.sh": "#!/bin/sh\n" + hosts, "hostfile": "job-worker-0 slots=1\n" * 8},
    }


async def _round(client: Client, name: str) -> None:
    await client.create(NS_PATH, _config_map(name))
    await client.get(f"{NS_PATH}/{name}")
    await client.merge_patch(f"{NS_PATH}/{name}", {"metadata": {"annotations": {"touched": "yes"}}})
    await client.delete(f"{NS_PATH}/{name}")


async def measure(kubeconfig: Path, rounds: int) -> dict[str, Any]:
    api = await load_api_client(kubeconfig)
    try:
        client = Client(api, qps=0)
        for i in range(20):  # warm-up: connections, TLS sessions, imports
            await _round(client, f"warm-{i}")
        before = client.requests
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(rounds):
            await _round(client, f"cost-{i}")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        n = client.requests - before
    finally:
        await api.close()
    return {"requests": n, "cpu_us_per_request": 1e6 * cpu / n, "wall_ms_per_request": 1e3 * wall / n}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--state-dir", default="/tmp/request-cost")
    args = parser.parse_args()
    _, measures = measure_on_testbed(args.state_dir, "request_cost", lambda kc: measure(kc, args.rounds))
    print_table(measures)


if __name__ == "__main__":
    main()
