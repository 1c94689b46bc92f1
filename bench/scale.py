"""Benchmark: the scale run of issue 20 (item 4, "at scale"): thousands of elastic jobs, one spot taint, a mass
scale-in, an operator restart.

N elastic MPIJobs x W workers (defaults 2,000 x 8) on kwok nodes, the real operator as its own process with its
default settings (`mpijob operator`, only its metrics port opened). The jobs are in two groups, each spread over
its own `--nodes` worker nodes (W/nodes workers of every job per node; launchers on one more node): the taint
group (N - `--scale-in-jobs`) and the scale-in group (`--scale-in-jobs`, default 500), so the two measures do not
mix. Regrow is off, as in bench/discovery.py, so the figures are those of the taint and the scale-in alone.

1. create every job; time until every job is Running with all its workers and its launcher Running (the API's
   view: the MPIJobs' status, no pod left that is not Running, every ConfigMap listing W hosts); the operator's
   RSS (VmRSS) then, and how many worker pods its cache holds (its `mpijob_worker_pods` gauge);
2. one node of the taint group gets the AWS spot-interruption taint: for every affected job, the time from the
   taint until its discovery list, as the API serves it to the launcher (a ConfigMap watch opened before the
   taint: the same store a `?resourceVersion=0` GET reads, as in bench/discovery.py), no longer lists the
   victims: p50 / p99 / max;
3. every job of the scale-in group goes from W to W/2 workers by lowering Worker replicas, as a user would: per
   job, the time from its patch until its discovery lists exactly the kept workers (indexes 0..W/2-1);
4. while the scale-in's leaving workers wait for their deadline (the scale-in group's
   scaleInGracePeriodSeconds, `--scale-in-grace`), SIGTERM the operator and start a new one with the same
   flags: time until its cache is warm (its metrics serve the cache's gauges only once the warm gate has
   opened: `mpi_operator_job_info` has one series per job), and until it has reconciled every job once (its
   reconcile count >= N with an empty queue); its writes by verb and resource (its `mpijob_api_writes_total`);
   from watches opened before the restart, which jobs' objects (pods, ConfigMaps, MPIJobs, Events) changed
   after the new operator started: a job of the taint group (steady since) must have none. The leaving
   workers' recorded decision must be carried on: each is deleted at the deadline written before the
   restart (seconds from that deadline to its deletion), with its leaving-since unchanged;
5. the floor: with the operator stopped, a process that does nothing else (the operator's client and event
   loop) makes the taint's burst of ConfigMap writes (one per taint-group job, all at once, 16 in flight, no
   QPS limit), each timed from the start until the same kind of watch shows it: what this testbed allows for
   the taint's figure.

    .venv/bin/python bench/scale.py --jobs 50 --workers 8 --nodes 8 --scale-in-jobs 12   # a small trial
    flock /tmp/mpijob-realnode.lock nice -n 5 .venv/bin/python bench/scale.py --dir /tmp/scale-testbed
    .venv/bin/python bench/scale.py --jobs 1000 --audit   # + where the scale-in's time goes (scale_in_trace)

Figures are from one run on a shared 2-core machine (API server, etcd, scheduler, kwok, the operator and this
script all on it): read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from compare import BENCH_AGENT, load_average, rss_mib
from harness import finish, measure_on_testbed, print_table, spread_elastic_job
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
from prometheus_client.parser import text_string_to_metric_families

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.kube.client import Client
from mpijob.kube.resources import collection_path
from mpijob.planner.discovery import listed_hosts
from mpijob_testbed import delete_node, taint_node
from mpijob_testbed.client import load_api_client
from mpijob_testbed.nodes import node_manifest
from mpijob_testbed.waiting import seconds_until
from mpijob_testbed.watching import WatchRecorder

ROOT = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]
Events = list[tuple[float, str, Obj]]
GROUP_LABEL = "bench-scale-group"
TAINT, SCALE = "taint", "scale"


# -- pure parts (tests/unit/test_bench_scale.py) -------------------------------------------------------------
_STARTED = time.monotonic()


def progress(message: str) -> None:
    """A line on stderr as the run goes (a 2,000-job run takes ~30 min); the figures go to stdout."""
    print(f"[scale +{time.monotonic() - _STARTED:.0f}s] {message}", file=sys.stderr, flush=True)


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank percentile: the value at rank ceil(q * n), so p99 of 100 values is the 99th."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[min(len(ordered), rank) - 1]


def summary(values: list[float], prefix: str) -> dict[str, float]:
    return {
        f"{prefix}_p50_s": round(percentile(values, 0.50), 3),
        f"{prefix}_p99_s": round(percentile(values, 0.99), 3),
        f"{prefix}_max_s": round(max(values), 3) if values else float("nan"),
    }


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric (a sample name: `x_total`, `x_count`...) in a Prometheus text exposition."""
    return [
        (dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def metric_sum(text: str, name: str) -> float:
    return sum(value for _, value in metric_samples(text, name))


def writes_by_resource(text: str) -> dict[str, int]:
    """`verb resource code` -> count, from the operator's mpijob_api_writes_total."""
    out: dict[str, int] = {}
    for labels, value in metric_samples(text, "mpijob_api_writes_total"):
        if value:
            out[f"{labels['verb']} {labels['resource']} {labels['code']}"] = int(value)
    return dict(sorted(out.items()))


def listed_pods(cm: Obj) -> set[str]:
    """The pod names a job's discovery ConfigMap lists (hosts are `<pod>.<service>...`)."""
    return {h.split(".", 1)[0] for h in listed_hosts(cm.get("data") or {}) or []}


def first_times(events: Events, since: float, done: Callable[[str, set[str]], bool]) -> dict[str, float]:
    """Per job, seconds from `since` to the first ConfigMap event after it whose listed pods satisfy `done`."""
    seen: dict[str, float] = {}
    for at, kind, cm in events:
        job = str(cm["metadata"]["name"]).removesuffix("-config")
        if at < since or kind == "DELETED" or job in seen:
            continue
        if done(job, listed_pods(cm)):
            seen[job] = at - since
    return seen


def job_of(obj: Obj) -> str:
    """The MPIJob an object belongs to: its job label, its ConfigMap or pod name, an Event's subject."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind")
    if kind == "MPIJob":
        return str(meta.get("name"))
    if kind == "Event":
        subject = obj.get("involvedObject") or {}
        name = str(subject.get("name"))
        return name if subject.get("kind") == "MPIJob" else name.rsplit("-worker-", 1)[0].removesuffix("-launcher")
    label = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
    if label:
        return str(label)
    return str(meta.get("name")).removesuffix("-config")


def changed_jobs(events: Events, since: float) -> dict[str, int]:
    """Per job, how many watch events its objects got after `since` (each is one change someone wrote)."""
    out: dict[str, int] = {}
    for at, _, obj in events:
        if at >= since:
            job = job_of(obj)
            out[job] = out.get(job, 0) + 1
    return out


def deletions(events: Events) -> dict[str, tuple[float, Obj]]:
    """Per pod, the first event showing it deleted (a deletionTimestamp, or DELETED) and that object."""
    out: dict[str, tuple[float, Obj]] = {}
    for at, kind, pod in events:
        name = str(pod["metadata"]["name"])
        if name not in out and (kind == "DELETED" or pod["metadata"].get("deletionTimestamp")):
            out[name] = (at, pod)
    return out


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --audit: the API server's audit log, for where the scale-in's time goes (the operator's write, or the watch).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch"],
            "resources": [
                {"group": "kubeflow.org", "resources": ["mpijobs"]},
                {"group": "", "resources": ["configmaps"]},
            ],
        },
        {"level": "None"},
    ],
}


def scale_in_trace(lines: Iterable[bytes], jobs: set[str]) -> dict[str, Any]:
    """From audit events (one JSON object per line): per scaled-in job, the benchmark's PATCH of its MPIJob (user
    agent BENCH_AGENT), then the operator's first write of the job's ConfigMap received after that patch was:
    seconds from the patch's completion to that write's arrival (the operator's reaction: its watch, queue,
    plan and rate limiter), and the write's own time in the API server. What remains of the benchmark's figure
    (patch returned -> its watch shows the list) is the watch's delivery."""
    patched: dict[str, tuple[float, float]] = {}
    written: dict[str, tuple[float, float]] = {}
    for line in lines:
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("subresource") or event.get("stage") != "ResponseComplete":
            continue
        received, done = parse_rfc3339(event["requestReceivedTimestamp"]), parse_rfc3339(event["stageTimestamp"])
        mine = (event.get("userAgent") or "").startswith(BENCH_AGENT)
        name = ref.get("name") or ""
        if mine and ref.get("resource") == "mpijobs" and event["verb"] == "patch" and name in jobs:
            patched.setdefault(name, (received, done))
        job = name.removesuffix("-config")
        first = job in patched and job not in written and received >= patched[job][0]
        if first and not mine and ref.get("resource") == "configmaps":
            written[job] = (received, done)
    reaction = [written[j][0] - patched[j][1] for j in written]
    took = [written[j][1] - written[j][0] for j in written]
    return {
        **summary(reaction, "scale_in_patch_to_operator_write"),
        **summary(took, "scale_in_operator_write_took"),
        "scale_in_jobs_without_operator_write": len(jobs) - len(written),
        "_scale_in_patch_to_operator_write_s": sorted(reaction),
    }


# -- the operator as its own process ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Operator:
    """`mpijob operator` with its defaults and a metrics port; restarted with the same flags."""

    def __init__(self, kubeconfig: Path, log_dir: Path, stamp: int) -> None:
        self.port = _free_port()
        self.argv = [
            sys.executable, "-m", "mpijob", "operator", "--kubeconfig", str(kubeconfig),
            "--metrics-port", str(self.port), "--metrics-bind-address", "127.0.0.1",
        ]  # fmt: skip
        self.log_dir, self.stamp, self.runs = log_dir, stamp, 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.runs += 1
        log = (self.log_dir / f"operator-bench-scale-{self.stamp}-{self.runs}.log").open("wb")
        self.process = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def metrics(self) -> str:
        """Its /metrics; empty while it does not answer yet."""
        try:
            url = f"http://127.0.0.1:{self.port}/metrics"
            timeout = aiohttp.ClientTimeout(total=10)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
                return await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return ""

    def stop(self, timeout: float = 60.0) -> float:
        """SIGTERM, and the seconds it took to exit."""
        if self.process is None or self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return time.monotonic() - started


# -- the run ---------------------------------------------------------------------------------------------------
async def many(calls: list[Callable[[], Awaitable[Any]]], at_once: int = 16) -> None:
    """Every call, at most `at_once` in flight (16: the operator's reconcilers)."""
    gate = asyncio.Semaphore(at_once)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(call) for call in calls))


class Run:
    def __init__(self, api: Any, kubeconfig: Path, args: argparse.Namespace, stamp: int) -> None:
        self.api, self.kubeconfig, self.args = api, kubeconfig, args
        self.kube = Client(api, qps=0, burst=1)
        self.v1 = CoreV1Api(api)
        self.ns = f"bench-scale-{stamp}"
        self.pools = {g: [f"bs-{stamp}-{g}-{i}" for i in range(args.nodes)] for g in (TAINT, SCALE)}
        self.launcher_node = f"bs-{stamp}-launchers"
        # job name -> its group; the scale-in group first (job names say their group)
        groups = [SCALE if i < args.scale_in_jobs else TAINT for i in range(args.jobs)]
        self.groups = {f"{g}-{i}": g for i, g in enumerate(groups)}
        self.streams: list[WatchRecorder] = []
        self.out: Obj = {
            "jobs": args.jobs,
            "workers_per_job": args.workers,
            "nodes_per_group": args.nodes,
            "scale_in_jobs": args.scale_in_jobs,
        }

    def nodes(self) -> list[str]:
        return [*self.pools[TAINT], *self.pools[SCALE], self.launcher_node]

    def manifest(self, name: str) -> Obj:
        group = self.groups[name]
        elastic: Obj = {"minReplicas": 1, "maxReplicas": self.args.workers, "regrow": {"enabled": False}}
        if group == SCALE:
            elastic["scaleInGracePeriodSeconds"] = self.args.scale_in_grace
        body = spread_elastic_job(name, self.args.workers, self.pools[group], self.launcher_node, elastic)
        body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"][GROUP_LABEL] = group
        return body

    async def get(self, path: str, **query: str) -> Any:
        return await self.kube.request("GET", path, query=list(query.items()))

    async def setup(self) -> None:
        await self.kube.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        )
        for group, pool in self.pools.items():
            count = sum(1 for g in self.groups.values() if g == group)
            for name in pool:
                await self._node(name, count * self.args.workers // len(pool) + 20)
        await self._node(self.launcher_node, self.args.jobs + 20)

        async def ready() -> bool:
            listing = await self.kube.get("/api/v1/nodes")
            ok = {
                n["metadata"]["name"]
                for n in listing["items"]
                if any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions") or [])
            }
            return set(self.nodes()) <= ok

        await seconds_until(ready, what="nodes Ready", within=120, interval=0.5)

    async def _node(self, name: str, pods: int) -> None:
        body: Any = node_manifest(name)
        for key in ("capacity", "allocatable"):
            body["status"][key]["pods"] = str(pods)
        await self.v1.create_node(body)

    async def all_running(self) -> bool:
        jobs = (await self.get(collection_path(API_VERSION, "MPIJob", self.ns), resourceVersion="0")).get("items") or []
        if len(jobs) != self.args.jobs:
            return False
        running = 0
        for job in jobs:
            status = job.get("status") or {}
            worker = (status.get("replicaStatuses") or {}).get("Worker") or {}
            running += status.get("state") == "Running" and worker.get("active") == self.args.workers
        progress(f"{running}/{self.args.jobs} jobs Running with every worker active")
        if running != self.args.jobs:
            return False
        pods = collection_path("v1", "Pod", self.ns)
        waiting = await self.get(pods, resourceVersion="0", fieldSelector="status.phase!=Running")
        if waiting.get("items"):
            return False
        cms = (await self.get(collection_path("v1", "ConfigMap", self.ns), resourceVersion="0")).get("items") or []
        return sum(1 for cm in cms if len(listed_pods(cm)) == self.args.workers) == self.args.jobs

    async def cached_workers(self, operator: Operator) -> int:
        return int(metric_sum(await operator.metrics(), "mpijob_worker_pods"))

    async def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> WatchRecorder:
        """A watch from the current resourceVersion (a one-item list's: cheap, and the same for every kind)."""
        rv = (await self.get("/api/v1/namespaces", limit="1"))["metadata"]["resourceVersion"]
        recorder = WatchRecorder(func, *args, **kwargs)
        await recorder.start(rv, timeout_seconds=3600)
        self.streams.append(recorder)
        return recorder

    async def create_and_run(self, operator: Operator) -> None:
        started = time.monotonic()
        self.out["load_at_first_create"] = load_average()
        path = collection_path(API_VERSION, "MPIJob", self.ns)
        await many([functools.partial(self.kube.create, path, self.manifest(n)) for n in self.groups])
        self.out["create_requests_s"] = round(time.monotonic() - started, 1)
        await seconds_until(self.all_running, what="all jobs Running", within=self.args.timeout, interval=10.0)
        self.out["create_to_all_running_s"] = round(time.monotonic() - started, 1)
        self.out["load_when_all_running"] = load_average()
        want = self.args.jobs * self.args.workers

        async def cached() -> bool:
            return await self.cached_workers(operator) >= want

        await seconds_until(cached, what="every worker pod cached", within=120, interval=1.0)
        self.out["operator_rss_mib_all_running"] = round(rss_mib(operator.pid), 1)
        self.out["operator_cached_worker_pods"] = await self.cached_workers(operator)
        self.out["operator_rss_peak_mib"] = round(rss_mib(operator.pid, "VmHWM"), 1)

    async def taint(self, cms: WatchRecorder) -> tuple[str, float]:
        """The taint, until every affected job's discovery is without its victims (the burst); returns the
        node and when it was tainted."""
        victim = self.pools[TAINT][-1]
        pods = await self.get(collection_path("v1", "Pod", self.ns), fieldSelector=f"spec.nodeName={victim}")
        victims: dict[str, set[str]] = {}
        for pod in pods.get("items") or []:
            labels = pod["metadata"]["labels"]
            if labels.get(c.LABEL_JOB_ROLE) == c.ROLE_WORKER:
                victims.setdefault(labels[c.LABEL_JOB_NAME], set()).add(pod["metadata"]["name"])
        self.out["taint_affected_jobs"] = len(victims)
        self.out["taint_victims_per_job"] = sorted({len(v) for v in victims.values()})
        await asyncio.sleep(2.0)
        tainted = time.monotonic()
        self.out["load_at_taint"] = load_average()
        await taint_node(self.api, victim)

        def clean(job: str, names: set[str]) -> bool:
            return job in victims and bool(names) and not names & victims[job]

        async def all_clean() -> bool:
            return len(first_times(cms.events, tainted, clean)) == len(victims)

        await seconds_until(all_clean, what="every affected job's discovery updated", within=900, interval=0.2)
        times = list(first_times(cms.events, tainted, clean).values())
        self.out |= summary(times, "taint_to_api_discovery")
        self.out["_taint_to_api_discovery_s"] = sorted(times)
        return victim, tainted

    async def victims_gone(self, victim: str, tainted: float) -> None:
        """The victims go once their grace period is over; then the taint group is steady."""
        field = f"spec.nodeName={victim}"

        async def gone() -> bool:
            left = await self.get(collection_path("v1", "Pod", self.ns), fieldSelector=field, resourceVersion="0")
            return not left.get("items")

        self.out["taint_to_victims_gone_s"] = round(time.monotonic() - tainted + await seconds_until(
            gone, what="victims deleted", within=600, interval=2.0
        ), 1)  # fmt: skip

    async def scale_in(self, cms: WatchRecorder) -> dict[str, set[str]]:
        kept = max(1, self.args.workers // 2)
        names = [n for n, g in self.groups.items() if g == SCALE]
        want = {n: {f"{n}-worker-{i}" for i in range(kept)} for n in names}
        path = collection_path(API_VERSION, "MPIJob", self.ns)
        patched: dict[str, float] = {}
        self.out["load_at_scale_in"] = load_average()
        first = time.monotonic()

        async def patch(name: str) -> None:
            await self.kube.merge_patch(f"{path}/{name}", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": kept}}}})
            patched[name] = time.monotonic()

        await many([functools.partial(patch, n) for n in names])
        self.out["scale_in_patch_requests_s"] = round(time.monotonic() - first, 2)

        def shown(job: str, listed: set[str]) -> bool:
            return job in want and listed == want[job]

        async def all_shown() -> bool:
            return len(first_times(cms.events, first, shown)) == len(names)

        await seconds_until(all_shown, what="every scaled-in job's discovery", within=900, interval=0.2)
        at = first_times(cms.events, first, shown)
        times = [first + at[n] - patched[n] for n in names]
        self.out |= summary(times, "scale_in_to_api_discovery")
        self.out["_scale_in_to_api_discovery_s"] = sorted(times)
        self.out["scale_in_last_job_after_first_patch_s"] = round(max(at.values()), 2)
        return {n: {f"{n}-worker-{i}" for i in range(kept, self.args.workers)} for n in names}

    async def restart(self, operator: Operator, leaving: dict[str, set[str]]) -> None:
        custom = CustomObjectsApi(self.api)
        group, version = API_VERSION.split("/")
        pods = await self.stream(self.v1.list_namespaced_pod, self.ns)
        others = [
            await self.stream(self.v1.list_namespaced_config_map, self.ns),
            await self.stream(custom.list_namespaced_custom_object, group, version, self.ns, "mpijobs"),
            await self.stream(self.v1.list_namespaced_event, self.ns),
        ]
        victims = set().union(*leaving.values())
        before: dict[str, Obj] = {}

        async def recorded() -> bool:
            # The decision is in the API once every leaving worker carries its deadline (the discovery write
            # goes first, the marks after it: a restart in between makes the decision again, later).
            listing = await self.get(collection_path("v1", "Pod", self.ns), labelSelector=f"{GROUP_LABEL}={SCALE}")
            before.clear()
            for pod in listing.get("items") or []:
                meta = pod["metadata"]
                if meta["name"] in victims and not meta.get("deletionTimestamp"):
                    before[meta["name"]] = meta.get("annotations") or {}
            return all(c.ANNOTATION_LEAVING_DEADLINE in a for a in before.values())

        self.out["scale_in_shown_to_every_leaving_mark_s"] = round(
            await seconds_until(recorded, what="leaving marks recorded", within=600, interval=1.0), 1
        )
        self.out["restart_leaving_workers_in_flight"] = f"{len(before)}/{len(victims)}"
        self.out["restart_sigterm_to_exit_s"] = round(operator.stop(), 2)
        self.out["load_at_restart"] = load_average()
        started = time.monotonic()
        operator.start()
        await self._warm_and_resumed(operator, started)
        # Until every job has had its look and before any recorded deadline, nothing is due: a write is a
        # duplicate (a steady job's, or an in-flight decision made again).
        resumed = time.time()
        self.out["restart_writes_until_every_job_reconciled"] = writes_by_resource(await operator.metrics())
        first_deadline = min(parse_rfc3339(str(a[c.ANNOTATION_LEAVING_DEADLINE])) for a in before.values())
        self.out["restart_every_job_reconciled_to_first_recorded_deadline_s"] = round(first_deadline - resumed, 1)
        await self._carried_on(pods, before, started)
        await asyncio.sleep(10.0)  # quiet: whatever the new operator still writes is counted below
        text = await operator.metrics()
        self.out["restart_operator_writes"] = writes_by_resource(text)
        self.out["restart_operator_reconciles"] = int(metric_sum(text, "mpijob_reconcile_duration_seconds_count"))
        touched = changed_jobs([e for s in [pods, *others] for e in s.events], started)
        steady = {n for n, g in self.groups.items() if g == TAINT}
        self.out["restart_steady_jobs_with_a_change"] = f"{len(steady & set(touched))}/{len(steady)}"
        self.out["restart_changes_per_in_flight_job"] = sorted({v for k, v in touched.items() if k not in steady})
        self.out["_restart_steady_jobs_changed"] = sorted(steady & set(touched))[:20]
        self.out["operator_rss_mib_after_restart"] = round(rss_mib(operator.pid), 1)

    async def _warm_and_resumed(self, operator: Operator, started: float) -> None:
        warm = resumed = None
        deadline = started + self.args.timeout
        while resumed is None and time.monotonic() < deadline:
            text = await operator.metrics()
            now = time.monotonic() - started
            if text and warm is None and len(metric_samples(text, "mpi_operator_job_info")) >= self.args.jobs:
                warm = now
            reconciles = metric_sum(text, "mpijob_reconcile_duration_seconds_count") if text else 0
            if warm is not None and reconciles >= self.args.jobs and metric_sum(text, "mpijob_workqueue_depth") == 0:
                resumed = now
            await asyncio.sleep(0.25)
        if resumed is None:
            raise TimeoutError("the restarted operator did not reconcile every job")
        self.out["restart_start_to_warm_cache_s"] = round(warm or 0.0, 2)
        self.out["restart_start_to_every_job_reconciled_s"] = round(resumed, 2)

    async def _carried_on(self, pods: WatchRecorder, before: dict[str, Obj], started: float) -> None:
        """Each leaving worker in flight is deleted at the deadline recorded before the restart."""

        async def all_deleted() -> bool:
            pods.raise_if_broken("pods")
            return set(before) <= set(deletions(pods.events))

        await seconds_until(all_deleted, what="leaving workers deleted", within=self.args.scale_in_grace + 300)
        gone = deletions(pods.events)
        late, kept_since = [], 0
        wall = time.time() - time.monotonic()
        for name, recorded in before.items():
            at, pod = gone[name]
            after = pod["metadata"].get("annotations") or {}
            kept_since += after.get(c.ANNOTATION_LEAVING_SINCE) == recorded.get(c.ANNOTATION_LEAVING_SINCE)
            late.append(wall + at - parse_rfc3339(str(recorded[c.ANNOTATION_LEAVING_DEADLINE])))
        self.out["restart_leaving_since_unchanged"] = f"{kept_since}/{len(before)}"
        self.out |= summary(late, "restart_recorded_deadline_to_deletion")
        self.out["restart_start_to_last_leaving_deleted_s"] = round(max(a for a, _ in gone.values()) - started, 2)

    async def floor(self, operator: Operator) -> None:
        """What the machine itself allows for the taint's burst: with the operator stopped, a process of its own
        (`floor_writer`: the operator's client and event loop, nothing else) writes a change to the discovery
        ConfigMap of every job of the taint group, all at once, 16 at a time (the operator's reconcilers) with no
        QPS limit; each is timed from the start until the same watch as the taint's shows it. The operator
        cannot do the taint's writes much faster than that on this testbed: its figure minus this one is its
        own part (the node event reaching it, planning)."""
        operator.stop()
        names = [f"{n}-config" for n, g in self.groups.items() if g == TAINT]
        cms = await self.stream(self.v1.list_namespaced_config_map, self.ns)
        path = collection_path("v1", "ConfigMap", self.ns)
        self.out["load_at_floor"] = load_average()
        writer = await asyncio.create_subprocess_exec(
            sys.executable, __file__, FLOOR_WRITER, str(self.kubeconfig), path, *names,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert writer.stdin is not None and writer.stdout is not None
        if (await writer.stdout.readline()).strip() != b"ready":
            raise RuntimeError("the floor's writer did not start")
        first = time.monotonic()
        writer.stdin.write(b"go\n")
        await writer.stdin.drain()
        took = (await writer.stdout.readline()).split()
        await writer.wait()
        self.out["floor_patch_requests_s"] = round(float(took[-1]), 2)

        def seen() -> dict[str, float]:
            # Per ConfigMap: seconds from the start to the watch event with the floor's key (one write each).
            return {
                str(cm["metadata"]["name"]): at - first
                for at, kind, cm in cms.events
                if kind == "MODIFIED" and (cm.get("data") or {}).get("bench-floor")
            }

        async def all_seen() -> bool:
            return len(seen()) >= len(names)

        await seconds_until(all_seen, what="every floor write in the watch", within=300, interval=0.2)
        self.out |= summary(list(seen().values()), "floor_burst_start_to_watch")

    async def cleanup(self, operator: Operator) -> None:
        # Watches the server ended early and the recorder opened again (their events are all kept).
        self.out["watch_streams_resumed"] = sum(stream.resumed for stream in self.streams)
        for stream in self.streams:
            await stream.stop()
        operator.stop()
        with contextlib.suppress(Exception):
            await self.kube.delete(f"/api/v1/namespaces/{self.ns}")
        for name in self.nodes():
            with contextlib.suppress(Exception):
                await delete_node(self.api, name)


async def bench(kubeconfig: Path, args: argparse.Namespace, log_dir: Path) -> Obj:
    api = await load_api_client(kubeconfig)
    api.user_agent = BENCH_AGENT  # the benchmark's own requests, told apart in the audit log (--audit)
    stamp = int(time.time())
    run = Run(api, kubeconfig, args, stamp)
    operator = Operator(kubeconfig, log_dir, stamp)
    try:
        await run.setup()
        operator.start()
        await _phases(run, operator)
        if args.audit:
            with (Path(args.dir) / "audit.log").open("rb") as log:
                run.out |= scale_in_trace(log, {n for n, g in run.groups.items() if g == SCALE})
    except Exception as err:  # the figures so far are kept and printed with what stopped the run
        run.out["error"] = repr(err)
    finally:
        await run.cleanup(operator)
        await api.close()
    return run.out


async def _quiet(operator: Operator, still: float = 10.0, within: float = 900.0) -> float:
    """Seconds until the operator's write count has not moved for `still` seconds: each phase starts on a
    quiet operator, so its figures are not those of the previous phase's trailing writes (status, Events)."""
    started = time.monotonic()
    last, since = -1.0, started
    while time.monotonic() - since < still:
        if time.monotonic() - started > within:
            raise TimeoutError("the operator did not go quiet")
        writes = metric_sum(await operator.metrics(), "mpijob_api_writes_total")
        if writes != last:
            last, since = writes, time.monotonic()
        await asyncio.sleep(1.0)
    return round(time.monotonic() - started - still, 1)


@contextlib.contextmanager
def _profiled(operator: Operator, args: argparse.Namespace, phase: str) -> Iterator[None]:
    """With `--profile DIR`: py-spy (from PyPI, in this venv) samples the operator during one phase only,
    into DIR/PHASE.txt (raw collapsed stacks; summarise with bench/profile_summary.py)."""
    if not args.profile:
        yield
        return
    out = Path(args.profile) / f"{phase}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    argv = [str(spy), "record", "--pid", str(operator.pid), "--nonblocking", "--format", "raw", "--rate", "50"]
    profiler = subprocess.Popen([*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            profiler.wait(30)
        except subprocess.TimeoutExpired:
            profiler.kill()


async def _phases(run: Run, operator: Operator) -> None:
    progress(f"creating {run.args.jobs} jobs x {run.args.workers} workers")
    await run.create_and_run(operator)
    progress("all Running; waiting for the operator to go quiet")
    run.out["all_running_to_operator_quiet_s"] = await _quiet(operator)
    progress("taint")
    cms = await run.stream(run.v1.list_namespaced_config_map, run.ns)
    # Two profiles: the burst until every affected job's discovery is clean, then the rest of the phase
    # (the deferred passes, the victims' deletions): one profile of both could not tell them apart.
    with _profiled(operator, run.args, "taint"):
        victim, tainted = await run.taint(cms)
    progress("every affected job's discovery is clean; waiting for the victims to go")
    with _profiled(operator, run.args, "taint-rest"):
        await run.victims_gone(victim, tainted)
    run.out["victims_gone_to_operator_quiet_s"] = await _quiet(operator)
    progress(f"scale-in of {run.args.scale_in_jobs} jobs")
    with _profiled(operator, run.args, "scale-in"):
        leaving = await run.scale_in(cms)
    progress("operator restart")
    await run.restart(operator, leaving)
    progress("the floor: the taint's writes by a client doing nothing else")
    await run.floor(operator)


FLOOR_WRITER = "--floor-writer"


def floor_writer(kubeconfig: str, path: str, names: list[str]) -> None:
    """The floor's writes (`Run.floor`), in a process that does nothing else, on the operator's client and event
    loop: connects, says "ready", writes every ConfigMap once a line comes on stdin, 16 at a time with no QPS
    limit, and says how long the requests took."""

    async def write() -> None:
        api = await load_api_client(kubeconfig)
        client = Client(api, qps=0)
        await client.get(path.rsplit("/", 1)[0])  # the namespace: connected before the clock starts
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        started = time.monotonic()
        body = {"data": {"bench-floor": "x" * 400}}  # about the size of the operator's discovery patch
        await many([functools.partial(client.merge_patch, f"{path}/{n}", body) for n in names])
        print(f"done {time.monotonic() - started:.3f}", flush=True)
        await api.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(write())


def main() -> int:
    if sys.argv[1:2] == [FLOOR_WRITER]:
        floor_writer(sys.argv[2], sys.argv[3], sys.argv[4:])
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=8, help="worker nodes per group (taint group, scale-in group)")
    parser.add_argument("--scale-in-jobs", type=int, default=500)
    parser.add_argument("--scale-in-grace", type=int, default=180, help="the scale-in group's grace period, s")
    parser.add_argument("--timeout", type=float, default=3600.0, help="for all Running, and for the restart")
    parser.add_argument("--dir", default=str(ROOT / ".cache" / "bench-testbed"))
    parser.add_argument("--logs", default="/tmp/mpijob-bench-scale", help="the operators' logs (kept)")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--profile", default=None, help="a directory: py-spy profiles of the taint's burst, its rest, the scale-in"
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="the API server's audit log of MPIJob and ConfigMap writes: the scale-in's patch -> operator write",
    )
    args = parser.parse_args()
    if args.profile and not (Path(sys.executable).parent / "py-spy").exists():
        parser.error("--profile needs py-spy in this venv: .venv/bin/pip install py-spy")
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    if args.audit:
        policy = Path(args.logs) / "audit-policy.yaml"
        policy.write_text(json.dumps(AUDIT_POLICY))  # JSON is YAML
        os.environ["MPIJOB_TESTBED_AUDIT_POLICY"] = str(policy)
    if not 0 < args.scale_in_jobs < args.jobs:
        parser.error("--scale-in-jobs must be between 0 and --jobs")
    report, o = measure_on_testbed(args.dir, "scale", lambda kubeconfig: bench(kubeconfig, args, Path(args.logs)))
    print(
        f"## At scale: {o['jobs']} elastic jobs x {o['workers_per_job']} workers, one spot taint, a scale-in of "
        f"{o['scale_in_jobs']} jobs, an operator restart (operator defaults)\n"
    )
    print_table(o, round_floats=False)
    return finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
