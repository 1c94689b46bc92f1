"""Benchmark: regrow (issue 19). How long a shrunk job takes to get back to its target once capacity returns, and
how many Pending-pod-seconds it spends while there is none, next to nodeTerminationPolicy Replace (which keeps
its replacements Pending for as long as there is no room).

Half the elastic jobs run ScaleIn with regrow (its default, or the settings given), half Replace; every job has
its workers spread over two worker nodes whose pod capacity is exactly what the jobs use (launchers on a third
node), so when one node gets the AWS spot-interruption taint there is no room anywhere. After `--dry` seconds the
tainted node is deleted and a new node with the same capacity joins. From a pod watch opened before the taint we
sum, per job, the seconds its pods spent unbound while there was no capacity (taint -> new node created), and the
most of them Pending at once; then the time from the new node Ready to each job back at its target (Worker
replicas as before, every worker Running).

    .venv/bin/python bench/regrow.py                         # defaults: --jobs 10 --workers 4 --dry 120
    .venv/bin/python bench/regrow.py --probe-timeout 180     # the regrow defaults (timeout 180 s)

Figures are from one run on a shared 2-core machine: read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import finish, measure_on_testbed, print_table, spread_elastic_job
from kubernetes_asyncio.client import CoreV1Api

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.kube.client import Client
from mpijob.kube.resources import collection_path
from mpijob_testbed import delete_node, taint_node
from mpijob_testbed.client import load_api_client
from mpijob_testbed.nodes import node_manifest
from mpijob_testbed.waiting import seconds_until
from mpijob_testbed.watching import WatchRecorder

ROOT = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]


def _job(name: str, workers: int, nodes: list[str], launcher_node: str, policy: str, regrow: Obj) -> Obj:
    elastic: Obj = {
        "minReplicas": 1,
        "maxReplicas": workers,
        "nodeTerminationPolicy": policy,
        "scaleInGracePeriodSeconds": 0,
    }
    if regrow:
        elastic["regrow"] = regrow
    return spread_elastic_job(name, workers, nodes, launcher_node, elastic)


async def _node(v1: CoreV1Api, name: str, pods: int) -> None:
    body: Any = node_manifest(name)
    for key in ("capacity", "allocatable"):
        body["status"][key]["pods"] = str(pods)
    await v1.create_node(body)


async def _nodes_ready(kube: Client, names: list[str]) -> bool:
    listing = await kube.get("/api/v1/nodes")
    ok = {
        n["metadata"]["name"]
        for n in listing["items"]
        if any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions") or [])
        and not n["spec"].get("taints")
    }
    return set(names) <= ok


def _pending_seconds(events: list[tuple[float, str, Obj]], start: float, end: float) -> dict[str, Any]:
    """Per job: the seconds its worker pods spent unbound (Pending with no node) inside [start, end], and the
    most of them unbound at once."""
    since: dict[str, float] = {}
    job_of: dict[str, str] = {}
    seconds: dict[str, float] = {}
    waiting: dict[str, set[str]] = {}
    most: dict[str, int] = {}
    for at, kind, pod in events:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(c.LABEL_JOB_ROLE) != c.ROLE_WORKER:
            continue
        name, job = pod["metadata"]["name"], labels[c.LABEL_JOB_NAME]
        job_of[name] = job
        unbound = kind != "DELETED" and not (pod.get("spec") or {}).get("nodeName")
        unbound = unbound and not pod["metadata"].get("deletionTimestamp")
        if unbound and name not in since:
            since[name] = at
            waiting.setdefault(job, set()).add(name)
            if start <= at <= end:
                most[job] = max(most.get(job, 0), len(waiting[job]))
        elif not unbound and name in since:
            began = since.pop(name)
            seconds[job] = seconds.get(job, 0.0) + max(0.0, min(at, end) - max(began, start))
            waiting[job].discard(name)
    for name, began in since.items():
        job = job_of[name]
        seconds[job] = seconds.get(job, 0.0) + max(0.0, end - max(began, start))
    return {"seconds": seconds, "most": most}


def _regrow_settings(args: argparse.Namespace) -> Obj:
    given = {
        "probeTimeoutSeconds": args.probe_timeout,
        "maxProbes": args.max_probes,
        "backoffSeconds": args.backoff,
        "maxBackoffSeconds": args.max_backoff,
    }
    return {k: v for k, v in given.items() if v is not None}


async def bench(kubeconfig: Path, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    api = await load_api_client(kubeconfig)
    kube = Client(api, qps=0, burst=1)
    v1 = CoreV1Api(api)
    stamp = int(time.time())
    ns = f"bench-regrow-{stamp}"
    pool = [f"br-{stamp}-a", f"br-{stamp}-b"]
    fresh = f"br-{stamp}-c"
    launcher_node = f"br-{stamp}-launchers"
    regrow = _regrow_settings(args)
    log = (log_dir / f"operator-bench-regrow-{stamp}.log").open("wb")
    operator = subprocess.Popen(  # noqa: ASYNC220 (a long-lived process, started once)
        [sys.executable, "-m", "mpijob", "operator", "--kubeconfig", str(kubeconfig)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    jobs = {f"job-{i}": ("ScaleIn" if i % 2 == 0 else "Replace") for i in range(args.jobs)}
    out: dict[str, Any] = {"jobs": args.jobs, "workers_per_job": args.workers, "dry_s": args.dry, "regrow": regrow}
    stream = WatchRecorder(v1.list_namespaced_pod, ns)
    per_node = args.jobs * args.workers // 2
    try:
        await kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name in pool:
            await _node(v1, name, per_node)
        await _node(v1, launcher_node, args.jobs + 10)
        await seconds_until(lambda: _nodes_ready(kube, [*pool, launcher_node]), what="nodes Ready", within=120)
        nodes = [*pool, fresh]
        for name, policy in jobs.items():
            body = _job(name, args.workers, nodes, launcher_node, policy, regrow if policy == "ScaleIn" else {})
            await kube.create(collection_path(API_VERSION, "MPIJob", ns), body)

        async def running(count: int) -> bool:
            pods = (await kube.get(collection_path("v1", "Pod", ns))).get("items") or []
            workers = [p for p in pods if p["metadata"]["labels"].get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER]
            return sum(1 for p in workers if (p.get("status") or {}).get("phase") == "Running") == count

        await seconds_until(lambda: running(args.jobs * args.workers), what="all workers Running", within=600)
        listing = await kube.get(collection_path("v1", "Pod", ns))
        await stream.start(listing["metadata"]["resourceVersion"], timeout_seconds=1800)

        tainted = time.monotonic()
        await taint_node(api, pool[1])
        await asyncio.sleep(args.dry)
        await delete_node(api, pool[1])
        capacity = time.monotonic()
        await _node(v1, fresh, per_node)
        ready_after = await seconds_until(lambda: _nodes_ready(kube, [fresh]), what="new node Ready", within=120)
        ready = capacity + ready_after
        back = await _time_to_target(kube, ns, jobs, args.workers, ready)
        await asyncio.sleep(1.0)
        pending = _pending_seconds(stream.events, tainted, capacity)
        for policy in ("ScaleIn", "Replace"):
            label = "regrow" if policy == "ScaleIn" else "replace"
            names = [n for n, p in jobs.items() if p == policy]
            secs = [pending["seconds"].get(n, 0.0) for n in names]
            times = [back[n] for n in names]
            out[f"{label}_pending_pod_seconds_per_job_while_no_capacity"] = round(statistics.mean(secs), 1)
            out[f"{label}_most_pending_at_once_per_job"] = max([pending["most"].get(n, 0) for n in names])
            out[f"{label}_ready_to_target_min_s"] = round(min(times), 2)
            out[f"{label}_ready_to_target_p50_s"] = round(statistics.median(times), 2)
            out[f"{label}_ready_to_target_max_s"] = round(max(times), 2)
        out["new_node_created_to_ready_s"] = round(ready_after, 2)
        out["lost_workers_per_job"] = args.workers // 2
    finally:
        await stream.stop()
        operator.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            operator.wait(timeout=15)
        with contextlib.suppress(Exception):
            await kube.delete(f"/api/v1/namespaces/{ns}")
        for name in [*pool, fresh, launcher_node]:
            with contextlib.suppress(Exception):
                await delete_node(api, name)
        await api.close()
    return out


async def _time_to_target(kube: Client, ns: str, jobs: dict[str, str], workers: int, since: float) -> dict[str, float]:
    """Seconds from `since` until each job has its Worker replicas back and that many Running workers."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + 900
    while len(done) < len(jobs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs not back at target: {sorted(set(jobs) - set(done))}")
        items = (await kube.get(collection_path(API_VERSION, "MPIJob", ns))).get("items") or []
        pods = (await kube.get(collection_path("v1", "Pod", ns))).get("items") or []
        now = time.monotonic()
        for job in items:
            name = job["metadata"]["name"]
            if name in done or job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] != workers:
                continue
            serving = [
                p
                for p in pods
                if p["metadata"]["labels"].get(c.LABEL_JOB_NAME) == name
                and p["metadata"]["labels"].get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER
                and (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            if len(serving) == workers:
                done[name] = now - since
        await asyncio.sleep(0.2)
    return done


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dry", type=float, default=120.0, help="seconds without capacity")
    parser.add_argument("--probe-timeout", type=int, default=30)
    parser.add_argument("--max-probes", type=int, default=None)
    parser.add_argument("--backoff", type=int, default=None)
    parser.add_argument("--max-backoff", type=int, default=None)
    parser.add_argument("--dir", default=str(ROOT / ".cache" / "bench-testbed"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    report, o = measure_on_testbed(args.dir, "regrow", lambda kubeconfig: bench(kubeconfig, args, Path(args.dir)))
    print(
        f"## Regrow: {o['jobs']} elastic jobs x {o['workers_per_job']} workers (half ScaleIn with regrow "
        f"{o['regrow'] or 'defaults'}, half Replace), one of two full nodes tainted, {o['dry_s']:.0f} s without "
        "capacity, then a new node\n"
    )
    print_table(o, round_floats=False)
    return finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
