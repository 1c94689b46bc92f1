"""Benchmark: how fast a node-termination taint reaches what every affected launcher's discover_hosts.sh reads.

100 elastic MPIJobs x 16 workers spread over 8 kwok nodes (2 workers of every job per node), launchers on a
9th node; the real operator runs as its own process with its default settings (`mpijob operator`). One
worker node gets the AWS spot-interruption taint. For each job we record when its discovery list, as the API
server serves it to the launcher's GET (`?resourceVersion=0`: from the watch cache; a watch opened before the
taint sees the same store), stops listing that node's workers; and when its launcher pod's annotation (the
file fallback, projected by a kubelet) does. Then the real discover_hosts.sh of every job is run with its
launcher's own token (TokenRequest) to check the result from the launcher's side.

    .venv/bin/python bench/discovery.py                     # defaults: --jobs 100 --workers 16 --nodes 8
    .venv/bin/python bench/discovery.py --jobs 20 --workers 4 --nodes 2
    .venv/bin/python bench/discovery.py --jobs 20 --workers 4 --nodes 2 --plots docs/img   # + PNG plots

Figures are from one run on a shared 2-core machine (API server, etcd, scheduler, kwok, the operator and
this script all on it): read them as orders of magnitude.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import finish, measure_on_testbed, print_table, spread_elastic_job
from kubernetes_asyncio.client import CoreV1Api
from plots import discovery_plots

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.kube.client import ApiError, Client
from mpijob.kube.resources import collection_path
from mpijob.planner.discovery import listed_hosts
from mpijob_testbed import delete_node, taint_node
from mpijob_testbed.client import load_api_client
from mpijob_testbed.launcher_view import launcher_view
from mpijob_testbed.nodes import node_manifest
from mpijob_testbed.waiting import seconds_until
from mpijob_testbed.watching import WatchRecorder

ROOT = Path(__file__).resolve().parents[1]


def _job(name: str, workers: int, worker_nodes: list[str], launcher_node: str) -> dict[str, Any]:
    # The default grace period (30 s): the victims keep running while the launchers must drop them.
    # Regrow off, so the figures stay those of the taint alone (regrow: bench/regrow.py).
    elastic = {"minReplicas": 1, "maxReplicas": workers, "regrow": {"enabled": False}}
    return spread_elastic_job(name, workers, worker_nodes, launcher_node, elastic)


def _annotation(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_DISCOVERED_HOSTS, ""))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def bench(kubeconfig: Path, jobs: int, workers: int, nodes: int, log_dir: Path) -> dict[str, Any]:
    api = await load_api_client(kubeconfig)
    kube = Client(api, qps=0, burst=1)
    v1 = CoreV1Api(api)
    stamp = int(time.time())
    ns = f"bench-discovery-{stamp}"
    worker_nodes = [f"bd-{stamp}-{i}" for i in range(nodes)]
    launcher_node = f"bd-{stamp}-launchers"
    log = (log_dir / f"operator-bench-discovery-{stamp}.log").open("wb")
    # The operator as users run it, with its defaults.
    operator = subprocess.Popen(  # noqa: ASYNC220 (a long-lived process, started once)
        [sys.executable, "-m", "mpijob", "operator", "--kubeconfig", str(kubeconfig)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out: dict[str, Any] = {"jobs": jobs, "workers_per_job": workers, "worker_nodes": nodes}
    streams: list[WatchRecorder] = []
    try:
        await kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        per_node = (jobs * workers) // nodes + 20
        for name in [*worker_nodes, launcher_node]:
            body: Any = node_manifest(name)
            capacity = jobs + 20 if name == launcher_node else per_node
            for key in ("capacity", "allocatable"):
                body["status"][key]["pods"] = str(capacity)
            await v1.create_node(body)

        async def ready() -> bool:
            listing = await kube.get("/api/v1/nodes")
            ok = {
                n["metadata"]["name"]
                for n in listing["items"]
                if any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions") or [])
                and not n["spec"].get("taints")
            }
            return {*worker_nodes, launcher_node} <= ok

        await seconds_until(ready, what="nodes Ready", within=120, interval=0.5)
        started = time.monotonic()
        for i in range(jobs):
            await kube.create(
                collection_path(API_VERSION, "MPIJob", ns), _job(f"job-{i}", workers, worker_nodes, launcher_node)
            )

        async def converged() -> bool:
            items = (await kube.get(collection_path(API_VERSION, "MPIJob", ns))).get("items") or []
            if len(items) != jobs or any((j.get("status") or {}).get("state") != "Running" for j in items):
                return False
            cms = (await kube.get(collection_path("v1", "ConfigMap", ns))).get("items") or []
            full = [cm for cm in cms if len(listed_hosts(cm.get("data") or {}) or []) == workers]
            pods = (await kube.get(collection_path("v1", "Pod", ns))).get("items") or []
            # The annotation carries the list and, since the cluster-DNS work, one `# address` line per host:
            # count the listed hosts, not the lines.
            launchers = [
                p
                for p in pods
                if p["metadata"]["labels"].get(c.LABEL_JOB_ROLE) == c.ROLE_LAUNCHER
                and len(listed_hosts({c.DISCOVERED_HOSTS_KEY: _annotation(p)}) or []) == workers
            ]
            return len(full) == jobs and len(launchers) == jobs

        out["create_to_converged_s"] = round(
            await seconds_until(converged, what="all jobs Running", within=1200, interval=2.0), 1
        )
        out["_started"] = started
        await asyncio.sleep(3.0)

        # Who is on the node that goes away.
        pods = (await kube.get(collection_path("v1", "Pod", ns))).get("items") or []
        victim_node = worker_nodes[-1]
        victims: dict[str, set[str]] = {}
        survivors: dict[str, list[str]] = {}
        for pod in pods:
            labels = pod["metadata"]["labels"]
            if labels.get(c.LABEL_JOB_ROLE) != c.ROLE_WORKER:
                continue
            job = labels[c.LABEL_JOB_NAME]
            if pod["spec"].get("nodeName") == victim_node:
                victims.setdefault(job, set()).add(pod["metadata"]["name"])
            else:
                survivors.setdefault(job, []).append(pod["metadata"]["name"])
        out["affected_jobs"] = len(victims)
        out["victims_per_job"] = sorted({len(v) for v in victims.values()})

        cm_listing = await kube.get(collection_path("v1", "ConfigMap", ns))
        cm_stream = WatchRecorder(v1.list_namespaced_config_map, ns)
        await cm_stream.start(cm_listing["metadata"]["resourceVersion"], timeout_seconds=600)
        pod_listing = await kube.get(collection_path("v1", "Pod", ns))
        launcher_stream = WatchRecorder(
            v1.list_namespaced_pod, ns, label_selector=f"{c.LABEL_JOB_ROLE}={c.ROLE_LAUNCHER}"
        )
        await launcher_stream.start(pod_listing["metadata"]["resourceVersion"], timeout_seconds=600)
        streams = [cm_stream, launcher_stream]
        await asyncio.sleep(2.0)

        taint_wall = datetime.now(UTC).replace(microsecond=0)
        tainted = time.monotonic()
        await taint_node(api, victim_node)
        out["taint_write_s"] = round(time.monotonic() - tainted, 3)

        def first_clean(stream: WatchRecorder, job_of: Any, text_of: Any) -> dict[str, float]:
            seen: dict[str, float] = {}
            for at, _, obj in stream.events:
                job = job_of(obj)
                if job not in victims or job in seen:
                    continue
                names = {h.split(".", 1)[0] for h in listed_hosts({c.DISCOVERED_HOSTS_KEY: text_of(obj)}) or []}
                if names and not names & victims[job]:
                    seen[job] = at - tainted
            return seen

        def cm_job(obj: dict[str, Any]) -> str:
            return str(obj["metadata"]["name"]).removesuffix("-config")

        def pod_job(obj: dict[str, Any]) -> str:
            return str((obj["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME))

        def cm_text(obj: dict[str, Any]) -> str:
            return str((obj.get("data") or {}).get(c.DISCOVERED_HOSTS_KEY, ""))

        def pod_text(obj: dict[str, Any]) -> str:
            return str((obj["metadata"].get("annotations") or {}).get(c.ANNOTATION_DISCOVERED_HOSTS, ""))

        async def all_clean() -> bool:
            return len(first_clean(cm_stream, cm_job, cm_text)) == len(victims) and len(
                first_clean(launcher_stream, pod_job, pod_text)
            ) == len(victims)

        await seconds_until(all_clean, what="every affected job's discovery updated", within=300, interval=0.1)
        api_times = list(first_clean(cm_stream, cm_job, cm_text).values())
        file_times = list(first_clean(launcher_stream, pod_job, pod_text).values())
        # The per-job figures, for the plots (bench/plots.py); not in the table.
        out["_taint_to_api_s"] = sorted(api_times)
        out["_taint_to_annotation_s"] = sorted(file_times)
        for label, values in (("api", api_times), ("annotation", file_times)):
            out[f"taint_to_{label}_p50_s"] = round(statistics.median(values), 3)
            out[f"taint_to_{label}_p90_s"] = round(_percentile(values, 0.90), 3)
            out[f"taint_to_{label}_p99_s"] = round(_percentile(values, 0.99), 3)
            out[f"taint_to_{label}_max_s"] = round(max(values), 3)

        # The victims still serve while the launchers no longer list them (grace period 30 s).
        pods = (await kube.get(collection_path("v1", "Pod", ns))).get("items") or []
        still = [
            p
            for p in pods
            if p["metadata"]["name"] in set().union(*victims.values())
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        out["victims_still_running_when_all_launchers_updated"] = f"{len(still)}/{sum(map(len, victims.values()))}"

        # From the launcher's side: every affected job's real script with its launcher's own token.
        checked = 0
        took: list[float] = []
        for job in sorted(victims):
            start = time.monotonic()
            view = await launcher_view(kube, ns, job, account=c.discovery_rbac_name(job))
            took.append(time.monotonic() - start)
            if not view.ok:
                raise RuntimeError(f"{job}: discover_hosts.sh failed: {view.error}")
            seen = sorted(host.split(".", 1)[0] for host, _ in view.hosts)
            want = sorted(survivors[job])
            if seen != want:
                raise RuntimeError(f"{job}: launcher sees {seen}, expected {want}")
            checked += 1
        out["launcher_scripts_checked"] = checked

        await asyncio.sleep(5.0)
        events = (await kube.get(collection_path("v1", "Event", ns))).get("items") or []
        per_job: dict[str, list[str]] = {}
        for event in events:
            if (event.get("involvedObject") or {}).get("kind") != "MPIJob":
                continue
            stamp_text = event.get("firstTimestamp") or event["metadata"]["creationTimestamp"]
            when = datetime.fromisoformat(str(stamp_text).replace("Z", "+00:00"))
            if when >= taint_wall:
                per_job.setdefault(event["involvedObject"]["name"], []).append(event["reason"])
        # Per reason: how many Events each affected job got after the taint (sets of counts over the jobs).
        reasons_seen = sorted({r for job, reasons in per_job.items() if job in victims for r in reasons})
        out["events_per_affected_job_by_reason"] = {
            r: sorted({per_job.get(job, []).count(r) for job in victims}) for r in reasons_seen
        }
    finally:
        for stream in streams:
            await stream.stop()
        with contextlib.suppress(ApiError):
            await kube.delete(f"/api/v1/namespaces/{ns}")
        for name in [*worker_nodes, launcher_node]:
            with contextlib.suppress(Exception):
                await delete_node(api, name)
        operator.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            operator.wait(30)
        log.close()
        await api.close()
    out.pop("_started", None)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--dir", default=str(ROOT / ".cache" / "bench-testbed"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--plots", default=None, help="also write PNG plots (CDF, timeline) into this directory")
    args = parser.parse_args()
    report, o = measure_on_testbed(
        args.dir, "discovery", lambda kubeconfig: bench(kubeconfig, args.jobs, args.workers, args.nodes, Path(args.dir))
    )
    print(
        f"## Node taint -> launcher discovery ({o['jobs']} elastic jobs x {o['workers_per_job']} workers over "
        f"{o['worker_nodes']} nodes, one node tainted, operator defaults)\n"
    )
    print_table(o, round_floats=False)
    if args.plots:
        for path in discovery_plots(o, Path(args.plots)):
            print(f"plot: {path}")
    return finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
