"""Helpers for elastic MPIJobs on the testbed, shared by the integration modules that need them: nodes of
one test (`own_nodes`), an elastic job pinned to them (`elastic_job`), starting it, reading it, recording its
watch streams and waiting for its workers.

Every test creates its own kwok nodes (`e2e-<ns-suffix>-a`, `-b`, ...), tainted so that no other pod lands
there, and pins its jobs' workers to them (nodeAffinity on kubernetes.io/hostname, spread evenly by a
topology spread constraint), so tainting, cordoning or deleting a node never disturbs another test's pods;
the nodes are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from kube import Kube, container, eventually, live, mpijob, names
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from launcher import dumps, launcher

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION, GROUP, PLURAL, VERSION
from mpijob.kube.resources import collection_path
from mpijob.planner.discovery import listed_hosts
from mpijob_testbed import create_node, delete_node, taint_node
from mpijob_testbed.nodes import CAPACITY_TYPE_LABELS, ON_DEMAND, SPOT
from mpijob_testbed.watching import WatchRecorder

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
SPREAD_LABEL = "e2e.mpijob.io/spread"
# On every node a test creates, so that only that test's pods (which tolerate it) land there.
OWNER_TAINT = "e2e.mpijob.io/owner"
TOLERATE_OWNER = [{"key": OWNER_TAINT, "operator": "Exists", "effect": "NoSchedule"}]


# -- nodes of one test -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def own_nodes(
    api: ApiClient, kube: Kube, *suffixes: str, spot: tuple[str, ...] = ("b",)
) -> AsyncIterator[list[str]]:
    """Fresh kwok nodes `<ns-suffix>-<suffix>` (capacity type spot for the suffixes in `spot`), Ready on
    entry and deleted on exit."""
    short = kube.ns.rsplit("-", 1)[-1]
    made: list[str] = []
    try:
        for suffix in suffixes:
            name = f"e2e-{short}-{suffix}"
            capacity = SPOT if suffix in spot else ON_DEMAND
            await create_node(api, name, labels=dict.fromkeys(CAPACITY_TYPE_LABELS, capacity))
            made.append(name)
            await taint_node(api, name, OWNER_TAINT, short, "NoSchedule")

        async def ready() -> bool:
            for name in made:
                node = await kube.client.get(f"/api/v1/nodes/{name}")
                conds = (node.get("status") or {}).get("conditions") or []
                if not any(x["type"] == "Ready" and x["status"] == "True" for x in conds):
                    return False
                # The node lifecycle controller's not-ready taint would skew the first placements.
                if any(t["key"] != OWNER_TAINT for t in (node.get("spec") or {}).get("taints") or []):
                    return False
            return True

        await eventually(ready, within=60, what=f"nodes {made} Ready and untainted")
        yield made
    finally:
        for name in made:
            await delete_node(api, name)


def elastic_job(
    name: str,
    nodes: list[str],
    *,
    workers: int = 4,
    min_replicas: int = 2,
    max_replicas: int = 8,
    grace: int = 2,
    policy: str = "ScaleIn",
    index_policy: str | None = None,
    regrow: Obj | None = None,
    **elastic: Any,
) -> Obj:
    """An elastic job whose workers may only run on `nodes`, spread evenly over them; the launcher runs on
    the first node (which tests never disturb). Regrow is off unless `regrow` says otherwise: these tests are
    about shrinking, and the healthy node has room for the lost workers (regrow's own tests:
    test_elastic_regrow.py)."""
    spread = {SPREAD_LABEL: name}
    worker_template = {
        "metadata": {"labels": spread},
        "spec": {
            "containers": [container("worker")],
            "tolerations": TOLERATE_OWNER,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(nodes)}]}
                        ]
                    }
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": HOSTNAME,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": spread},
                    # A node with a NoSchedule taint (or cordoned) is no spreading domain: replacements may
                    # all go to the healthy node.
                    "nodeTaintsPolicy": "Honor",
                }
            ],
        },
    }
    launcher_template = {
        "spec": {
            "containers": [container("launcher")],
            "nodeSelector": {HOSTNAME: nodes[0]},
            "tolerations": TOLERATE_OWNER,
        }
    }
    policy_block: Obj = {
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "nodeTerminationPolicy": policy,
        "scaleInGracePeriodSeconds": grace,
        "regrow": {"enabled": False} if regrow is None else regrow,
        **elastic,
    }
    if index_policy is not None:
        policy_block["indexPolicy"] = index_policy
    return mpijob(
        name,
        workers=workers,
        elastic=policy_block,
        worker_template=worker_template,
        launcher_template=launcher_template,
    )


# -- reading the job ----------------------------------------------------------------------------------------


def node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def leaving_since(pod: Obj) -> str | None:
    value = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_LEAVING_SINCE)
    return str(value) if value else None


def replicas_of(job: Obj) -> int:
    return int(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])


def listed_of(job: Obj) -> list[str]:
    return list((job["spec"].get("elasticPolicy") or {}).get("workersToDelete") or [])


def uids(pods: list[Obj]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def discovery_names(data: dict[str, str]) -> list[str]:
    """Pod names in a version of the job's ConfigMap data: the discovery list the launcher reads from the API."""
    return [host.split(".", 1)[0] for host in listed_hosts(data) or []]


async def run_discovery(kube: Kube, job: str, source: str = "API") -> list[str]:
    """Executes the job's discover_hosts.sh with `sh`, as Horovod's driver does, with the launcher's own
    credentials (tests/integration/launcher.py); the workers it lists. It must have answered from `source`."""
    async with launcher(kube, job) as seat:
        run = await seat.run()
    assert run.returncode == 0, dumps(run)
    assert f"source: {source}" in run.stderr, dumps(run)
    return run.pods


async def start_job(kube: Kube, body: Obj, nodes: list[str] | None = None, source: str = "API") -> list[Obj]:
    """Creates the job and waits until all its workers are Running (spread evenly over `nodes`, when
    given) and listed by discover_hosts.sh. Returns the workers."""
    name = body["metadata"]["name"]
    want = body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    await kube.create(body)

    async def all_running() -> list[Obj] | None:
        pods = live(await kube.workers(name))
        if len(pods) != want or any(phase(p) != "Running" for p in pods):
            return None
        return pods

    pods = await eventually(all_running, within=120, what=f"{want} Running workers of {name}")
    if nodes is not None:
        per_node = {n: sum(1 for p in pods if node_of(p) == n) for n in nodes}
        assert max(per_node.values()) - min(per_node.values()) <= 1, per_node

    async def discovered() -> bool:
        return await run_discovery(kube, name, source) == sorted(names(pods))

    await eventually(discovered, within=60, what=f"discover_hosts.sh of {name} lists all workers")
    return pods


async def messages(kube: Kube, job: str, reason: str | None = None, type_: str | None = None) -> list[str]:
    return [
        str(e.get("message") or "")
        for e in await kube.events(job)
        if (reason is None or e.get("reason") == reason) and (type_ is None or e.get("type") == type_)
    ]


async def mpijob_cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mpijob",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return int(proc.returncode or 0), out.decode(errors="replace")


# -- watch streams ------------------------------------------------------------------------------------------


class Recorder:
    """Every version of one namespaced collection, from a real watch stream opened at the resourceVersion of
    a list taken before the test acts (so nothing in between is missed)."""

    def __init__(self, kube: Kube, api_version: str, kind: str, func: Callable[..., Any], *args: Any) -> None:
        self.kube = kube
        self.api_version = api_version
        self.kind = kind
        self.stream = WatchRecorder(func, *args)

    async def __aenter__(self) -> Recorder:
        listing = await self.kube.client.request("GET", collection_path(self.api_version, self.kind, self.kube.ns))
        self.initial: list[Obj] = listing.get("items") or []
        await self.stream.start(listing["metadata"]["resourceVersion"], timeout_seconds=900)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.stop()

    def versions(self, name: str | None = None) -> list[tuple[str, Obj]]:
        assert self.stream.error is None, f"watch of {self.kind} failed: {self.stream.error!r}"
        return [(t, o) for _, t, o in self.stream.events if name is None or o["metadata"]["name"] == name]


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def pod_recorder(api: ApiClient, kube: Kube) -> Recorder:
    return Recorder(kube, "v1", "Pod", CoreV1Api(api).list_namespaced_pod, kube.ns)


def config_map_recorder(api: ApiClient, kube: Kube) -> Recorder:
    return Recorder(kube, "v1", "ConfigMap", CoreV1Api(api).list_namespaced_config_map, kube.ns)


def job_recorder(api: ApiClient, kube: Kube) -> Recorder:
    return Recorder(
        kube,
        API_VERSION,
        "MPIJob",
        CustomObjectsApi(api).list_namespaced_custom_object,
        GROUP,
        VERSION,
        kube.ns,
        PLURAL,
    )


# -- waiting helpers ----------------------------------------------------------------------------------------


async def wait_gone(kube: Kube, job: str, victims: list[str], within: float = 120) -> list[Obj]:
    async def gone() -> list[Obj] | None:
        pods = await kube.workers(job)
        return pods if not set(victims) & set(names(pods)) else None

    result: list[Obj] = await eventually(gone, within=within, what=f"{victims} deleted")
    return result


async def wait_job(kube: Kube, job: str, check: Callable[[Obj], bool], what: str, within: float = 60) -> Obj:
    async def ok() -> Obj | None:
        obj = await kube.job(job)
        return obj if check(obj) else None

    result: Obj = await eventually(ok, within=within, what=what)
    return result


async def wait_workers(
    kube: Kube, job: str, check: Callable[[list[Obj]], bool], what: str, within: float = 120
) -> list[Obj]:
    async def ok() -> list[Obj] | None:
        pods = await kube.workers(job)
        return pods if check(pods) else None

    result: list[Obj] = await eventually(ok, within=within, what=what)
    return result


def all_running_live(count: int) -> Callable[[list[Obj]], bool]:
    def check(pods: list[Obj]) -> bool:
        return len(pods) == count and all(
            phase(p) == "Running" and not p["metadata"].get("deletionTimestamp") for p in pods
        )

    return check
