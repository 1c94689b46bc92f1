"""Side by side: the reference operator (kubeflow/mpi-operator, Go, built by bench/reference/build.sh) and
mpijob, each on a fresh testbed, with the same manifests and the same client settings (QPS 50, burst 100,
4 worker threads, leader election on). Prints a Markdown table with ratios (mpijob / reference).

    .venv/bin/python bench/compare.py                    # 50 MPIJobs x 8 workers (OpenMPI, no elasticPolicy)
    .venv/bin/python bench/compare.py --jobs 500         # 500 x 8 (--jobs 1000 for 1000 x 8)
    .venv/bin/python bench/compare.py --jobs 2 --idle 5  # the smoke test's size
    .venv/bin/python bench/compare.py --jobs 1250 --only mpijob --no-scale-in  # RSS with 10,000 worker pods
    .venv/bin/python bench/compare.py --elastic          # mpijob's jobs elastic, the reference's as before
    make compare COMPARE_ARGS="--jobs 500"               # the same from a fresh clone (builds what it needs)
    .venv/bin/python bench/compare.py --jobs 10 --idle 5 --plots docs/img   # + PNG plots of the scale-in

What is measured, per operator (each a separate process, so /proc tells its own CPU and memory):
- create -> every worker and launcher pod Running (the benchmark's own watch sees the last one);
- operator CPU seconds (utime+stime from /proc/<pid>/stat) to get there, and per job;
- RSS (VmRSS) with the jobs running;
- idle: CPU, reconciles and API requests during `--idle` seconds when nothing changes;
- reconciles (reference: its "Finished syncing" log lines; mpijob: its counters, printed on SIGUSR1) and
  API requests (the API server's audit log, by the operator's user agent; Lease renewals counted apart),
  also per job by verb and resource until quiet and while idle (the tables under the main one);
- all Running -> converged: every job's Running condition and (static discovery) all its workers in
  discover_hosts.sh written, and the requests per job until then (an operator that defers work goes quiet
  before it is done: the reference's rate-limited queue);
- scale-in by replicas W -> W/2 on every job: time until discover_hosts.sh lists exactly the kept workers,
  and how many removed workers got their deletion (SIGTERM on a real node) while still listed there.

Figures come from a shared 2-core machine: run it twice, and read the ratios, not the absolute values.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (first: the code measured is this checkout's)
import yaml
from plots import compare_plots

from mpijob.api import constants as c
from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import load_api_client
from mpijob_testbed import cluster
from mpijob_testbed.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
# MPIJOB_COMPARE_WORK: another directory, so two worktrees sharing one .cache can run side by side.
WORK = Path(os.environ.get("MPIJOB_COMPARE_WORK") or ROOT / ".cache" / "compare")
NAMESPACE = "bench"
BENCH_AGENT = "mpijob-bench"
ADMIN_USER = "mpijob-testbed-admin"
CLK_TCK = os.sysconf("SC_CLK_TCK")
QPS, BURST, THREADS = 50, 100, 4
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata", "users": [ADMIN_USER]}, {"level": "None"}],
}
_WORKER = re.compile(r"([a-z0-9-]+-worker-\d+)\.")


def say(message: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the workload ----------------------------------------------------------------------------------------
def manifest(name: str, workers: int, elastic: bool = False) -> dict[str, Any]:
    """The same MPIJob for both operators: OpenMPI (the default), no elasticPolicy, no extras. `elastic`
    (mpijob only, `--elastic`): with an elasticPolicy, so the job gets its elastic objects too (a
    PodDisruptionBudget, the launcher's ServiceAccount, Role and RoleBinding, its discovery annotation)."""
    image = "mpioperator/openmpi:latest"
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "launcher", "image": image, "command": ["mpirun", "hostname"]}]
                        }
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{"name": "worker", "image": image}]}},
                },
            },
        },
    }
    if elastic:
        job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": workers}  # type: ignore[index]
    return job


# -- the two operators -----------------------------------------------------------------------------------
@dataclass
class Side:
    name: str
    lease: tuple[str, str]  # namespace, name
    argv: Callable[[Path], list[str]]
    crd: Callable[[], dict[str, Any]]
    reconciles: Callable[[Path, int], int] = lambda log, pid: 0


def reference_side() -> Side:
    out = Path(os.environ.get("MPIJOB_REFERENCE_BIN", ROOT / ".cache" / "reference"))

    def argv(kubeconfig: Path) -> list[str]:
        return [
            str(out / "mpi-operator"),
            f"--kubeConfig={kubeconfig}",
            f"--threadiness={THREADS}",
            f"--kube-api-qps={QPS}",
            f"--kube-api-burst={BURST}",
            "--lock-namespace=mpi-operator",
        ]

    def reconciles(log: Path, pid: int) -> int:
        return log.read_text(errors="replace").count("Finished syncing job")

    return Side(
        f"reference ({(out / 'version').read_text().strip()})",
        ("mpi-operator", "mpi-operator"),
        argv,
        lambda: yaml.safe_load((out / "crd.yaml").read_text()),
        reconciles,
    )


def mpijob_side() -> Side:
    from mpijob.api.crd import crd

    def argv(kubeconfig: Path) -> list[str]:
        return [
            str(ROOT / ".venv" / "bin" / "mpijob"),
            "operator",
            f"--kubeconfig={kubeconfig}",
            f"--workers={THREADS}",
            f"--kube-api-qps={QPS}",
            f"--kube-api-burst={BURST}",
            "--leader-elect",
            "--lock-namespace=mpijob-system",
            # MPIJOB_COMPARE_LOG_LEVEL=DEBUG: every reconcile's plan in the log (where the requests go).
            f"--log-level={os.environ.get('MPIJOB_COMPARE_LOG_LEVEL', 'WARNING')}",
        ]

    def reconciles(log: Path, pid: int) -> int:
        size = log.stat().st_size
        os.kill(pid, signal.SIGUSR1)
        for _ in range(100):
            time.sleep(0.05)
            if log.stat().st_size > size:
                break
        found = re.findall(r"stats: reconciles=(\d+)", log.read_text(errors="replace"))
        return int(found[-1]) if found else -1

    return Side("mpijob", ("mpijob-system", "mpijob-operator"), argv, crd, reconciles)


# -- measuring a process -----------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """VmRSS (now) or VmHWM (the peak so far) of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class AuditCount:
    requests: int = 0
    leases: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)

    def add(self, more: AuditCount) -> None:
        self.requests += more.requests
        self.leases += more.leases
        for verb, n in more.by_verb.items():
            self.by_verb[verb] = self.by_verb.get(verb, 0) + n


def audit_since(path: Path, offset: int) -> tuple[AuditCount, int]:
    """Requests of the operator (admin user, not the benchmark's agent) in the audit log after `offset`."""
    count = AuditCount()
    if not path.exists():
        return count, offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        event = json.loads(line)
        if (event.get("userAgent") or "").startswith(BENCH_AGENT):
            continue
        if (event.get("objectRef") or {}).get("resource") == "leases":
            count.leases += 1
            continue
        count.requests += 1
        ref = event.get("objectRef") or {}
        # "create pods", "update mpijobs/status": where the requests go, for the breakdown table.
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        what = f"{event['verb']} {ref.get('resource', '?')}{sub}"
        count.by_verb[what] = count.by_verb.get(what, 0) + 1
    return count, offset + end


# -- watching what the user sees ----------------------------------------------------------------------
class View:
    """The benchmark's own watches on pods and ConfigMaps of the namespace: which pods run, and what each
    job's discover_hosts.sh lists. resourceVersions (etcd's global revision) order a pod's deletion against
    the ConfigMap versions exactly, whichever of the two watch streams delivers first."""

    def __init__(self) -> None:
        self.pods: dict[str, tuple[str, bool]] = {}  # name -> (phase, terminating)
        self.running = 0
        self.listed: dict[str, set[str]] = {}  # job -> worker names in discover_hosts.sh now
        self.history: dict[str, list[tuple[int, set[str]]]] = {}  # job -> (resourceVersion, listed) versions
        self.terminated: dict[str, tuple[int, str]] = {}  # pod -> (resourceVersion first seen terminating, job)
        self.deleted_at: dict[str, float] = {}  # pod -> monotonic time its DELETED event arrived
        self.job_running: set[str] = set()  # jobs whose status has the Running condition True
        self.changed = asyncio.Event()

    def on_job(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        conditions = (obj.get("status") or {}).get("conditions") or []
        if kind != "DELETED" and any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions):
            self.job_running.add(name)
        else:
            self.job_running.discard(name)
        self.changed.set()

    def converged(self, names: list[str], workers: int, discovery: bool) -> int:
        """How many of the jobs show what the user waits for once the pods run: the Running condition in the
        status and (`discovery`) every worker in discover_hosts.sh."""
        return sum(
            1 for n in names if n in self.job_running and (not discovery or len(self.listed.get(n, ())) == workers)
        )

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        phase = (obj.get("status") or {}).get("phase") or ""
        terminating = kind == "DELETED" or meta.get("deletionTimestamp") is not None
        before = self.pods.get(name)
        if before and before[0] == "Running" and not before[1]:
            self.running -= 1
        if kind == "DELETED":
            self.pods.pop(name, None)
            self.deleted_at.setdefault(name, time.monotonic())
        else:
            self.pods[name] = (phase, terminating)
            if phase == "Running" and not terminating:
                self.running += 1
        if terminating and name not in self.terminated:
            job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME, "")
            self.terminated[name] = (int(meta["resourceVersion"]), job)
        self.changed.set()

    def on_config_map(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if not meta["name"].endswith("-config"):
            return
        job = meta["name"].removesuffix("-config")
        script = (obj.get("data") or {}).get(c.DISCOVER_HOSTS_KEY, "")
        listed = set(_WORKER.findall(script)) if kind != "DELETED" else set()
        self.listed[job] = listed
        self.history.setdefault(job, []).append((int(meta["resourceVersion"]), listed))
        self.changed.set()

    def listed_when_terminated(self, pods: set[str]) -> set[str]:
        """Those of `pods` that the job's discover_hosts.sh still listed when their deletion was written."""
        out = set()
        for pod in pods & set(self.terminated):
            rv, job = self.terminated[pod]
            versions = [listed for cm_rv, listed in self.history.get(job, []) if cm_rv < rv]
            if versions and pod in versions[-1]:
                out.add(pod)
        return out

    async def until(self, check: Callable[[], bool], limit: float, what: str) -> float:
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > limit:
                raise RuntimeError(f"timed out after {limit:.0f}s waiting for {what}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)
        return time.monotonic()


async def watch(client: Client, path: str, handle: Callable[[str, dict[str, Any]], None]) -> None:
    for _ in range(60):
        try:
            listing = await client.get(path)
            break
        except ApiError as err:
            # A CRD installed a moment ago: its storage answers 429 (re)initializing, or 404, for a while.
            if err.status not in (404, 429):
                raise
            await asyncio.sleep(0.5)
    else:
        raise RuntimeError(f"could not list {path}")
    for item in listing.get("items") or []:
        handle("ADDED", item)
    rv = listing["metadata"]["resourceVersion"]
    while True:
        response = await client.api.call_api(
            path,
            "GET",
            query_params=[("watch", "1"), ("resourceVersion", rv), ("allowWatchBookmarks", "true")],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=3600,
        )
        raw = response[0] if isinstance(response, tuple) else response
        async for line in raw.content:
            event = json.loads(line)
            obj = event["object"]
            rv = obj["metadata"].get("resourceVersion", rv)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                handle(event["type"], obj)


# -- one side ----------------------------------------------------------------------------------------
async def wait_lease(client: Client, namespace: str, name: str, limit: float = 120) -> None:
    async def held() -> bool:
        lease = await client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
        return bool((lease.get("spec") or {}).get("holderIdentity"))

    await wait_until(
        held, what=f"the operator to take its Lease {namespace}/{name}", within=limit, retry_on=(ApiError,)
    )


async def install_crd(client: Client, body: dict[str, Any]) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    await client.create(path, body)
    for _ in range(300):
        current = await client.get(f"{path}/{body['metadata']['name']}")
        if any(
            cond["type"] == "Established" and cond["status"] == "True"
            for cond in (current.get("status") or {}).get("conditions") or []
        ):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("CRD not established")


async def settle(audit: Path, offset: int, count: AuditCount, seconds: float, limit: float) -> tuple[float, int]:
    """Waits until the operator makes no request (Leases apart) for `seconds`, at most until `limit`
    (monotonic); adds what it made meanwhile to `count`. Returns when it went quiet, and the audit offset."""
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < seconds and time.monotonic() < limit:
        await asyncio.sleep(0.5)
        more, offset = audit_since(audit, offset)
        if more.requests:
            quiet_since = time.monotonic()
            count.add(more)
    return quiet_since, offset


def reads_discovery(side: str, args: argparse.Namespace) -> bool:
    """Whether convergence includes discover_hosts.sh: not for mpijob's elastic jobs, whose discovery is not
    the script read here."""
    return not (args.elastic and side == "mpijob")


def converged_check(view: View, names: list[str], side: str, args: argparse.Namespace) -> Callable[[], bool]:
    discovery = reads_discovery(side, args)
    return lambda: view.converged(names, args.workers, discovery) == len(names)


async def until_converged(
    converged: asyncio.Task[float],
    view: View,
    names: list[str],
    audit: Path,
    offset: int,
    count: AuditCount,
    done: float,
    out: dict[str, Any],
    args: argparse.Namespace,
    side: str,
) -> int:
    """Quiet is not done: an operator whose queue holds jobs back for later (the reference's rate limiter)
    goes quiet for seconds before it has written most jobs' Running status and discovery. So also: from all
    pods Running until every job shows the Running condition and (static discovery) all its workers in
    discover_hosts.sh (`converged`, started when all pods ran), then quiet again; and the requests per job
    until then."""
    try:
        out["running_to_converged_s"] = await converged - done
    except RuntimeError:  # timed out: reported below, not fatal
        out["running_to_converged_s"] = float("nan")
    discovery = reads_discovery(side, args)
    out["converged_jobs"] = f"{view.converged(names, args.workers, discovery)}/{len(names)}"
    more, offset = audit_since(audit, offset)
    count.add(more)
    _, offset = await settle(audit, offset, count, args.settle, time.monotonic() + args.converge_timeout)
    out["api_requests_per_job_converged"] = count.requests / len(names)
    out["api_requests_by_verb_converged"] = count.by_verb
    return offset


async def measure(side: Side, kubeconfig: Path, audit: Path, args: argparse.Namespace) -> dict[str, Any]:
    api = await load_api_client(str(kubeconfig))
    api.user_agent = BENCH_AGENT
    client = Client(api, qps=0, burst=1)
    jobs, workers = args.jobs, args.workers
    names = [f"job-{i}" for i in range(jobs)]
    out: dict[str, Any] = {"operator": side.name, "jobs": jobs, "workers": workers}
    await install_crd(client, side.crd())
    for ns in (NAMESPACE, side.lease[0]):
        await client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    log = WORK / f"{side.name.split()[0]}-operator.log"
    with log.open("w") as log_file:
        # Popen only forks: nothing here waits on the child.
        env = dict(os.environ)
        if args.tracemalloc and side.name == "mpijob":
            env["PYTHONTRACEMALLOC"] = str(args.tracemalloc)
        proc = subprocess.Popen(side.argv(kubeconfig), stdout=log_file, stderr=subprocess.STDOUT, env=env)  # noqa: ASYNC220
    view = View()
    profiler: subprocess.Popen[bytes] | None = None
    tasks = [
        asyncio.create_task(watch(client, f"/api/v1/namespaces/{NAMESPACE}/pods", view.on_pod)),
        asyncio.create_task(watch(client, f"/api/v1/namespaces/{NAMESPACE}/configmaps", view.on_config_map)),
        asyncio.create_task(watch(client, f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs", view.on_job)),
    ]
    try:
        await wait_lease(client, *side.lease)
        if args.profile and side.name == "mpijob":
            # Collapsed stacks of the whole run (py-spy from PyPI); summarise with bench/profile_summary.py.
            profiler = subprocess.Popen(  # noqa: ASYNC220 (only forks)
                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(proc.pid), "--nonblocking"]
                + ["--format", "raw", "--rate", "50", "-o", args.profile],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        await asyncio.sleep(3.0)  # caches filled: the clock starts at the first create, not at start-up
        pid = proc.pid
        out["rss_mib_at_start"] = rss_mib(pid)
        out["load_at_start"] = load_average()
        _, offset = audit_since(audit, 0)
        reconciles0 = side.reconciles(log, pid)
        cpu0 = cpu_seconds(pid)
        say(f"{side.name}: creating {jobs} MPIJobs x {workers} workers")
        start = time.monotonic()
        path = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"
        elastic = args.elastic and side.name == "mpijob"
        for i in range(0, jobs, 20):
            await asyncio.gather(*(client.create(path, manifest(n, workers, elastic)) for n in names[i : i + 20]))
        pods = jobs * (workers + 1)
        done = await view.until(lambda: view.running >= pods, args.timeout, f"{pods} pods Running")
        out["create_to_all_running_s"] = done - start
        out["cpu_s_to_all_running"] = cpu_seconds(pid) - cpu0
        out["cpu_ms_per_job"] = out["cpu_s_to_all_running"] / jobs * 1000
        # Settled: no request from the operator (Leases apart) for `--settle` seconds (status, discovery and
        # Event writes may trail the pods), at most `--timeout`.
        # From now on, also: when every job's status and discovery are written (see until_converged).
        check = converged_check(view, names, side.name, args)
        converged = asyncio.create_task(view.until(check, args.converge_timeout, "every job's status and discovery"))
        converge, offset = audit_since(audit, offset)
        quiet_since, offset = await settle(audit, offset, converge, args.settle, done + args.timeout)
        out["running_to_quiet_s"] = quiet_since - done
        out["rss_mib_with_jobs"] = rss_mib(pid)
        out["load_when_running"] = load_average()
        reconciles1 = side.reconciles(log, pid)
        out["reconciles_per_job"] = (reconciles1 - reconciles0) / jobs
        out["api_requests_per_job"] = converge.requests / jobs
        out["api_requests_by_verb"] = dict(converge.by_verb)
        offset = await until_converged(converged, view, names, audit, offset, converge, done, out, args, side.name)
        # The same work done on both sides (every status, discovery and Event write), idle time included.
        out["cpu_s_to_converged"] = cpu_seconds(pid) - cpu0

        say(f"{side.name}: all Running after {out['create_to_all_running_s']:.1f}s; idling {args.idle:.0f}s")
        cpu1 = cpu_seconds(pid)
        await asyncio.sleep(args.idle)
        out["idle_cpu_s_per_30s"] = (cpu_seconds(pid) - cpu1) * 30 / args.idle
        idle, offset = audit_since(audit, offset)
        reconciles2 = side.reconciles(log, pid)
        out["idle_reconciles"] = reconciles2 - reconciles1
        out["idle_api_requests"] = idle.requests
        out["idle_lease_requests"] = idle.leases
        out["idle_api_requests_by_verb"] = idle.by_verb

        out["rss_mib_peak"] = rss_mib(pid, "VmHWM")
        if args.tracemalloc and side.name == "mpijob":
            os.kill(pid, signal.SIGUSR2)  # the operator logs its largest allocation sites
            await asyncio.sleep(5)
        if args.no_scale_in:
            return out
        # Scale-in by replicas: W -> W/2 on every job at once.
        kept = max(1, workers // 2)
        say(f"{side.name}: scaling every job in, {workers} -> {kept} workers")
        cpu2 = cpu_seconds(pid)
        patched: dict[str, float] = {}
        for name in names:
            await client.merge_patch(f"{path}/{name}", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": kept}}}})
            patched[name] = time.monotonic()
        want = {n: {f"{n}-worker-{i}" for i in range(kept)} for n in names}
        shown: dict[str, float] = {}

        def all_shown() -> bool:
            now = time.monotonic()
            for n in names:
                if n not in shown and view.listed.get(n) == want[n]:
                    shown[n] = now
            victims_gone = all(f"{n}-worker-{i}" not in view.pods for n in names for i in range(kept, workers))
            return len(shown) == len(names) and victims_gone

        try:
            await view.until(all_shown, args.scale_in_timeout, "discovery to show the kept set, victims gone")
        except RuntimeError:
            # Reported, not fatal: the reference operator can take many minutes here (its rate-limited queue).
            say(f"{side.name}: scale-in not finished after {args.scale_in_timeout:.0f}s")
        delays = [shown[n] - patched[n] for n in names if n in shown]
        out["scale_in_jobs_done"] = f"{len(shown)}/{len(names)}"
        out["scale_in_discovery_s_median"] = statistics.median(delays) if delays else float("nan")
        out["scale_in_discovery_s_max"] = max(delays) if len(delays) == len(names) else float("nan")
        victims = {f"{n}-worker-{i}" for n in names for i in range(kept, workers)}
        out["scale_in_victims"] = len(victims)
        # Per job and per victim, for the plots (bench/plots.py), from the first patch.
        first = min(patched.values())
        out["_scale_in_delays"] = sorted(delays)
        out["_scale_in_shown_at"] = sorted(t - first for t in shown.values())
        out["_victims_deleted_at"] = sorted(view.deleted_at[v] - first for v in victims if v in view.deleted_at)
        out["victims_terminated_while_listed"] = len(view.listed_when_terminated(victims))
        await asyncio.sleep(args.settle)
        out["scale_in_cpu_s"] = cpu_seconds(pid) - cpu2
        scale, offset = audit_since(audit, offset)
        out["scale_in_api_requests_per_job"] = scale.requests / jobs
        out["reconciles_total"] = side.reconciles(log, pid) - reconciles0
        out["rss_mib_end"] = rss_mib(pid)
        out["rss_mib_peak"] = rss_mib(pid, "VmHWM")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if args.profile and side.name == "mpijob" and profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        await api.close()
    return out


def run_side(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    state = WORK / f"testbed-{side.name.split()[0]}"
    policy = WORK / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    os.environ["MPIJOB_TESTBED_AUDIT_POLICY"] = str(policy)
    nodes = max(2, math.ceil(args.jobs * (args.workers + 1) / 100) + 1)  # 110 pods per kwok node
    if cluster.status(state).exists:
        cluster.down(state, echo=say)
    say(f"{side.name}: fresh testbed with {nodes} nodes in {state}")
    testbed = cluster.up(nodes, state, echo=say)
    try:
        return asyncio.run(measure(side, testbed.kubeconfig, state / "audit.log", args))
    finally:
        if not args.keep:
            cluster.down(state, echo=say)


# -- the report -----------------------------------------------------------------------------------------
ROWS = (
    ("create_to_all_running_s", "create -> every worker and launcher Running, s", "{:.1f}"),
    ("cpu_s_to_all_running", "operator CPU to get there, s", "{:.2f}"),
    ("cpu_ms_per_job", "operator CPU per job, ms", "{:.0f}"),
    ("running_to_quiet_s", "all Running -> operator quiet (last status/discovery/Event write), s", "{:.1f}"),
    ("reconciles_per_job", "reconciles per job (until quiet)", "{:.1f}"),
    ("api_requests_per_job", "API requests per job (until quiet)", "{:.1f}"),
    ("running_to_converged_s", "all Running -> every job's Running status and discovery written, s", "{:.1f}"),
    ("converged_jobs", "jobs with their Running status and discovery written (within --converge-timeout)", "{}"),
    ("api_requests_per_job_converged", "API requests per job (until that, and quiet)", "{:.1f}"),
    ("cpu_s_to_converged", "operator CPU from the first create until then, s", "{:.2f}"),
    ("rss_mib_at_start", "RSS at start, MiB", "{:.0f}"),
    ("rss_mib_with_jobs", "RSS with the jobs running, MiB", "{:.0f}"),
    ("rss_mib_peak", "RSS peak (VmHWM) over the run, MiB", "{:.0f}"),
    ("idle_cpu_s_per_30s", "idle CPU per 30 s, s", "{:.3f}"),
    ("idle_reconciles", "reconciles while idle", "{}"),
    ("idle_api_requests", "API requests while idle (Lease renewals apart)", "{}"),
    ("idle_lease_requests", "Lease requests while idle", "{}"),
    ("scale_in_discovery_s_median", "scale-in W -> W/2: discovery shows the kept set, median s", "{:.2f}"),
    ("scale_in_jobs_done", "scale-in: jobs whose discovery shows the kept set (within --scale-in-timeout)", "{}"),
    ("scale_in_discovery_s_max", "scale-in: discovery shows the kept set, last job, s", "{:.2f}"),
    ("victims_terminated_while_listed", "scale-in: victims deleted while still in discovery", "{}"),
    ("scale_in_victims", "scale-in: victims", "{}"),
    ("scale_in_cpu_s", "scale-in: operator CPU, s", "{:.2f}"),
    ("scale_in_api_requests_per_job", "scale-in: API requests per job", "{:.1f}"),
    ("load_at_start", "machine load average (1/5/15 min) at the first create", "{}"),
    ("load_when_running", "machine load average when all pods were Running", "{}"),
)


def table(ref: dict[str, Any], ours: dict[str, Any]) -> str:
    lines = [
        f"| {ref['jobs']} MPIJobs x {ref['workers']} workers | {ref['operator']} | mpijob | mpijob / reference |",
        "|---|---|---|---|",
    ]
    for key, label, fmt in ROWS:
        a, b = ref.get(key), ours.get(key)
        if a is None or b is None:
            continue
        numbers = isinstance(a, int | float) and isinstance(b, int | float)
        ratio = f"{b / a:.2f}x" if numbers and a and not math.isnan(a) and not math.isnan(b) else "-"
        lines.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    return "\n".join(lines)


def breakdown(
    ref: dict[str, Any], ours: dict[str, Any], phase: str = "until quiet", key: str = "", suffix: str = ""
) -> str:
    """Requests per job by verb and resource (the audit log's objectRef), both sides: until quiet, (key
    "idle_") while idle, or (suffix "_converged") until every job's status and discovery are written."""
    a = ref.get(f"{key}api_requests_by_verb{suffix}") or {}
    b = ours.get(f"{key}api_requests_by_verb{suffix}") or {}
    jobs = ref["jobs"]
    lines = [f"| requests per job {phase} | {ref['operator']} | mpijob |", "|---|---|---|"]
    for what in sorted(set(a) | set(b), key=lambda w: (-(a.get(w, 0) + b.get(w, 0)), w)):
        lines.append(f"| {what} | {a.get(what, 0) / jobs:.2f} | {b.get(what, 0) / jobs:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle measurement")
    parser.add_argument("--settle", type=float, default=5.0, help="quiet seconds that count as converged")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument(
        "--converge-timeout",
        type=float,
        default=300.0,
        help="after all pods run, wait at most this long for every job's Running status and discovery",
    )
    parser.add_argument("--scale-in-timeout", type=float, default=600.0, help="give up on the scale-in after this")
    parser.add_argument("--only", choices=("reference", "mpijob"), default=None)
    parser.add_argument("--keep", action="store_true", help="leave the testbeds running")
    parser.add_argument("--json", default=None, help="also write the raw figures here")
    parser.add_argument("--plots", default=None, help="also write PNG plots of the scale-in into this directory")
    parser.add_argument("--profile", default=None, help="py-spy collapsed stacks of the mpijob operator to this file")
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        help="trace mpijob's allocations (N frames) and log the largest sites after the idle phase (slow)",
    )
    parser.add_argument(
        "--no-scale-in",
        action="store_true",
        help="stop after the idle measurement (e.g. --jobs 1250 --only mpijob: RSS with 10,000 worker pods cached)",
    )
    parser.add_argument(
        "--elastic",
        action="store_true",
        help="mpijob's jobs with an elasticPolicy (the reference's as before; implies --no-scale-in: elastic "
        "discovery is not the script this benchmark reads)",
    )
    args = parser.parse_args()
    args.no_scale_in = args.no_scale_in or args.elastic
    if args.profile and not (Path(sys.executable).parent / "py-spy").exists():
        parser.error("--profile needs py-spy in this venv: .venv/bin/pip install py-spy")
    WORK.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", str(ROOT / "bench" / "reference" / "build.sh")], check=True, stdout=sys.stderr)
    sides = [s for s in (reference_side(), mpijob_side()) if args.only is None or s.name.startswith(args.only)]
    results = [run_side(side, args) for side in sides]
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "results": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if args.plots:
        for plot in compare_plots(results, Path(args.plots)):
            print(f"plot: {plot}", file=sys.stderr)
    if len(results) == 2:
        print(table(results[0], results[1]))
        print()
        print(breakdown(results[0], results[1]))
        print()
        print(breakdown(results[0], results[1], "until every job's status and discovery are written", "", "_converged"))
        print()
        print(breakdown(results[0], results[1], "while idle", "idle_"))
    else:
        print(json.dumps(results, indent=2))
    print(f"\ncommand: {report['command']}  ({report['when']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
