"""Upgrading mpijob itself while jobs run: the operator of a named earlier version (its `src/`, taken from git:
previous_version.py) runs jobs, then is replaced by this checkout's, as a rolling update of the Deployment would
do. No job is disturbed, and the new operator serves them (an elastic scale-in by name), under the shipped RBAC."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kube import Kube, eventually, has_condition, live, mpijob
from operator_harness import OperatorProcess
from previous_version import changed_sources, previous_commit, previous_tree

pytestmark = pytest.mark.integration


def imported_from(env: dict[str, str]) -> str:
    """Where `import mpijob` comes from in a process with `env` added (PYTHONPATH goes before site-packages)."""
    out = subprocess.run(
        [sys.executable, "-c", "import mpijob; print(mpijob.__file__)"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


async def children(kube: Kube) -> dict[tuple[str, str], str]:
    out = {}
    for api_version, kind in (("v1", "Pod"), ("batch/v1", "Job"), ("v1", "Service"), ("v1", "ConfigMap")):
        for obj in await kube.list(api_version, kind):
            out[(kind, obj["metadata"]["name"])] = obj["metadata"]["uid"]
    return out


async def test_an_upgrade_from_an_earlier_version_disturbs_no_running_job(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    commit = previous_commit()
    changed = changed_sources(commit)
    assert changed, f"{commit}'s src/ is this checkout's: restarting the same code would upgrade nothing"
    src = previous_tree(tmp_path / "previous", "src") / "src"
    env = {"PYTHONPATH": str(src)}
    assert imported_from(env).startswith(str(src)), f"the old operator would not run {commit}'s code"
    old = OperatorProcess(operator_kubeconfig, tmp_path, ("--namespace", kube.ns), env=env)
    running_operator.stop()  # the session's operator would fight the old one
    try:
        old.start()
        await kube.create(mpijob("static", workers=2))
        await kube.create(mpijob("elastic", workers=3, elastic={"minReplicas": 1, "maxReplicas": 3}))

        async def running(name: str, workers: int) -> bool:
            return has_condition(await kube.job(name), "Running") and len(live(await kube.workers(name))) == workers

        for name, n in (("static", 2), ("elastic", 3)):
            await eventually(lambda n=n, name=name: running(name, n), within=90, what=f"{name} Running under {commit}")
        await asyncio.sleep(2)
        before = await children(kube)
    finally:
        old.stop()
        running_operator.start()
    await asyncio.sleep(20)
    after = await children(kube)
    assert after == before, {
        k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)
    }
    for name in ("static", "elastic"):
        assert has_condition(await kube.job(name), "Running"), name
    patch = {
        "spec": {
            "elasticPolicy": {"workersToDelete": ["elastic-worker-0"]},
            "mpiReplicaSpecs": {"Worker": {"replicas": 2}},
        }
    }
    await kube.patch_job("elastic", patch)

    async def scaled_in() -> bool:
        names = sorted(p["metadata"]["name"] for p in live(await kube.workers("elastic")))
        return names == ["elastic-worker-1", "elastic-worker-2"]

    await eventually(scaled_in, within=60, what="exactly elastic-worker-0 removed by the upgraded operator")
