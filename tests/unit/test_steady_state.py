"""A converged job produces no writes: a reconcile on an unchanged world creates, patches and deletes nothing."""

from __future__ import annotations

import pytest

from mpijob.planner.snapshot import OperatorConfig

from .builders import cond_true, elastic, mpijob, writes
from .world import World


def _converged(world: World, job_name: str = "pi") -> None:
    world.settle(job_name)
    world.start_launcher(job_name)
    world.settle(job_name)


@pytest.mark.parametrize("implementation", ["OpenMPI", "Intel", "MPICH"])
def test_converged_static_job_makes_zero_writes(implementation: str) -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=3, implementation=implementation))
    _converged(world)

    for _ in range(3):
        assert writes(world.reconcile("pi")) == []
    assert world.errors == []
    assert cond_true(world.job("pi")["status"], "Running")


def test_converged_elastic_job_makes_zero_writes() -> None:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(2, 8)))
    _converged(world)

    assert writes(world.reconcile("pi")) == []
    assert world.errors == []


def test_converged_job_with_launcher_as_worker_and_cluster_domain_makes_zero_writes() -> None:
    world = World(config=OperatorConfig(cluster_domain="example.org"))
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, launcher_as_worker=True, launcher_creation_policy="WaitForWorkersReady"))
    _converged(world)

    assert writes(world.reconcile("pi")) == []
    assert world.errors == []


def test_status_fields_that_disappear_are_removed_so_the_job_converges() -> None:
    # The launcher pod stops running (Job retrying): replicaStatuses.Launcher.active must go away, not stay
    # behind in a merge patch and make every later reconcile write the status again.
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=1))
    _converged(world)
    launcher_pod = next(p for p in world.pods() if p["metadata"]["name"].startswith("pi-launcher"))
    launcher_pod["status"]["phase"] = "Failed"

    world.settle("pi")

    assert "active" not in world.job("pi")["status"]["replicaStatuses"]["Launcher"]
    assert writes(world.reconcile("pi")) == []


def test_failed_worker_count_clears_once_the_failed_worker_is_gone() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=2, elastic_policy=elastic(1, 4, node_termination_policy="Replace")))
    _converged(world)
    world.pod("pi-worker-1")["status"]["phase"] = "Failed"
    world.reconcile("pi")
    assert world.job("pi")["status"]["replicaStatuses"]["Worker"].get("failed") == 1

    world.settle("pi")

    assert "failed" not in world.job("pi")["status"]["replicaStatuses"]["Worker"]
    assert writes(world.reconcile("pi")) == []
