"""Seeded chaos (issue 8): the operator is SIGKILLed at random points while an elastic job goes through
targeted scale-ins, node terminations and scale-outs. After every step:

- no pod was deleted that the rules did not pick (exactly the listed worker, exactly the workers of the
  terminated node, nothing on a scale-out);
- no index is held twice (the replica-index label of every live worker matches its name, all distinct);
- no double decrement (replicas after a node termination = max(minReplicas, before - its workers));
- the job converges: replicas live Running workers, all in discover_hosts.sh, workersToDelete empty.

`.ci/run` runs a short seeded run (MPIJOB_CHAOS_STEPS, default 6); `make chaos` runs a long one.
MPIJOB_CHAOS_SEED picks the seed (printed on failure, so a failing run can be replayed).
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest
from kube import Kube, eventually, live
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess
from test_elastic import elastic_job, listed_of, node_of, own_nodes, phase, replicas_of, run_discovery, start_job

from mpijob.api import constants as c
from mpijob.testbed import taint_node
from mpijob.testbed.nodes import untaint_node

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
STEPS = int(os.environ.get("MPIJOB_CHAOS_STEPS", "6"))
SEED = int(os.environ.get("MPIJOB_CHAOS_SEED", "20261130"))
MIN, MAX = 2, 6


def _index_ok(job: str, pods: list[Obj]) -> None:
    indexes = [c.worker_index(job, p["metadata"]["name"]) for p in pods]
    assert None not in indexes and len(set(indexes)) == len(indexes), indexes
    for pod, index in zip(pods, indexes, strict=True):
        assert (pod["metadata"].get("labels") or {}).get(c.LABEL_REPLICA_INDEX) == str(index), pod["metadata"]


async def _converged(kube: Kube, job: str, replicas: int, leaving: set[str]) -> list[Obj]:
    """Waits for the end state; `leaving`: uids the step must remove (until they are gone, the job has not
    reacted yet, even if the counts already match)."""

    async def done() -> list[Obj] | None:
        body = await kube.job(job)
        pods = live(await kube.workers(job))
        if leaving & {p["metadata"]["uid"] for p in await kube.workers(job)}:
            return None
        if replicas_of(body) != replicas or listed_of(body):
            return None
        if len(pods) != replicas or any(phase(p) != "Running" for p in pods):
            return None
        if len(await kube.workers(job)) != replicas:  # nobody left terminating
            return None
        if await run_discovery(kube, job) != sorted(p["metadata"]["name"] for p in pods):
            return None
        return pods

    return await eventually(done, within=180, interval=0.3, what=f"{job} converged at {replicas} workers")


async def test_seeded_operator_kills_across_scale_in_node_termination_and_scale_out(
    kube: Kube, api: ApiClient, running_operator: OperatorProcess
) -> None:
    rng = random.Random(SEED)
    job = "chaos"
    kills = 0
    async with own_nodes(api, kube, "a", "b", "c", spot=("b", "c")) as nodes:
        pods = await start_job(kube, elastic_job(job, nodes, workers=4, min_replicas=MIN, max_replicas=MAX, grace=1))
        replicas = 4
        tainted: str | None = None
        for step in range(STEPS):
            before = {p["metadata"]["name"]: p for p in pods}
            choices = ["scale-out"] if replicas < MAX else []
            if replicas > MIN:
                choices.append("scale-in")
            on_spot = [n for n in nodes[1:] if n != tainted and any(node_of(p) == n for p in pods)]
            if on_spot and tainted is None:
                choices.append("terminate")
            if tainted is not None:
                choices.append("recover")
            what = rng.choice(choices)
            expected_gone: set[str] = set()
            if what == "scale-in":
                victim = rng.choice(sorted(before))
                expected_gone = {victim}
                replicas -= 1
                await kube.patch_job(
                    job,
                    {
                        "spec": {
                            "mpiReplicaSpecs": {"Worker": {"replicas": replicas}},
                            "elasticPolicy": {"workersToDelete": [victim]},
                        }
                    },
                )
            elif what == "scale-out":
                replicas += 1
                await kube.patch_job(job, {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": replicas}}}})
            elif what == "terminate":
                tainted = rng.choice(on_spot)
                expected_gone = {n for n, p in before.items() if node_of(p) == tainted}
                replicas = max(MIN, replicas - len(expected_gone))
                await taint_node(api, tainted)
            else:
                assert tainted is not None
                await untaint_node(api, tainted)
                tainted = None
            # The crash point: anywhere from before the operator saw the change to the middle of acting on it.
            if rng.random() < 0.8:
                await asyncio.sleep(rng.uniform(0, 0.6))
                running_operator.stop(kill=True)
                kills += 1
                await asyncio.sleep(rng.uniform(0, 0.3))
                running_operator.start()
            context = f"seed {SEED} step {step} ({what}), kills so far {kills}"
            try:
                pods = await _converged(kube, job, replicas, {before[n]["metadata"]["uid"] for n in expected_gone})
            except AssertionError as err:
                raise AssertionError(f"{context}: {err}\n{running_operator.log_tail()}") from None
            after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
            gone = {n for n, p in before.items() if after.get(n) != p["metadata"]["uid"]}
            assert gone == expected_gone, f"{context}: deleted {sorted(gone)}, the rules picked {sorted(expected_gone)}"
            _index_ok(job, pods)
            if tainted is not None:
                assert not [p for p in pods if node_of(p) == tainted], context
    print(f"chaos: seed {SEED}, {STEPS} steps, {kills} operator SIGKILLs")
