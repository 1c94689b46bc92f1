"""Every manifest in examples/ is applied to the testbed as a user would (`kubectl apply`), and every
MPIJob in it is accepted by the CRD's validation and by the operator (Created, not Failed).

Objects of an API the session's testbed does not serve are not applied here, and only for the APIs listed
in OPTIONAL_APIS (Kueue runs only on the opt-in testbed of tests/integration/test_scheduling.py); the
MPIJobs of those files are still applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import Kube, condition, eventually, kubectl

from mpijob.kube.client import ApiError

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").rglob("*.yaml"))
OPTIONAL_APIS = {"kueue.x-k8s.io"}


def test_there_are_examples_for_every_spot_provider() -> None:
    assert {p.stem for p in EXAMPLES if p.parent.name == "spot"} >= {"aws-nth", "karpenter", "gke", "aks"}


async def _served(kube: Kube, api_version: str) -> bool:
    path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    try:
        await kube.client.get(path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(p.parents[1])))
async def test_example_applies_and_the_operator_accepts_its_jobs(
    kube: Kube, kubeconfig: Path, path: Path, tmp_path: Path
) -> None:
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(path.read_text()) if d]  # noqa: ASYNC240
    jobs = [d for d in docs if d["kind"] == "MPIJob"]
    assert jobs, f"{path} has no MPIJob"
    apply = []
    for doc in docs:
        doc["metadata"].pop("namespace", None)  # into the test's namespace
        if doc["kind"] == "MPIJob" or await _served(kube, doc["apiVersion"]):
            apply.append(doc)
        else:
            assert doc["apiVersion"].split("/")[0] in OPTIONAL_APIS, f"{doc['kind']} ({doc['apiVersion']}) not served"
    manifest = tmp_path / path.name
    manifest.write_text(yaml.safe_dump_all(apply))
    await kubectl(kubeconfig, "apply", "--server-side", "-n", kube.ns, "-f", str(manifest))
    for name in (j["metadata"]["name"] for j in jobs):

        async def created(name: str = name) -> bool:
            return condition(await kube.job(name), "Created") is not None

        await eventually(created, what=f"{name} reconciled")
        failed = condition(await kube.job(name), "Failed")
        assert failed is None or failed["status"] != "True", failed
