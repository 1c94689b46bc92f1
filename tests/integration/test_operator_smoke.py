"""The done-when of the core operator: an upstream manifest runs to Succeeded with workers cleaned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube import Kube, eventually, has_condition, kubectl, live
from kubernetes_asyncio.client import ApiClient

from mpijob_testbed import complete_pod

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pi-openmpi.yaml"


async def test_upstream_openmpi_manifest_runs_then_succeeds_and_workers_are_cleaned(
    kube: Kube, api: ApiClient, kubeconfig: Path
) -> None:
    await kubectl(kubeconfig, "-n", kube.ns, "apply", "-f", str(EXAMPLE))
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]

    async def running() -> bool:
        return has_condition(await kube.job(name), "Running")

    await eventually(running, what="MPIJob Running")
    _, table = await kubectl(kubeconfig, "-n", kube.ns, "get", "mpijob", name)
    assert "Running" in table and " 2 " in table, table

    [launcher] = await kube.launcher_pods(name)
    await complete_pod(api, kube.ns, launcher["metadata"]["name"], succeeded=True)

    async def succeeded() -> dict[str, object] | None:
        job = await kube.job(name)
        return job if has_condition(job, "Succeeded") else None

    job = await eventually(succeeded, what="MPIJob Succeeded")
    assert has_condition(job, "Running", "False")
    assert job["status"]["completionTime"]

    async def workers_cleaned() -> bool:
        return not live(await kube.workers(name))

    await eventually(workers_cleaned, what="workers deleted (cleanPodPolicy Running)")
