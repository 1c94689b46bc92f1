"""`mpijob-testbed demo`: the seed's spot-node story (kubeflow/mpi-operator#410), played on the local testbed.

4 elastic workers spread over node-1 (on-demand) and node-2 (spot). node-2 gets the taint the AWS Node
Termination Handler puts on a spot interruption notice. The operator scales the job in by exactly the two
workers on node-2: they leave Horovod's discovery first, their pods go after the grace period, nothing is
recreated, and node-1's workers keep running untouched. Then the spot node is replaced (node-2 is deleted, a new
spot node joins) and the job grows back to its 4 workers by itself (regrow, on by default), under new names.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.api.objects import is_leaving
from mpijob.cli.elastic import pod_table
from mpijob.cli.kube import client, job_path, worker_pods
from mpijob.cli.operator import install_crd
from mpijob.kube.client import ApiError, Client
from mpijob_testbed import cluster
from mpijob_testbed.launcher_view import launcher_view
from mpijob_testbed.nodes import (
    CAPACITY_TYPE_LABELS,
    SPOT,
    SPOT_ITN_TAINT,
    create_node,
    delete_node,
    taint_node,
    untaint_node,
)
from mpijob_testbed.waiting import seconds_until

NAMESPACE = "mpijob-demo"
JOB = "train"
GRACE = 10
WORKER_CPU = "14"
# The new spot node that replaces node-2 (a name the testbed's own nodes never have).
REPLACEMENT = "spot-replacement"


def register(subparsers: Any) -> None:
    demo = subparsers.add_parser("demo", help="the spot-node scale-in scenario on the local testbed")
    demo.add_argument("--keep", action="store_true", help="leave the testbed, operator and job running")
    demo.add_argument("--dir", default=None, help="testbed state directory (default: <repo>/.testbed)")
    demo.set_defaults(func=_demo)


class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def now(self) -> float:
        return time.monotonic() - self.start

    def say(self, message: str) -> None:
        print(f"[{self.now():6.1f}s] {message}", flush=True)

    def mark(self, step: str, seconds: float) -> None:
        self.marks.append((step, seconds))


def _manifest() -> dict[str, Any]:
    on_nodes = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["node-1", "node-2", REPLACEMENT],
                            }
                        ]
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": {
            "slotsPerWorker": 1,
            "elasticPolicy": {
                "minReplicas": 2,
                "maxReplicas": 8,
                "nodeTerminationPolicy": "ScaleIn",
                "scaleInGracePeriodSeconds": GRACE,
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": "horovod/horovod:0.28.1",
                                    "command": ["horovodrun"],
                                    "args": [
                                        "-np",
                                        "4",
                                        "--min-np",
                                        "2",
                                        "--max-np",
                                        "8",
                                        "--host-discovery-script",
                                        "/etc/mpi/discover_hosts.sh",
                                        "python",
                                        "train.py",
                                    ],
                                }
                            ],
                        }
                    },
                },
                "Worker": {
                    "replicas": 4,
                    "template": {
                        "metadata": {"labels": {"app": "demo-worker"}},
                        "spec": {
                            "affinity": on_nodes,
                            "topologySpreadConstraints": [
                                {
                                    "maxSkew": 1,
                                    "topologyKey": "kubernetes.io/hostname",
                                    "whenUnsatisfiable": "DoNotSchedule",
                                    "labelSelector": {"matchLabels": {"app": "demo-worker"}},
                                }
                            ],
                            "terminationGracePeriodSeconds": 5,
                            # A node has room for two workers (kwok nodes have 32 CPUs): a third does not fit, so
                            # with node-2 tainted there is no capacity until a new node joins.
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "horovod/horovod:0.28.1",
                                    "resources": {"requests": {"cpu": WORKER_CPU}},
                                }
                            ],
                        },
                    },
                },
            },
        },
    }


async def run_discovery(kube: Client) -> list[tuple[str, int]]:
    """The launcher's view: discover_hosts.sh run with the launcher's own token (mpijob_testbed/launcher_view.py)."""
    view = await launcher_view(kube, NAMESPACE, JOB)
    if not view.ok:
        raise KeyError(view.error)
    return view.hosts


def api_view(pods: list[dict[str, Any]]) -> list[str]:
    """Workers that should be in discovery, from the pods in the API: Running, not leaving, not terminating."""
    return [
        f"{p['metadata']['name']}.{JOB}.{NAMESPACE}.svc"
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and not is_leaving(p)
    ]


async def _print_views(kube: Client) -> None:
    view = await launcher_view(kube, NAMESPACE, JOB)
    pods = await worker_pods(kube, NAMESPACE, JOB)
    print(
        f"  launcher's view: discover_hosts.sh run with the launcher's own token "
        f"(exit {'0' if view.ok else 'non-zero'}, {view.seconds * 1000:.0f} ms, from {view.source or '-'}):"
    )
    _print_discovery(view.hosts)
    if not view.ok:
        print(f"    {view.error.strip()}")
    print("  API view: worker pods Running and not leaving:")
    for host in api_view(pods):
        print(f"    {host}")


def _print_discovery(hosts: list[tuple[str, int]]) -> None:
    for host, slots in hosts:
        print(f"    {host}:{slots}")


async def _scenario(kubeconfig: Path, clock: Clock) -> None:
    async with client(str(kubeconfig)) as kube:
        api = kube.api
        # An earlier demo's namespace may still be going away (its cleanup deletes it without waiting).
        await seconds_until(lambda: _namespace_usable(kube), what=f"namespace {NAMESPACE} usable", within=120)
        with contextlib.suppress(ApiError):
            await kube.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            )
        with contextlib.suppress(ApiError):
            await kube.delete(job_path(NAMESPACE, JOB))
            await seconds_until(lambda: _gone(kube), what="the previous demo job to go away", within=60, interval=0.1)
        await _restore_nodes(kube)
        await kube.create(f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/mpijobs", _manifest())
        clock.say(f"created MPIJob {NAMESPACE}/{JOB}: 4 workers, elasticPolicy minReplicas=2, ScaleIn, grace {GRACE}s")

        async def all_running() -> bool:
            pods = await worker_pods(kube, NAMESPACE, JOB)
            return len(pods) == 4 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        took = await seconds_until(all_running, what="4 Running workers", within=120, interval=0.1)
        await seconds_until(lambda: _discovery_size(kube, 4), what="4 hosts in discovery", within=30, interval=0.1)
        clock.mark("job created -> 4 workers Running", took)
        clock.say(f"4 workers Running ({took:.1f}s)")
        before = await worker_pods(kube, NAMESPACE, JOB)
        print("\nBEFORE (the seed's table):")
        print(pod_table(before, JOB))
        await _print_views(kube)
        survivors = {
            p["metadata"]["name"]: p["metadata"]["uid"] for p in before if p["spec"].get("nodeName") == "node-1"
        }
        doomed = sorted(p["metadata"]["name"] for p in before if p["spec"].get("nodeName") == "node-2")
        print()

        clock.say(f"node-2 gets taint {SPOT_ITN_TAINT}:NoSchedule (AWS spot interruption notice, ~2 min warning)")
        tainted = time.monotonic()
        await taint_node(api, "node-2")

        async def replicas_lowered() -> bool:
            job = await kube.get(job_path(NAMESPACE, JOB))
            return bool(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2)

        async def launcher_shrunk() -> float:
            # The launcher's script, run again and again from the taint on, as Horovod's driver runs it.
            while True:
                started = time.monotonic()
                if await _discovery_size(kube, 2):
                    return time.monotonic() - tainted  # an upper bound: when that run had ended
                if started - tainted > 60:
                    raise SystemExit("demo: the launcher's discovery never shrank")

        seen, patched = await asyncio.gather(
            launcher_shrunk(),
            seconds_until(replicas_lowered, what="the operator to lower replicas", within=60, interval=0.1),
        )
        pods = await worker_pods(kube, NAMESPACE, JOB)
        running = sorted(
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["name"] in doomed and (p.get("status") or {}).get("phase") == "Running"
        )
        clock.mark("taint -> launcher's discover_hosts.sh (its own token) no longer lists node-2", seen)
        clock.say(
            f"the launcher's discover_hosts.sh lists only node-1's workers (a run that ended {seen:.2f}s after "
            f"the taint); node-2's workers {running} still run; Horovod re-forms at its next commit"
        )
        clock.mark("taint -> MPIJob patched (replicas 4 -> 2, workersToDelete)", patched)
        clock.say(
            f"operator recorded it in the MPIJob: replicas 4 -> 2, workersToDelete {doomed} "
            f"({patched:.2f}s after the taint)"
        )

        async def doomed_gone() -> bool:
            names = {p["metadata"]["name"] for p in await worker_pods(kube, NAMESPACE, JOB)}
            return not names & set(doomed)

        await seconds_until(doomed_gone, what="node-2's workers to be deleted", within=120, interval=0.1)
        took = time.monotonic() - tainted
        clock.mark(f"taint -> node-2's pods gone (grace {GRACE}s + pod termination)", took)
        clock.say(f"node-2's workers deleted after the {GRACE}s grace period ({took:.1f}s after the taint)")

        after = await worker_pods(kube, NAMESPACE, JOB)
        print("\nAFTER:")
        print(pod_table(after, JOB))
        await _print_views(kube)
        job = await kube.get(job_path(NAMESPACE, JOB))
        # Regrow's probes wait for a node (none has room: node-2 is tainted); any other Pending pod is wrong.
        pending = [
            p["metadata"]["name"]
            for p in after
            if (p.get("status") or {}).get("phase") == "Pending" and not _is_probe(p)
        ]
        kept = all(
            any(p["metadata"]["name"] == n and p["metadata"]["uid"] == uid for p in after)
            for n, uid in survivors.items()
        )
        print(
            f"\n  replicas: {job['spec']['mpiReplicaSpecs']['Worker']['replicas']}, "
            f"state: {(job.get('status') or {}).get('state')}, pending pods: {len(pending)}, "
            f"node-1 workers kept their UIDs: {'yes' if kept else 'NO'}"
        )
        _print_regrow(job)
        if not kept or pending:
            raise SystemExit("demo: the outcome is not the expected one (see above)")
        await _regrow(kube, clock, survivors)
        events = await kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")
        print("\n  events on the MPIJob:")
        for event in sorted(events.get("items") or [], key=lambda e: int(e["metadata"]["resourceVersion"])):
            if event["involvedObject"].get("name") == JOB and event["reason"] in (
                "NodeTerminating",
                "WorkersLeaving",
                "SuccessfulDeletePod",
                "WorkerRemoved",
                "RegrowProbe",
                "RegrowBackoff",
                "Regrown",
            ):
                print(f"    {event['type']:7} {event['reason']:20} {event['message']}")


def _is_probe(pod: dict[str, Any]) -> bool:
    return c.ANNOTATION_REGROW_PROBE in (pod["metadata"].get("annotations") or {})


def _print_regrow(job: dict[str, Any]) -> None:
    regrow = (job.get("status") or {}).get("regrow")
    target = (job["metadata"].get("annotations") or {}).get(c.ANNOTATION_REGROW_TARGET, "absent")
    if regrow:
        print(f"  status.regrow: {regrow.get('reason')}: {regrow.get('message')}")
    else:
        print(f"  status.regrow: none (at the target; annotation {c.ANNOTATION_REGROW_TARGET}: {target})")


async def _regrow(kube: Client, clock: Clock, survivors: dict[str, str]) -> None:
    """The spot node is replaced: node-2 goes, a new spot node joins, and the job grows back to 4 on its own."""
    api = kube.api
    print()
    clock.say("the spot instance behind node-2 is gone: node-2 is deleted; a new spot node joins")
    await delete_node(api, "node-2")
    joined = time.monotonic()
    await create_node(api, REPLACEMENT, labels=dict.fromkeys(CAPACITY_TYPE_LABELS, SPOT))
    ready = await seconds_until(lambda: _node_ready(kube, REPLACEMENT), what=f"{REPLACEMENT} Ready", within=60)
    clock.mark(f"new spot node created -> {REPLACEMENT} Ready", ready)
    clock.say(f"{REPLACEMENT} is Ready ({ready:.1f}s)")
    became_ready = time.monotonic()

    async def back_at_target() -> bool:
        job = await kube.get(job_path(NAMESPACE, JOB))
        pods = await worker_pods(kube, NAMESPACE, JOB)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4 and len(running) == 4

    await seconds_until(back_at_target, what="the job back at 4 Running workers", within=120, interval=0.1)
    await seconds_until(lambda: _discovery_size(kube, 4), what="4 hosts in discovery", within=60, interval=0.1)
    took = time.monotonic() - became_ready
    clock.mark(f"{REPLACEMENT} Ready -> replicas 4, 4 workers Running and in the launcher's discover_hosts.sh", took)
    clock.say(
        f"regrow: the job is back at 4 workers, listed by the launcher's discover_hosts.sh "
        f"({took:.1f}s after {REPLACEMENT} was Ready, {time.monotonic() - joined:.1f}s after it was created)"
    )
    regrown = await worker_pods(kube, NAMESPACE, JOB)
    print("\nREGROWN:")
    print(pod_table(regrown, JOB))
    await _print_views(kube)
    job = await kube.get(job_path(NAMESPACE, JOB))
    kept = all(
        any(p["metadata"]["name"] == n and p["metadata"]["uid"] == u for p in regrown) for n, u in survivors.items()
    )
    new = sorted(p["metadata"]["name"] for p in regrown if p["metadata"]["name"] not in survivors)
    print(
        f"\n  replicas: {job['spec']['mpiReplicaSpecs']['Worker']['replicas']}, new workers {new} (fresh names: "
        f"Horovod never saw them), node-1 workers kept their UIDs: {'yes' if kept else 'NO'}"
    )
    _print_regrow(job)
    if not kept or any(p["spec"].get("nodeName") != REPLACEMENT for p in regrown if p["metadata"]["name"] in new):
        raise SystemExit("demo: the regrown job is not the expected one (see above)")


async def _node_ready(kube: Client, name: str) -> bool:
    try:
        node = await kube.get(f"/api/v1/nodes/{name}")
    except ApiError:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions)


async def _restore_nodes(kube: Client) -> None:
    """node-2 as the testbed made it (an earlier demo may have replaced it), and no replacement node."""
    api = kube.api
    await delete_node(api, REPLACEMENT)
    if not await _node_ready(kube, "node-2"):
        with contextlib.suppress(Exception):
            await create_node(api, "node-2")
        await seconds_until(lambda: _node_ready(kube, "node-2"), what="node-2 Ready", within=60)
    await untaint_node(api, "node-2")


async def _namespace_usable(kube: Client) -> bool:
    try:
        namespace = await kube.get(f"/api/v1/namespaces/{NAMESPACE}")
    except ApiError as err:
        return err.status == 404
    return not namespace["metadata"].get("deletionTimestamp")


async def _gone(kube: Client) -> bool:
    try:
        await kube.get(job_path(NAMESPACE, JOB))
    except ApiError as err:
        return err.status == 404
    return False


async def _discovery_size(kube: Client, size: int) -> bool:
    try:
        return len(await run_discovery(kube)) == size
    except (ApiError, KeyError):
        return False


def _demo(args: argparse.Namespace) -> int:
    clock = Clock()
    print("== mpijob-testbed demo: a spot node is reclaimed under an elastic Horovod job ==", flush=True)
    was_running = cluster.is_running(args.dir)
    testbed = cluster.up(2, args.dir, echo=lambda m: clock.say(f"testbed: {m}"))
    clock.mark("testbed ready (build if needed + start)", clock.now())
    kubeconfig = testbed.kubeconfig
    asyncio.run(install_crd(str(kubeconfig)))
    clock.say("CRD mpijobs.kubeflow.org installed")
    log_path = testbed.state_dir / "demo-operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "mpijob", "operator", "--kubeconfig", str(kubeconfig)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    clock.say(f"operator started (pid {operator.pid}, log {log_path})")
    failed = False
    try:
        asyncio.run(_scenario(kubeconfig, clock))
    except (SystemExit, TimeoutError) as err:  # TimeoutError: a wait of the scenario ran out
        failed = True
        print(err, file=sys.stderr)
    finally:
        if not args.keep:
            operator.terminate()
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                operator.kill()
            if not was_running:
                cluster.down(args.dir, echo=lambda m: clock.say(f"testbed: {m}"))
            else:
                asyncio.run(_cleanup(kubeconfig))
    print("\nTimings:")
    for step, seconds in clock.marks:
        print(f"  {seconds:7.2f}s  {step}")
    if args.keep:
        print(f"\nKept running. export KUBECONFIG={kubeconfig}; operator pid {operator.pid}")
    return 1 if failed else 0


async def _cleanup(kubeconfig: Path) -> None:
    async with client(str(kubeconfig)) as kube:
        await _restore_nodes(kube)
        with contextlib.suppress(ApiError):
            await kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
