"""What one API request costs the operator's process in CPU: `Client.request` (create, get, merge patch,
delete of a ConfigMap, sequentially, no QPS budget) against the testbed's real API server, as CPU
microseconds per request (`time.process_time`, this process only: the API server is another process),
side by side with the same requests through kubernetes_asyncio's `ApiClient.call_api` (the Client's path
before issue 20's third round), round by round in turn, so the machine's noise falls on both alike.

    .venv/bin/python bench/request_cost.py [--rounds 300] [--state-dir /tmp/request-cost]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from harness import measure_on_testbed, print_table

from mpijob.api.jsoncodec import loads
from mpijob.kube.client import Client
from mpijob.kube.kubeconfig import load_api_client

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


class LibraryPath(Client):
    """The request as the Client made it before: through `call_api` (parameter sanitising, stdlib JSON of the
    body, the library's header and auth handling), the response read and decoded the same way."""

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: Any = None,
        accept: str = "application/json",
        **_: Any,
    ) -> Any:
        self.requests += 1
        raw = await self.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": accept},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        self.clock.observe(raw.headers.get("Date"))
        data = await raw.read()
        if not 200 <= raw.status < 300:
            raise RuntimeError(f"{raw.status} {data[:200]!r}")
        return loads(data) if data else None


async def _round(client: Client, name: str) -> None:
    await client.create(NS_PATH, _config_map(name))
    await client.get(f"{NS_PATH}/{name}")
    await client.merge_patch(f"{NS_PATH}/{name}", {"metadata": {"annotations": {"touched": "yes"}}})
    await client.delete(f"{NS_PATH}/{name}")


async def _timed(client: Client, name: str) -> float:
    cpu = time.process_time()
    await _round(client, name)
    return time.process_time() - cpu


async def measure(kubeconfig: Path, rounds: int) -> dict[str, Any]:
    api = await load_api_client(kubeconfig)
    try:
        paths = {"client": Client(api, qps=0), "call_api": LibraryPath(api, qps=0)}
        cpu = dict.fromkeys(paths, 0.0)
        for i in range(20):  # warm-up: connections, TLS sessions, imports
            for label, client in paths.items():
                await _round(client, f"warm-{label.replace('_', '-')}-{i}")
        before = {label: client.requests for label, client in paths.items()}
        for i in range(rounds):
            for label, client in paths.items():
                cpu[label] += await _timed(client, f"cost-{label.replace('_', '-')}-{i}")
        per = {label: 1e6 * cpu[label] / (client.requests - before[label]) for label, client in paths.items()}
    finally:
        await api.close()
    return {
        "requests_each": 4 * rounds,
        "cpu_us_per_request_client": per["client"],
        "cpu_us_per_request_call_api": per["call_api"],
        "client_over_call_api": per["client"] / per["call_api"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--state-dir", default="/tmp/request-cost")
    args = parser.parse_args()
    _, measures = measure_on_testbed(args.state_dir, "request_cost", lambda kc: measure(kc, args.rounds))
    print_table(measures)


if __name__ == "__main__":
    main()
