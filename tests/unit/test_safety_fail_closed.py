"""Issue 8, rule 5: fail closed on conflicts.

While a Service, ConfigMap, Secret or launcher Job with the job's child name exists and is not owned by the
job, no worker and no launcher is created: they would mount someone else's discover_hosts.sh or SSH key,
or join someone else's headless Service. The ResourceConflict condition and Warning say why; removing the
foreign object lets the job start.
"""

from __future__ import annotations

import pytest

from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj

from .builders import (
    cond,
    config_map,
    created_names,
    emits,
    launcher_job,
    mpijob,
    secret,
    service,
    snap,
    status_of,
)

OTHER = mpijob(name="other", uid="uid-other")

FOREIGN = {
    "Service": lambda job: {"service_obj": service(job, owner=OTHER)},
    "ConfigMap": lambda job: {"config_map_obj": config_map(job, {"discover_hosts.sh": "echo evil:1"}, owner=OTHER)},
    "Secret": lambda job: {"secret_obj": secret(job, owner=OTHER)},
    "Job": lambda job: {"launcher": launcher_job(job, owner=OTHER)},
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_foreign_child_blocks_every_worker_and_the_launcher(kind: str) -> None:
    job = mpijob(workers=3)

    actions = plan(snap(job, **FOREIGN[kind](job)))

    assert created_names(actions, "Pod") == []
    assert created_names(actions, "Job") == []
    status = status_of(actions)
    assert status is not None
    conflict = cond(status, "ResourceConflict")
    assert conflict is not None and conflict["status"] == "True"
    assert kind in conflict["message"] and "No worker or launcher is created" in conflict["message"]
    assert emits(actions, "Warning", "ResourceConflict")


@pytest.mark.parametrize("kind", FOREIGN)
def test_job_starts_once_the_foreign_child_is_gone(kind: str) -> None:
    job = mpijob(workers=3)
    job["status"] = status_of(plan(snap(job, **FOREIGN[kind](job))))

    actions = plan(snap(job))

    assert len(created_names(actions, "Pod")) == 3
    assert created_names(actions, "Job") == ["pi-launcher"]
    conflict = cond(status_of(actions) or {}, "ResourceConflict")
    assert conflict is not None and conflict["status"] == "False"


def test_foreign_pdb_does_not_block_workers() -> None:
    from .builders import elastic, pdb

    job = mpijob(workers=2, elastic_policy=elastic(1, 4))
    extra: dict[str, Obj] = {"pdb_obj": pdb(job, 1, owner=OTHER)}

    actions = plan(snap(job, **extra))  # type: ignore[arg-type]

    # A PodDisruptionBudget carries no configuration the workers use: reported, not blocking.
    assert len(created_names(actions, "Pod")) == 2
