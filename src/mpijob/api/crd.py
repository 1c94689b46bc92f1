"""Generates the MPIJob CustomResourceDefinition from the pydantic models.

Pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema (no $ref, no anyOf for
optional fields, `x-kubernetes-preserve-unknown-fields` instead of open objects). `structural()` does that
conversion; the rules that span fields are CEL (`x-kubernetes-validations`) so that `kubectl apply` of a bad
manifest is refused with a message naming the field.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from mpijob.api.models import GROUP, KIND, PLURAL, VERSION, JobStatus, MPIJobSpec

_DROP = {"title", "propertyNames"}

# Pod templates are copied, not interpreted; we only insist on what the reference validates: a container.
_TEMPLATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Pod template (core/v1 PodTemplateSpec).",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                }
            },
        },
    },
}

_W = "self.mpiReplicaSpecs['Worker']"
_E = "self.elasticPolicy"
_SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": "self.mpiReplicaSpecs.all(k, k == 'Launcher' || k == 'Worker')",
        "message": "keys must be Launcher or Worker",
        "fieldPath": ".mpiReplicaSpecs",
    },
    {
        "rule": "'Launcher' in self.mpiReplicaSpecs",
        "message": "mpiReplicaSpecs.Launcher is required",
        "fieldPath": ".mpiReplicaSpecs",
    },
    {
        "rule": "!('Launcher' in self.mpiReplicaSpecs) || !has(self.mpiReplicaSpecs.Launcher.replicas) || "
        "self.mpiReplicaSpecs.Launcher.replicas == 1",
        "message": "mpiReplicaSpecs.Launcher.replicas must be 1",
        "fieldPath": ".mpiReplicaSpecs.Launcher.replicas",
    },
    {
        "rule": f"has({_E}) || !('Worker' in self.mpiReplicaSpecs) || !has({_W}.replicas) || {_W}.replicas >= 1",
        "message": "mpiReplicaSpecs.Worker.replicas must be greater than or equal to 1",
        "fieldPath": ".mpiReplicaSpecs.Worker.replicas",
    },
    {
        "rule": f"!has({_E}) || ('Worker' in self.mpiReplicaSpecs && has({_W}.replicas))",
        "message": "elasticPolicy needs mpiReplicaSpecs.Worker.replicas",
        "fieldPath": ".mpiReplicaSpecs.Worker.replicas",
    },
    {
        "rule": f"!has({_E}) || !has({_E}.maxReplicas) || {_E}.maxReplicas >= {_E}.minReplicas",
        "message": "elasticPolicy.maxReplicas must be greater than or equal to elasticPolicy.minReplicas",
        "fieldPath": ".elasticPolicy.maxReplicas",
    },
    {
        "rule": f"!has({_E}) || !('Worker' in self.mpiReplicaSpecs) || !has({_W}.replicas) || "
        f"({_W}.replicas >= {_E}.minReplicas && (!has({_E}.maxReplicas) || {_W}.replicas <= {_E}.maxReplicas))",
        "message": "mpiReplicaSpecs.Worker.replicas must lie in [elasticPolicy.minReplicas, elasticPolicy.maxReplicas]",
        "fieldPath": ".mpiReplicaSpecs.Worker.replicas",
    },
]

_ROOT_RULES: list[dict[str, str]] = [
    {
        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 50",
        "message": "metadata.name must be a DNS-1035 label of at most 50 characters (it names the Service "
        "and prefixes '-worker-<index>')",
    }
]


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def structural(node: Any) -> Any:
    """Turns inlined pydantic JSON Schema into a Kubernetes structural schema."""
    if isinstance(node, list):
        return [structural(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        # Optional[X] comes out as anyOf [X, null]; an absent field already means null in Kubernetes.
        real = [s for s in any_of if s.get("type") != "null"]
        if len(real) != 1:
            raise ValueError(f"cannot express anyOf {any_of} structurally")
        node = {**real[0], **node}
    if node.get("default", 0) is None:
        del node["default"]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: structural(sub) for name, sub in value.items()}
        elif key == "additionalProperties":
            if value is True or value == {}:
                if "properties" not in node:
                    out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = structural(value)
        elif key in ("items",):
            out[key] = structural(value)
        else:
            out[key] = value
    return out


def _model_schema(model: type[MPIJobSpec] | type[JobStatus]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    result: dict[str, Any] = structural(_inline(raw, defs))
    return result


def spec_schema() -> dict[str, Any]:
    schema = _model_schema(MPIJobSpec)
    replica = schema["properties"]["mpiReplicaSpecs"]["additionalProperties"]
    replica["properties"]["template"] = copy.deepcopy(_TEMPLATE_SCHEMA)
    replica["required"] = ["template"]
    schema["properties"]["runPolicy"].setdefault("default", {})
    schema["x-kubernetes-validations"] = _SPEC_RULES
    return schema


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as a dict ready to apply or dump."""
    status = _model_schema(JobStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "mpijob",
                "categories": ["kubeflow", "all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.mpiReplicaSpecs.Worker.replicas",
                            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {
                            "name": "Ready",
                            "type": "integer",
                            "jsonPath": ".status.replicaStatuses.Worker.ready",
                        },
                        {
                            "name": "Desired",
                            "type": "integer",
                            "jsonPath": ".spec.mpiReplicaSpecs.Worker.replicas",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "x-kubernetes-validations": _ROOT_RULES,
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated from src/mpijob/api/models.py by `mpijob crd`. Do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)
