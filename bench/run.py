"""Benchmarks: planner cost (pure), and the operator on the local testbed (start-up, steady-state writes,
node-termination reaction, memory). Prints a Markdown report; `--json PATH` also writes raw figures.

    .venv/bin/python bench/run.py                      # everything (starts a testbed in .cache/bench-testbed)
    .venv/bin/python bench/run.py --planner-only       # no cluster
    .venv/bin/python bench/run.py --jobs 20 --workers 4 --idle 20

Figures are from one run on a shared 2-core machine: read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import finish, print_table, report_header, testbed_with_crd

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.app.operator import OperatorOptions, run
from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import load_api_client
from mpijob.kube.resources import collection_path, object_path
from mpijob.planner.discovery import listed_hosts
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Snapshot
from mpijob.runtime.controller import Controller
from mpijob_testbed import create_node, delete_node, taint_node
from mpijob_testbed.nodes import spread_over
from mpijob_testbed.waiting import seconds_until

ROOT = Path(__file__).resolve().parents[1]


# -- planner (pure) ----------------------------------------------------------------------------------
def _job(workers: int) -> dict[str, Any]:
    tmpl = {"spec": {"containers": [{"name": "w", "image": "x"}]}}
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": "bench", "namespace": "ns", "uid": "job-uid", "resourceVersion": "10"},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": workers},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": tmpl},
                "Worker": {"replicas": workers, "template": tmpl},
            },
        },
    }


def _converged_snapshot(workers: int) -> Snapshot:
    """Plans a job to convergence in memory (objects as the API server would return them)."""
    from mpijob.planner.actions import Create, Patch

    job = _job(workers)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    snap = Snapshot(job=job, now=now)
    objs: dict[str, dict[str, Any]] = {}
    status: dict[str, Any] = {}
    # Enough rounds for the slow start of worker creation (each round creates about as many as exist).
    for _ in range(12):
        job["status"] = status
        pods = [o for o in objs.values() if o["kind"] == "Pod"]
        nodes = {f"n{i}": {"metadata": {"name": f"n{i}"}, "spec": {}} for i in range(max(1, workers // 4))}
        snap = Snapshot(
            job=job,
            now=now,
            owned_pods=pods,
            pods_by_name={p["metadata"]["name"]: p for p in pods},
            service=objs.get("Service"),
            config_map=objs.get("ConfigMap"),
            pdb=objs.get("PodDisruptionBudget"),
            service_account=objs.get("ServiceAccount"),
            role=objs.get("Role"),
            role_binding=objs.get("RoleBinding"),
            launcher=objs.get("Job"),
            nodes=nodes,
        )
        for action in plan(snap):
            if isinstance(action, Create):
                obj = json.loads(json.dumps(action.obj))
                obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
                obj["metadata"]["resourceVersion"] = "1"
                if obj["kind"] == "Pod":
                    index = c.worker_index("bench", obj["metadata"]["name"]) or 0
                    obj["spec"]["nodeName"] = f"n{index % len(nodes)}"
                    obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                    objs[obj["metadata"]["name"]] = obj
                else:
                    objs[obj["kind"]] = obj
            elif isinstance(action, Patch) and action.subresource == "status":
                status = action.patch["status"]
            elif isinstance(action, Patch) and action.kind in objs:
                target = objs[action.kind]
                for key, value in action.patch.items():
                    if key == "data" and isinstance(value, dict):
                        # A ConfigMap patch names only the keys that change (JSON merge patch).
                        data = {**(target.get("data") or {}), **value}
                        target["data"] = {k: v for k, v in data.items() if v is not None}
                    else:
                        target[key] = value
    job["status"] = status
    return snap


def bench_planner(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for workers in sizes:
        snap = _converged_snapshot(workers)
        writes = [a for a in plan(snap) if type(a).__name__ in ("Create", "Patch", "Delete")]
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            plan(snap)
            times.append(time.perf_counter() - start)
        # The same job right after a quarter of its nodes got a termination taint.
        tainted = dict(snap.nodes)
        for name in list(tainted)[: max(1, len(tainted) // 4)]:
            tainted[name] = {"metadata": {"name": name}, "spec": {"taints": [{"key": "karpenter.sh/disrupted"}]}}
        snap2 = Snapshot(**{**snap.__dict__, "nodes": tainted})
        times2 = []
        for _ in range(repeat):
            start = time.perf_counter()
            plan(snap2)
            times2.append(time.perf_counter() - start)
        rows.append(
            {
                "workers": workers,
                "steady_plan_us_median": statistics.median(times) * 1e6,
                "steady_writes": len(writes),
                "termination_plan_us_median": statistics.median(times2) * 1e6,
            }
        )
    return rows


# -- operator on the testbed ---------------------------------------------------------------------------
def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _bench_job(name: str, workers: int, nodes: list[str]) -> dict[str, Any]:
    tmpl = {
        "metadata": {"labels": {"bench": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            **spread_over(nodes, {"bench": name}),
            "containers": [{"name": "w", "image": "x"}],
        },
    }
    launcher = {
        "spec": {"nodeSelector": {"kubernetes.io/hostname": nodes[0]}, "containers": [{"name": "l", "image": "x"}]}
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            # Regrow off: the figures are the scale-in's (regrow is measured by bench/regrow.py).
            "elasticPolicy": {
                "minReplicas": 1,
                "maxReplicas": workers,
                "scaleInGracePeriodSeconds": 0,
                "regrow": {"enabled": False},
            },
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": workers, "template": tmpl},
            },
        },
    }


async def bench_operator(kubeconfig: Path, jobs: int, workers: int, idle: float) -> dict[str, Any]:
    holder: dict[str, Controller] = {}
    stop = asyncio.Event()
    rss_start = _rss_mib()
    op = asyncio.create_task(
        run(
            OperatorOptions(kubeconfig=str(kubeconfig), log_level="WARNING"),
            stop=stop,
            started=lambda ctl: holder.setdefault("c", ctl),
        )
    )
    api = await load_api_client(str(kubeconfig))
    kube = Client(api, qps=0, burst=1)
    ns = f"bench-{int(time.time())}"
    node_a, node_b = f"{ns}-a", f"{ns}-b"
    out: dict[str, Any] = {"jobs": jobs, "workers_per_job": workers}
    try:
        await seconds_until(
            lambda: asyncio.sleep(0, result="c" in holder and holder["c"].warm.is_set()),
            what="operator warm",
            within=60,
            interval=0.05,
        )
        ctl = holder["c"]
        await kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for node in (node_a, node_b):
            await create_node(api, node, labels={"node.kubernetes.io/capacity-type": "spot"})
        await asyncio.sleep(1.0)
        writes0, reconciles0 = ctl.stats.writes, ctl.stats.reconciles
        for i in range(jobs):
            await kube.create(
                collection_path(API_VERSION, "MPIJob", ns), _bench_job(f"job-{i}", workers, [node_a, node_b])
            )

        async def all_running() -> bool:
            items = (await kube.get(collection_path(API_VERSION, "MPIJob", ns))).get("items") or []
            return len(items) == jobs and all((j.get("status") or {}).get("state") == "Running" for j in items)

        out["create_to_all_running_s"] = await seconds_until(
            all_running, what="all jobs Running", within=600, interval=0.05
        )
        await asyncio.sleep(2.0)  # let trailing status writes land
        out["writes_to_converge_per_job"] = (ctl.stats.writes - writes0) / jobs
        out["reconciles_to_converge_per_job"] = (ctl.stats.reconciles - reconciles0) / jobs
        writes1 = ctl.stats.writes
        await asyncio.sleep(idle)
        out["steady_idle_s"] = idle
        out["steady_writes"] = ctl.stats.writes - writes1
        out["rss_mib_with_jobs"] = _rss_mib()
        out["rss_mib_at_start"] = rss_start

        # Node termination: every job has about half its workers on node b.
        writes2 = ctl.stats.writes
        tainted = time.monotonic()
        await taint_node(api, node_b)

        async def all_patched() -> bool:
            items = (await kube.get(collection_path(API_VERSION, "MPIJob", ns))).get("items") or []
            return all(j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] < workers for j in items)

        out["taint_to_all_jobs_scaled_in_s"] = await seconds_until(
            all_patched, what="all jobs patched", within=300, interval=0.05
        )

        async def discovery_shrunk() -> bool:
            for i in range(jobs):
                cm = await kube.get(object_path("v1", "ConfigMap", ns, c.config_map_name(f"job-{i}")))
                if node_b in json.dumps(cm["data"]) or len(listed_hosts(cm["data"])) >= workers:
                    return False
            return True

        await seconds_until(discovery_shrunk, what="discovery", within=300, interval=0.05)
        out["taint_to_all_discovery_updated_s"] = time.monotonic() - tainted
        await asyncio.sleep(3.0)
        out["writes_for_scale_in_per_job"] = (ctl.stats.writes - writes2) / jobs
        out["operator_errors"] = ctl.stats.errors
        out["operator_conflicts"] = ctl.stats.conflicts
        out["api_requests_total"] = ctl.executor.client.requests
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(f"/api/v1/namespaces/{ns}")
        for node in (node_a, node_b):
            await delete_node(api, node)
        await api.close()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(op, 30)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--planner-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--dir", default=str(ROOT / ".cache" / "bench-testbed"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    report = report_header()
    report["planner"] = bench_planner([4, 64, 512], args.repeat)
    print("## Planner (pure, no cluster)\n")
    print("| workers | plan() steady, median µs | writes in steady state | plan() after node taint, median µs |")
    print("|---|---|---|---|")
    for row in report["planner"]:
        print(
            f"| {row['workers']} | {row['steady_plan_us_median']:.0f} | {row['steady_writes']} | "
            f"{row['termination_plan_us_median']:.0f} |"
        )
    if not args.planner_only:
        with testbed_with_crd(args.dir, 2) as kubeconfig:
            report["operator"] = asyncio.run(bench_operator(kubeconfig, args.jobs, args.workers, args.idle))
        o = report["operator"]
        print(f"\n## Operator on the testbed ({o['jobs']} elastic jobs x {o['workers_per_job']} workers)\n")
        print_table(o)
    return finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
