"""Running beside the reference operator: which MPIJobs this operator claims is configurable."""

from __future__ import annotations

from typing import Any

from mpijob.planner.actions import Action
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig

from .builders import created_names, mpijob, snap

BESIDE = OperatorConfig(controller_name="mpijob.kubeflow.org/operator", claim_unmanaged=False)


def _with(config: OperatorConfig, job: dict[str, Any]) -> list[Action]:
    return plan(snap(job, config=config))


def test_by_default_jobs_without_managed_by_and_the_reference_name_are_ours() -> None:
    assert created_names(plan(snap(mpijob(workers=1))), "Pod") == ["pi-worker-0"]
    job = mpijob(workers=1, run_policy={"managedBy": "kubeflow.org/mpi-operator"})
    assert created_names(plan(snap(job)), "Pod") == ["pi-worker-0"]


def test_beside_the_reference_only_jobs_naming_this_operator_are_reconciled() -> None:
    ours = mpijob(workers=1, run_policy={"managedBy": "mpijob.kubeflow.org/operator"})
    assert created_names(_with(BESIDE, ours), "Pod") == ["pi-worker-0"]
    # Unset and the reference's own name belong to the reference operator: nothing planned, not even status.
    assert list(_with(BESIDE, mpijob(workers=1))) == []
    assert list(_with(BESIDE, mpijob(workers=1, run_policy={"managedBy": "kubeflow.org/mpi-operator"}))) == []
