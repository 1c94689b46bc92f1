"""What the operator's event loop costs per API request: the same requests (create, get, merge patch, delete
of a ConfigMap, `concurrency` at a time, no QPS budget) through the operator's `Client` against the testbed's
real API server, on uvloop and on the standard asyncio loop, block by block in turn (so the machine's noise
falls on both alike), as CPU microseconds per request of this process (`time.process_time`; the API server
is another process). Why the operator runs on uvloop by default: docs/design.md, "Dependencies and why".

    .venv/bin/python bench/event_loop_cost.py [--blocks 6] [--rounds 250] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop
from harness import print_table, report_header, testbed_with_crd
from request_cost import _round

from mpijob.kube.client import Client
from mpijob.kube.kubeconfig import load_api_client

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


async def _block(kubeconfig: Path, label: str, rounds: int, concurrency: int) -> tuple[float, int]:
    """CPU seconds and requests of `rounds` rounds on one fresh client (its connections and TLS on this loop),
    after a short warm-up."""
    api = await load_api_client(kubeconfig)
    client = Client(api, qps=0)
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        async with gate:
            await _round(client, name)

    try:
        stamp = time.monotonic_ns()
        await asyncio.gather(*(one(f"warm-{label}-{stamp}-{i}") for i in range(2 * concurrency)))
        before, cpu = client.requests, time.process_time()
        await asyncio.gather(*(one(f"cost-{label}-{stamp}-{i}") for i in range(rounds)))
        return time.process_time() - cpu, client.requests - before
    finally:
        await api.close()


def measure(kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    cpu = dict.fromkeys(LOOPS, 0.0)
    requests = dict.fromkeys(LOOPS, 0)
    for _ in range(args.blocks):
        for label, factory in LOOPS.items():
            with asyncio.Runner(loop_factory=factory) as runner:
                seconds, count = runner.run(_block(kubeconfig, label, args.rounds, args.concurrency))
            cpu[label] += seconds
            requests[label] += count
    per = {label: 1e6 * cpu[label] / requests[label] for label in LOOPS}
    return {
        "requests_each": requests["uvloop"],
        "concurrency": args.concurrency,
        "cpu_us_per_request_uvloop": per["uvloop"],
        "cpu_us_per_request_asyncio": per["asyncio"],
        "uvloop_over_asyncio": per["uvloop"] / per["asyncio"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=6, help="blocks per loop, alternating")
    parser.add_argument("--rounds", type=int, default=250, help="rounds of 4 requests per block")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--state-dir", default="/tmp/event-loop-cost")
    args = parser.parse_args()
    report = report_header()
    with testbed_with_crd(args.state_dir, 0) as kubeconfig:
        measures = measure(kubeconfig, args)
    print_table(measures)
    print(f"\ncommand: {report['command']}  ({report['when']}, Python {report['python']})")


if __name__ == "__main__":
    main()
