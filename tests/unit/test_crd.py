"""The CRD is generated from the models, committed, structural, and exposes scale and printer columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mpijob.api.crd import crd, crd_yaml

COMMITTED = Path(__file__).resolve().parents[2] / "deploy" / "crd" / "kubeflow.org_mpijobs.yaml"


def _version() -> dict[str, Any]:
    versions = crd()["spec"]["versions"]
    assert len(versions) == 1
    version: dict[str, Any] = versions[0]
    return version


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _version()["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, sub in (node.get("properties") or {}).items():
            found += _walk(sub, f"{path}.{key}")
        if isinstance(node.get("additionalProperties"), dict):
            found += _walk(node["additionalProperties"], f"{path}[*]")
        if isinstance(node.get("items"), dict):
            found += _walk(node["items"], f"{path}[]")
    return found


def _keys_anywhere(node: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            keys.add(key)
            keys |= _keys_anywhere(value)
    elif isinstance(node, list):
        for value in node:
            keys |= _keys_anywhere(value)
    return keys


def test_committed_crd_equals_generated_one() -> None:
    assert COMMITTED.exists(), f"{COMMITTED} is missing; generate it with `mpijob crd > {COMMITTED}`"
    assert COMMITTED.read_text() == crd_yaml(), (
        f"{COMMITTED} differs from the models; regenerate it with `mpijob crd > deploy/crd/kubeflow.org_mpijobs.yaml`"
    )


def test_crd_yaml_round_trips_to_the_crd_dict() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


def test_crd_identity_is_kubeflow_v2beta1_mpijob_namespaced() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert spec["group"] == "kubeflow.org"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "MPIJob"
    assert spec["names"]["plural"] == "mpijobs"
    version = _version()
    assert version["name"] == "v2beta1"
    assert version["served"] is True
    assert version["storage"] is True


def test_schema_is_structural_without_refs_or_combinators() -> None:
    keys = _keys_anywhere(crd())
    for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title"):
        assert forbidden not in keys, forbidden


def test_every_schema_node_has_a_type_or_preserves_unknown_fields() -> None:
    for path, node in _walk(_schema()):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields") is True, path
        # A structural schema never mixes properties and additionalProperties, and never sets a null default.
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("default", 0) is not None, path


def test_map_list_keys_are_required_in_their_items() -> None:
    for path, node in _walk(_schema()):
        if node.get("x-kubernetes-list-type") == "map":
            required = set(node["items"].get("required") or [])
            assert set(node["x-kubernetes-list-map-keys"]) <= required, path


def test_status_and_scale_subresources_map_to_worker_replicas() -> None:
    sub = _version()["subresources"]
    assert sub["status"] == {}
    assert sub["scale"] == {
        "specReplicasPath": ".spec.mpiReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    }
    # The paths exist in the schema.
    props = _schema()["properties"]
    replica = props["spec"]["properties"]["mpiReplicaSpecs"]["additionalProperties"]
    assert replica["properties"]["replicas"]["type"] == "integer"
    worker_status = props["status"]["properties"]["replicaStatuses"]["additionalProperties"]["properties"]
    assert worker_status["active"]["type"] == "integer"
    assert worker_status["selector"]["type"] == "string"


def test_printer_columns_show_state_ready_desired_and_age() -> None:
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in _version()["additionalPrinterColumns"]}
    assert columns == {
        "State": ("string", ".status.state"),
        "Ready": ("integer", ".status.replicaStatuses.Worker.ready"),
        "Desired": ("integer", ".spec.mpiReplicaSpecs.Worker.replicas"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


def test_spec_defaults_and_enums_follow_the_reference() -> None:
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["mpiReplicaSpecs"]
    assert props["slotsPerWorker"]["default"] == 1
    assert props["runLauncherAsWorker"]["default"] is False
    assert props["sshAuthMountPath"]["default"] == "/root/.ssh"
    assert props["launcherCreationPolicy"]["enum"] == ["AtStartup", "WaitForWorkersReady"]
    assert props["launcherCreationPolicy"]["default"] == "AtStartup"
    assert props["mpiImplementation"]["enum"] == ["OpenMPI", "Intel", "MPICH"]
    assert props["runPolicy"]["properties"]["cleanPodPolicy"]["enum"] == ["None", "Running", "All"]
    assert props["runPolicy"]["properties"]["suspend"]["default"] is False
    replica = props["mpiReplicaSpecs"]["additionalProperties"]
    assert replica["properties"]["restartPolicy"]["enum"] == ["Never", "OnFailure"]
    containers = replica["properties"]["template"]["properties"]["spec"]["properties"]["containers"]
    assert containers["minItems"] == 1


def test_elastic_policy_schema_has_the_user_facing_names() -> None:
    ep = _schema()["properties"]["spec"]["properties"]["elasticPolicy"]["properties"]
    assert set(ep) == {
        "minReplicas",
        "maxReplicas",
        "workersToDelete",
        "nodeTerminationPolicy",
        "scaleInGracePeriodSeconds",
        "indexPolicy",
        "hostDiscovery",
        "regrow",
        "mode",
        "restart",
    }
    assert ep["hostDiscovery"]["enum"] == ["API", "File"]
    assert ep["mode"]["enum"] == ["InPlace", "Restart"] and ep["mode"]["default"] == "InPlace"
    assert ep["restart"]["properties"]["signal"]["enum"] == ["SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM"]
    assert ep["minReplicas"]["minimum"] == 1
    assert ep["nodeTerminationPolicy"]["enum"] == ["ScaleIn", "Replace", "Ignore"]
    assert ep["nodeTerminationPolicy"]["default"] == "ScaleIn"
    assert ep["indexPolicy"]["enum"] == ["FillGaps", "Append"]
    # Pod names only (DNS-1123 labels): `ns/name` and junk are refused at admission.
    assert ep["workersToDelete"]["items"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 63,
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    }
    assert ep["workersToDelete"]["maxItems"] == 1024


def test_cross_field_rules_name_the_field_they_guard() -> None:
    rules = _schema()["properties"]["spec"]["x-kubernetes-validations"]
    by_path: dict[str, list[str]] = {}
    for rule in rules:
        by_path.setdefault(rule["fieldPath"], []).append(rule["message"])
    assert any("Launcher is required" in m for m in by_path[".mpiReplicaSpecs"])
    assert any("must be 1" in m for m in by_path[".mpiReplicaSpecs.Launcher.replicas"])
    assert any("minReplicas" in m for m in by_path[".mpiReplicaSpecs.Worker.replicas"])
    assert any("maxReplicas" in m for m in by_path[".elasticPolicy.maxReplicas"])
    root = _schema()["x-kubernetes-validations"]
    assert any("metadata.name" in r["message"] for r in root)
    managed_by = _schema()["properties"]["spec"]["properties"]["runPolicy"]["properties"]["managedBy"]
    assert managed_by["x-kubernetes-validations"] == [{"message": "is immutable", "rule": "self == oldSelf"}]
