"""Every manifest in examples/ is applied to the testbed as a user would (`kubectl apply -f`), and every
MPIJob in it is accepted by the CRD's validation and by the operator (Created, not Failed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube import Kube, condition, eventually, kubectl

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").rglob("*.yaml"))


def test_there_are_examples_for_every_spot_provider() -> None:
    assert {p.stem for p in EXAMPLES if p.parent.name == "spot"} >= {"aws-nth", "karpenter", "gke", "aks"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(p.parents[1])))
async def test_example_applies_and_the_operator_accepts_its_jobs(kube: Kube, kubeconfig: Path, path: Path) -> None:
    await kubectl(kubeconfig, "apply", "--server-side", "-n", kube.ns, "-f", str(path))
    text = path.read_text()  # noqa: ASYNC240 (a small file)
    jobs = [d["metadata"]["name"] for d in yaml.safe_load_all(text) if d and d["kind"] == "MPIJob"]
    assert jobs, f"{path} has no MPIJob"
    for name in jobs:

        async def created(name: str = name) -> bool:
            return condition(await kube.job(name), "Created") is not None

        await eventually(created, what=f"{name} reconciled")
        failed = condition(await kube.job(name), "Failed")
        assert failed is None or failed["status"] != "True", failed
