"""The world simulator behaves like the API server where the planner depends on it."""

from __future__ import annotations

import pytest

from mpijob.planner.actions import Create, Delete, Emit, Patch

from .builders import foreign_pod, mpijob
from .world import World, merge_patch


def test_merge_patch_merges_dicts_removes_nulls_and_replaces_lists() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "k": "v"}
    assert merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3], "k": None}) == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "k": "v"}


def test_every_write_bumps_the_resource_version_and_a_stale_one_is_refused() -> None:
    world = World()
    pod = world.add(foreign_pod("p"))
    rv = pod["metadata"]["resourceVersion"]

    assert world.apply([Patch("v1", "Pod", "p", {"metadata": {"labels": {"x": "1"}}}, resource_version=rv)]) is None
    new_rv = world.pod("p")["metadata"]["resourceVersion"]
    assert int(new_rv) > int(rv)

    err = world.apply([Patch("v1", "Pod", "p", {"metadata": {"labels": {"x": "2"}}}, resource_version=rv)])
    assert err is not None and err.code == 409
    assert world.pod("p")["metadata"]["labels"]["x"] == "1"


def test_a_batch_stops_at_the_first_failure() -> None:
    world = World()
    err = world.apply([Patch("v1", "Pod", "missing", {}), Emit("Normal", "X", "y")])
    assert err is not None and err.code == 404
    assert world.events == []


def test_status_and_spec_are_separate_for_kinds_with_a_status_subresource() -> None:
    world = World()
    world.add(mpijob())
    world.apply([Patch("kubeflow.org/v2beta1", "MPIJob", "pi", {"spec": {"slotsPerWorker": 2}, "status": {"x": 1}})])
    assert world.job("pi")["spec"]["slotsPerWorker"] == 2
    assert "status" not in world.job("pi")
    world.apply([Patch("kubeflow.org/v2beta1", "MPIJob", "pi", {"status": {"x": 1}}, subresource="status")])
    assert world.job("pi")["status"] == {"x": 1}


def test_job_patches_in_one_batch_chain_their_resource_versions_like_the_executor() -> None:
    world = World()
    rv = world.add(mpijob())["metadata"]["resourceVersion"]
    api = "kubeflow.org/v2beta1"
    assert (
        world.apply(
            [
                Patch(api, "MPIJob", "pi", {"spec": {"slotsPerWorker": 2}}, resource_version=rv),
                Patch(api, "MPIJob", "pi", {"status": {"x": 1}}, resource_version=rv, subresource="status"),
            ]
        )
        is None
    )
    assert world.job("pi")["status"] == {"x": 1}


def test_elastic_replicas_outside_the_bounds_are_refused_like_the_crd_rules() -> None:
    world = World()
    world.add(mpijob(workers=2, elastic_policy={"minReplicas": 2}))
    err = world.apply(
        [Patch("kubeflow.org/v2beta1", "MPIJob", "pi", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}})]
    )
    assert err is not None and err.code == 422


def test_pods_terminate_first_and_go_away_when_the_test_says() -> None:
    world = World()
    pod = world.add(foreign_pod("p"))
    world.apply([Delete("v1", "Pod", "p", uid=pod["metadata"]["uid"])])
    assert world.pod("p")["metadata"]["deletionTimestamp"]
    world.finish_deletions()
    assert world.get("Pod", "p") is None


def test_uid_precondition_protects_a_newer_object_with_the_same_name() -> None:
    world = World()
    world.add(foreign_pod("p"))
    world.apply([Delete("v1", "Pod", "p", uid="uid-of-an-older-pod")])
    assert "deletionTimestamp" not in world.pod("p")["metadata"]
    assert [e.code for e in world.tolerated] == [409]


def test_created_pods_are_bound_round_robin_and_run_when_told() -> None:
    world = World(placement=["a", "b"])
    for name in ("w0", "w1", "w2"):
        world.apply([Create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}})])
    assert [p["spec"]["nodeName"] for p in world.pods()] == ["a", "b", "a"]
    assert {p["status"]["phase"] for p in world.pods()} == {"Pending"}
    world.run("w1")
    assert world.pod("w1")["status"]["phase"] == "Running"


def test_deleting_the_mpijob_collects_what_it_controls() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=1))
    world.settle("pi")
    uid = world.job("pi")["metadata"]["uid"]
    world.apply([Delete("kubeflow.org/v2beta1", "MPIJob", "pi", uid=uid)])
    assert world.get("Service", "pi") is None
    assert world.pod("pi-worker-0")["metadata"]["deletionTimestamp"]


def test_settle_fails_loudly_without_a_fixed_point() -> None:
    world = World()
    world.add_nodes("node-1")
    world.add(mpijob(workers=1))
    with pytest.raises(AssertionError, match="no fixed point"):
        world.settle("pi", max_rounds=1)
