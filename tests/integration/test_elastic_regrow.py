"""Regrow on the testbed (issue 19), with the real operator process, API server, scheduler and kwok nodes: a job
shrunk by a spot taint grows back to its target once a new node is Ready (seen in the launcher's own
discover_hosts.sh), probes never wait for a node longer than their timeout nor more than maxProbes at once while
there is no capacity, and a manual scale-in is never undone.

Each worker needs a node of its own (required pod anti-affinity on the hostname), so "no capacity" is real: the
healthy node already runs a worker of the job and the tainted ones are unschedulable for the scheduler."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from elastic_jobs import (
    SPREAD_LABEL,
    elastic_job,
    own_nodes,
    phase,
    pod_recorder,
    replicas_of,
    run_discovery,
    start_job,
    wait_gone,
    wait_job,
)
from kube import Kube, eventually, has_condition, live, names
from kubernetes_asyncio.client import ApiClient

from mpijob.api import constants as c
from mpijob.cli.elastic import scale_in
from mpijob_testbed import SPOT_ITN_TAINT, delete_node, taint_node

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
TIMEOUT = 10
MAX_PROBES = 2
REGROW = {"maxProbes": MAX_PROBES, "probeTimeoutSeconds": TIMEOUT, "backoffSeconds": 2, "maxBackoffSeconds": 8}
# A probe's deletion is due at its timeout; the operator looks again then (RequeueAfter) and deletes it.
DELETE_SLACK = 3.0


def node_name(kube: Kube, suffix: str) -> str:
    return f"e2e-{kube.ns.rsplit('-', 1)[-1]}-{suffix}"


def one_worker_per_node(name: str, nodes: list[str], workers: int, **kw: Any) -> Obj:
    """elastic_job, with each worker on a node of its own among `nodes` (names of nodes to come included)."""
    body = elastic_job(name, nodes, workers=workers, min_replicas=1, grace=1, **kw)
    spec = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec.pop("topologySpreadConstraints", None)
    spec["affinity"]["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {SPREAD_LABEL: name}}}
        ]
    }
    return body


def is_probe(pod: Obj) -> bool:
    return c.ANNOTATION_REGROW_PROBE in (pod["metadata"].get("annotations") or {})


def regrow_annotations(job: Obj) -> dict[str, str]:
    return {k: v for k, v in (job["metadata"].get("annotations") or {}).items() if "regrow" in k}


def probe_history(events: list[tuple[float, str, Obj]]) -> tuple[int, dict[str, tuple[float, float | None]]]:
    """From a pod watch: the most probes waiting for a node at any moment, and each probe's (added, gone) times
    on the monotonic clock (gone: deleted, or bound to a node: no longer waiting)."""
    waiting: set[str] = set()
    most = 0
    life: dict[str, tuple[float, float | None]] = {}
    for at, kind, pod in events:
        name = pod["metadata"]["name"]
        if not is_probe(pod):
            continue
        if kind == "ADDED":
            life[name] = (at, None)
        unbound = not (pod.get("spec") or {}).get("nodeName")
        if kind != "DELETED" and unbound and not pod["metadata"].get("deletionTimestamp"):
            waiting.add(name)
        else:
            waiting.discard(name)
            if name in life and life[name][1] is None:
                life[name] = (life[name][0], at)
        most = max(most, len(waiting))
    return most, life


async def test_spot_taint_shrinks_then_a_new_node_brings_the_job_back_to_its_target_with_bounded_probes(
    kube: Kube, api: ApiClient
) -> None:
    job = "regrow"
    later = [node_name(kube, "d"), node_name(kube, "e")]
    async with own_nodes(api, kube, "a", "b", "c", spot=("b", "c")) as (node_a, node_b, node_c):
        body = one_worker_per_node(job, [node_a, node_b, node_c, *later], 3, regrow=REGROW)
        pods = await start_job(kube, body)
        before = set(names(pods))

        async with pod_recorder(api, kube) as pod_watch:
            await taint_node(api, node_b, SPOT_ITN_TAINT, effect="NoSchedule")
            await taint_node(api, node_c, SPOT_ITN_TAINT, effect="NoSchedule")
            shrunk = await wait_job(kube, job, lambda j: replicas_of(j) == 1, "replicas 3 -> 1")
            assert regrow_annotations(shrunk) == {c.ANNOTATION_REGROW_TARGET: "3", c.ANNOTATION_REGROW_REPLICAS: "1"}
            await wait_gone(
                kube, job, [n for n, p in zip(names(pods), pods, strict=True) if p["spec"]["nodeName"] != node_a]
            )
            await delete_node(api, node_b)
            await delete_node(api, node_c)
            # No capacity: long enough for several probe rounds and their backoff.
            await asyncio.sleep(4 * TIMEOUT)
            dry = time.monotonic()
            job_obj = await kube.job(job)
            assert replicas_of(job_obj) == 1
            status = job_obj["status"]["regrow"]
            assert status["target"] == 3 and status["current"] == 1, status
            assert status.get("timedOutAttempts", 0) >= 2, status

            async with own_nodes(api, kube, "d", "e", spot=()):
                back = await wait_job(kube, job, lambda j: replicas_of(j) == 3, "back to 3 workers", within=120)

                async def serving() -> list[Obj] | None:
                    workers = live(await kube.workers(job))
                    ok = len(workers) == 3 and all(phase(p) == "Running" for p in workers)
                    return workers if ok else None

                workers = await eventually(serving, within=60, what="3 Running workers")

                async def discovered() -> bool:
                    return await run_discovery(kube, job) == sorted(names(workers))

                await eventually(discovered, within=60, what="the launcher's discover_hosts.sh lists all 3")
                final = await wait_job(
                    kube, job, lambda j: "regrow" not in (j.get("status") or {}), "status.regrow gone"
                )
                assert regrow_annotations(final) == {}
                assert has_condition(final, "Running")
                assert {p["spec"]["nodeName"] for p in workers} == {node_a, *later}
                # Fresh names: none of the workers Horovod saw before (and may have blacklisted) comes back.
                assert len(set(names(workers)) & before) == 1, "only node a's worker is an old name"
                assert replicas_of(back) == 3

        most, life = probe_history(pod_watch.stream.events)
        assert pod_watch.stream.error is None
        assert 0 < most <= MAX_PROBES, most
        dry_probes = {n: v for n, v in life.items() if v[0] < dry}
        assert len(dry_probes) >= 2 * MAX_PROBES, life
        for name, (added, gone) in dry_probes.items():
            assert gone is not None, f"probe {name} still waiting"
            assert gone - added <= TIMEOUT + DELETE_SLACK, f"probe {name} waited {gone - added:.1f}s"
        reasons = [e.get("reason") for e in await kube.events(job)]
        assert "RegrowProbe" in reasons and "RegrowBackoff" in reasons and "Regrown" in reasons, reasons


async def test_a_manual_scale_in_is_the_new_target_and_is_not_undone_when_capacity_returns(
    kube: Kube, api: ApiClient
) -> None:
    job = "manual"
    later = node_name(kube, "d")
    async with own_nodes(api, kube, "a", "b", "c", spot=("c",)) as (node_a, node_b, node_c):
        pods = await start_job(kube, one_worker_per_node(job, [node_a, node_b, node_c, later], 3, regrow=REGROW))
        await taint_node(api, node_c, SPOT_ITN_TAINT, effect="NoSchedule")
        await wait_job(kube, job, lambda j: replicas_of(j) == 2, "replicas 3 -> 2")
        on_b = next(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node_b)
        old, new, _ = await scale_in(kube.client, kube.ns, job, [on_b], None, False)
        assert (old, new) == (2, 1)
        edited = await wait_job(kube, job, lambda j: not regrow_annotations(j), "the target follows the user")

        async with pod_recorder(api, kube) as pod_watch, own_nodes(api, kube, "d", spot=()):
            await asyncio.sleep(3 * TIMEOUT)
            final = await kube.job(job)
        assert replicas_of(final) == 1
        assert "regrow" not in (final.get("status") or {})
        added = [o["metadata"]["name"] for _, t, o in pod_watch.stream.events if t == "ADDED"]
        assert not added, f"nothing grows after a manual scale-in: {added}"
        assert replicas_of(edited) == 1


async def test_a_worker_evicted_through_the_eviction_api_is_regrown_under_a_fresh_name(
    kube: Kube, api: ApiClient
) -> None:
    job = "evicted"
    async with own_nodes(api, kube, "a", "b", spot=()) as (node_a, node_b):
        pods = await start_job(kube, one_worker_per_node(job, [node_a, node_b], 2, regrow=REGROW))
        victim = next(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node_b)
        await kube.evict(victim)

        async def regrown() -> list[Obj] | None:
            job_obj = await kube.job(job)
            workers = live(await kube.workers(job))
            ok = (
                replicas_of(job_obj) == 2
                and len(workers) == 2
                and victim not in names(workers)
                and all(phase(p) == "Running" for p in workers)
                and "regrow" not in (job_obj.get("status") or {})
            )
            return workers if ok else None

        workers = await eventually(regrown, within=90, what="the evicted worker regrown")

        async def discovered() -> bool:
            return await run_discovery(kube, job) == sorted(names(workers))

        await eventually(discovered, within=60, what="the launcher's discover_hosts.sh lists both")
        fresh = [n for n in names(workers) if n not in names(pods)]
        assert len(fresh) == 1 and (c.worker_index(job, fresh[0]) or 0) > max(
            c.worker_index(job, n) or 0 for n in names(pods)
        )
        reasons = [e.get("reason") for e in await kube.events(job)]
        assert "RegrowProbe" in reasons and "Regrown" in reasons, reasons
