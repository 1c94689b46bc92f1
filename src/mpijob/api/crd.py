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

from mpijob.api import rules
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

# Defined once in rules.py, with the Python predicates the planner checks.
_SPEC_RULES = rules.cel(rules.SPEC_RULES)
_ROOT_RULES = rules.cel(rules.ROOT_RULES, with_field_path=False)


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
