"""An invalid MPIJob is marked Failed (reason InvalidSpec, a message naming the field), a Warning is emitted,
and nothing is created."""

from __future__ import annotations

import pytest

from mpijob.planner.actions import Action, Create, Delete
from mpijob.planner.plan import plan, validate
from mpijob.planner.snapshot import Obj

from .builders import cond, elastic, emits, mpijob, snap, status_of, template


def _launcher(replicas: int = 1) -> Obj:
    return {"replicas": replicas, "template": template()}


def _without_launcher() -> Obj:
    job = mpijob()
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]
    return job


INVALID = {
    "missing launcher": (_without_launcher(), "spec.mpiReplicaSpecs"),
    "launcher replicas 2": (mpijob(launcher=_launcher(2)), "spec.mpiReplicaSpecs.Launcher.replicas"),
    "worker without containers": (
        mpijob(worker={"replicas": 2, "template": {"spec": {"containers": []}}}),
        "spec.mpiReplicaSpecs.Worker.template.spec.containers",
    ),
    "launcher without containers": (
        mpijob(launcher={"replicas": 1, "template": {}}),
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers",
    ),
    "elastic replicas below min": (
        mpijob(workers=1, elastic_policy=elastic(2, 4)),
        "spec.mpiReplicaSpecs.Worker.replicas",
    ),
    "elastic replicas above max": (
        mpijob(workers=5, elastic_policy=elastic(2, 4)),
        "spec.mpiReplicaSpecs.Worker.replicas",
    ),
    "elastic max below min": (mpijob(workers=3, elastic_policy=elastic(3, 2)), "spec.elasticPolicy.maxReplicas"),
    "worker replicas 0 without elasticity": (mpijob(workers=0), "spec.mpiReplicaSpecs.Worker.replicas"),
    "name too long": (mpijob(name="a" * 60, workers=10), "metadata.name"),
    "name not a DNS label": (mpijob(name="Pi_1"), "metadata.name"),
    "replicas above the maximum": (mpijob(workers=10_001), "spec.mpiReplicaSpecs.Worker.replicas"),
    "workersToDelete names a pod in another namespace": (
        mpijob(workers=2, elastic_policy=elastic(1, 4, workers_to_delete=["team-b/pi-worker-0"])),
        "spec.elasticPolicy.workersToDelete.0",
    ),
    "workersToDelete name too long": (
        mpijob(workers=2, elastic_policy=elastic(1, 4, workers_to_delete=["x" * 64])),
        "spec.elasticPolicy.workersToDelete.0",
    ),
    "too many workersToDelete": (
        mpijob(workers=2, elastic_policy=elastic(1, 4, workers_to_delete=[f"w-{i}" for i in range(1025)])),
        "spec.elasticPolicy.workersToDelete",
    ),
    "unknown implementation": (
        mpijob(implementation="OpenMPI-ish"),
        "spec.mpiImplementation",
    ),
    "negative slots": (mpijob(slots=-1), "spec.slotsPerWorker"),
    "unknown replica type": (
        mpijob() | {"spec": {"mpiReplicaSpecs": {"Launcher": _launcher(), "Chief": _launcher()}}},
        "spec.mpiReplicaSpecs.Chief",
    ),
}


@pytest.mark.parametrize("job,field", INVALID.values(), ids=INVALID.keys())
def test_invalid_job_fails_with_invalid_spec_naming_the_field(job: Obj, field: str) -> None:
    _, errors = validate(job)
    assert any(e.startswith(field) for e in errors), errors

    actions = plan(snap(job))

    status = status_of(actions)
    assert status is not None
    failed = cond(status, "Failed")
    assert failed is not None and failed["status"] == "True"
    assert failed["reason"] == "InvalidSpec"
    assert field in failed["message"]
    assert status["state"] == "Failed"
    assert status.get("completionTime")
    warnings = emits(actions, "Warning")
    assert warnings and field in warnings[0].message


@pytest.mark.parametrize("job,field", INVALID.values(), ids=INVALID.keys())
def test_invalid_job_creates_and_deletes_nothing(job: Obj, field: str) -> None:
    actions = plan(snap(job))
    assert not [a for a in actions if isinstance(a, Create | Delete)]


def test_invalid_job_already_marked_failed_is_not_rewritten() -> None:
    job = mpijob(launcher=_launcher(2))
    first = status_of(plan(snap(job)))
    assert first is not None
    job["status"] = first

    again: list[Action] = plan(snap(job))

    assert list(again) == []


@pytest.mark.parametrize(
    "job",
    [
        mpijob(),
        mpijob(workers=None),  # a launcher-only job
        mpijob(workers=2, elastic_policy=elastic(1, 4)),
        mpijob(name="a" * 50, workers=100),
    ],
    ids=["plain", "launcher only", "elastic", "longest name"],
)
def test_valid_jobs_pass_validation(job: Obj) -> None:
    spec, errors = validate(job)
    assert spec is not None
    assert errors == []


def test_a_spec_that_is_not_json_is_refused_as_before_and_odd_json_is_read_as_the_standard_library_reads_it() -> None:
    """The spec goes to pydantic as JSON text (orjson, the standard library for what orjson refuses): what
    is no JSON at all is still "spec: not JSON", and a non-string key or a huge integer reads as it did."""
    odd = mpijob()
    odd["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {1: "one"}, "n": 2**70}
    spec, errors = validate(odd)
    assert errors == [] and spec is not None
    assert spec.mpi_replica_specs["Worker"].template["metadata"] == {"labels": {"1": "one"}, "n": 2**70}
    broken = mpijob()
    broken["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"a": {1, 2}}}
    spec, errors = validate(broken)
    assert spec is None and len(errors) == 1 and errors[0].startswith("spec: not JSON (")
