"""What the client's token bucket costs in CPU while Events wait in it: `--events` Events (rank 1) queued on
a spent budget, then `--takes` work requests (rank 0) taken by 4 concurrent takers at `--qps` (the budget is
the limit, as in a ramp of creates), timed as this process's CPU (`time.process_time`). Run it in two
worktrees to compare two versions of `kube/client.py:TokenBucket`; no testbed needed.

    .venv/bin/python bench/token_bucket_cost.py [--events 500] [--takes 7000] [--qps 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from mpijob.kube.client import TokenBucket

TAKERS = 4


async def one_round(events: int, takes: int, qps: float) -> float:
    bucket = TokenBucket(qps=qps, burst=100)
    bucket.tokens = 0.0  # Events find the budget spent and wait (behind the work, or for a reserve)
    waiting = [asyncio.create_task(bucket.take(1)) for _ in range(events)]
    await asyncio.sleep(0)

    async def taker() -> None:
        for _ in range(takes // TAKERS):
            await bucket.take(0)

    started = time.process_time()
    await asyncio.gather(*(taker() for _ in range(TAKERS)))
    spent = time.process_time() - started
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--takes", type=int, default=7000)
    parser.add_argument("--qps", type=float, default=2000.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rounds = [asyncio.run(one_round(args.events, args.takes, args.qps)) for _ in range(args.repeat)]
    print(
        f"{args.takes} takes with {args.events} Events waiting: CPU median {statistics.median(rounds):.3f} s, "
        f"min {min(rounds):.3f} s over {args.repeat} rounds"
    )


if __name__ == "__main__":
    main()
