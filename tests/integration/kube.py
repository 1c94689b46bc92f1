"""Test helpers over the real API server: manifests, reads, and waiting for a condition."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.kube.client import ApiError, Client
from mpijob.kube.resources import collection_path, object_path
from mpijob_testbed.waiting import wait_until

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], *, within: float = 60.0, interval: float = 0.2, what: str = "condition"
) -> T:
    """`wait_until` with the tests' conventions: API errors, failed asserts and missing keys inside `check`
    mean "not yet", and running out of time is a test failure (AssertionError)."""
    try:
        return await wait_until(
            check, what=what, within=within, interval=interval, retry_on=(ApiError, AssertionError, KeyError)
        )
    except TimeoutError as err:
        raise AssertionError(str(err)) from None


def container(name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "mpioperator/mpi-pi:openmpi", **extra}


def mpijob(
    name: str,
    *,
    workers: int = 2,
    implementation: str = "OpenMPI",
    elastic: dict[str, Any] | None = None,
    run_policy: dict[str, Any] | None = None,
    worker_template: dict[str, Any] | None = None,
    launcher_template: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An upstream-style MPIJob. Worker pods get a 1 s grace period so tests don't wait 30 s per delete."""
    wt = copy.deepcopy(worker_template) or {"spec": {"containers": [container("worker")]}}
    wt.setdefault("spec", {}).setdefault("terminationGracePeriodSeconds", 1)
    lt = copy.deepcopy(launcher_template) or {"spec": {"containers": [container("launcher")]}}
    lt.setdefault("spec", {}).setdefault("terminationGracePeriodSeconds", 1)
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": implementation,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": lt},
                "Worker": {"replicas": workers, "template": wt},
            },
            **spec,
        },
    }
    if elastic is not None:
        body["spec"]["elasticPolicy"] = elastic
    if run_policy is not None:
        body["spec"]["runPolicy"] = run_policy
    return body


class Kube:
    """Thin async accessors for one namespace."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.ns = namespace

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.create(collection_path(obj["apiVersion"], obj["kind"], self.ns), obj)
        return result

    async def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self.client.get(object_path(api_version, kind, self.ns, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return result

    async def job(self, name: str) -> dict[str, Any]:
        obj = await self.get(API_VERSION, "MPIJob", name)
        assert obj is not None, f"MPIJob {name} not found"
        return obj

    async def patch_job(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.merge_patch(object_path(API_VERSION, "MPIJob", self.ns, name), patch)
        return result

    async def list(self, api_version: str, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        result = await self.client.request("GET", collection_path(api_version, kind, self.ns), query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        return items

    async def workers(self, job: str) -> list[dict[str, Any]]:
        pods = await self.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}={c.ROLE_WORKER}")
        return sorted(pods, key=lambda p: c.worker_index(job, p["metadata"]["name"]) or 0)

    async def launcher_pods(self, job: str) -> list[dict[str, Any]]:
        return await self.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}={c.ROLE_LAUNCHER}")

    async def events(self, job: str) -> list[dict[str, Any]]:
        items = await self.list("v1", "Event")
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == job]

    async def delete(self, api_version: str, kind: str, name: str, grace: int | None = None) -> None:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        await self.client.delete(object_path(api_version, kind, self.ns, name), options)

    async def evict(self, pod: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": self.ns}}
        await self.client.create(object_path("v1", "Pod", self.ns, pod, "eviction"), body)


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return None


def has_condition(job: dict[str, Any], kind: str, status: str = "True") -> bool:
    cond = condition(job, kind)
    return cond is not None and cond.get("status") == status


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def kubectl(kubeconfig: object, *args: str, check: bool = True) -> tuple[int, str]:
    """Runs the testbed's kubectl; returns (exit code, stdout+stderr)."""
    from mpijob_testbed.paths import resolve_bin_dir

    proc = await asyncio.create_subprocess_exec(
        str(resolve_bin_dir(None) / "kubectl"),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {text}")
    return int(proc.returncode or 0), text


# -- generic helpers added for the core integration tests ------------------------------------------------


async def merge_patch(
    kube: Kube, api_version: str, kind: str, name: str, patch: dict[str, Any], subresource: str | None = None
) -> dict[str, Any]:
    """JSON merge patch of any namespaced object the executor knows (optionally its status subresource)."""
    result: dict[str, Any] = await kube.client.merge_patch(
        object_path(api_version, kind, kube.ns, name, subresource), patch
    )
    return result


async def label_node(client: Client, node: str, labels: dict[str, str | None]) -> None:
    """Sets (or, with None, removes) labels on a cluster-scoped Node."""
    await client.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


async def run_sh(script: str) -> str:
    """Writes `script` to a file and runs it with `sh` (as the launcher runs /etc/mpi/discover_hosts.sh);
    returns its stdout."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "discover_hosts.sh"
        path.write_text(script)
        path.chmod(0o555)
        proc = await asyncio.create_subprocess_exec(
            "sh", str(path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
    if proc.returncode != 0:
        raise AssertionError(f"sh exited {proc.returncode}: {err.decode(errors='replace')}")
    return out.decode()


async def operator_caught_up(kube: Kube, control: str) -> None:
    """The positive control of a "nothing happened" check, in place of a fixed sleep: a suspended job created
    now, which the operator answers (Suspended=True) only after it has read every watch event before it (one
    watch, in order) and taken the earlier jobs' keys off its queue first. So a check made after it cannot
    pass just because the operator was slow (a stopped or lagging operator fails it here), though a reconcile
    of an earlier job still running on another worker is not waited for. Cheap: a suspended job has no pod.
    Events are posted off the reconcile path, and wait while the budget is below half its burst (after a
    restart's lists, for one), in arrival order among themselves: so it also waits for the control's own
    Event, after which the Events of the passes before it are posted too."""
    await kube.create(mpijob(control, workers=1, run_policy={"suspend": True}))
    await eventually(lambda: job_has(kube, control, "Suspended"), within=60, what=f"{control} Suspended=True")

    async def announced() -> bool:
        return bool(await kube.events(control))

    await eventually(announced, within=60, what=f"{control}'s Event posted")


async def job_has(kube: Kube, job: str, kind: str) -> bool:
    """The job carries condition `kind` with status True (read now, not from a cache)."""
    return has_condition(await kube.job(job), kind)


async def wait_condition(
    kube: Kube, name: str, kind: str, status: str = "True", within: float = 60.0
) -> dict[str, Any]:
    """The job, once it carries condition `kind` with `status`."""

    async def check() -> dict[str, Any] | None:
        job = await kube.job(name)
        return job if has_condition(job, kind, status) else None

    return await eventually(check, within=within, what=f"MPIJob {name}: {kind}={status}")


async def wait_running(kube: Kube, name: str, workers: int, within: float = 60.0) -> dict[str, Any]:
    """The job, once Running=True; then exactly `workers` live workers, all Running."""
    job = await wait_condition(kube, name, "Running", within=within)
    pods = live(await kube.workers(name))

    def phase(p: dict[str, Any]) -> str | None:
        return (p.get("status") or {}).get("phase")

    assert len(pods) == workers and all(phase(p) == "Running" for p in pods), [
        (p["metadata"]["name"], phase(p)) for p in pods
    ]
    return job
