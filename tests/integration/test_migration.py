"""Living beside the reference operator: with --controller-name and --ignore-unmanaged, the operator runs
only jobs whose spec.runPolicy.managedBy names it, and writes nothing at all to the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kube import Kube, eventually, has_condition, live, mpijob
from operator_harness import OperatorProcess

pytestmark = pytest.mark.integration

NAME = "mpijob.kubeflow.org/operator"


async def test_beside_the_reference_only_jobs_naming_this_operator_are_run(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    beside = OperatorProcess(
        operator_kubeconfig, tmp_path, ("--controller-name", NAME, "--ignore-unmanaged", "--namespace", kube.ns)
    )
    running_operator.stop()  # the session's operator claims unset jobs: not during this test
    try:
        beside.start()
        await kube.create(mpijob("unset", workers=1))
        await kube.create(mpijob("reference", workers=1, run_policy={"managedBy": "kubeflow.org/mpi-operator"}))
        await kube.create(mpijob("ours", workers=1, run_policy={"managedBy": NAME}))

        async def ours_running() -> bool:
            return has_condition(await kube.job("ours"), "Running") and len(live(await kube.workers("ours"))) == 1

        await eventually(ours_running, within=60, what="the job naming this operator Running")
        await asyncio.sleep(2)  # the other two were created first; they had every chance
        for name in ("unset", "reference"):
            job = await kube.job(name)
            assert not job.get("status"), (name, job.get("status"))
            assert not await kube.workers(name), name
            assert not await kube.events(name), name
    finally:
        beside.stop()
        running_operator.start()
