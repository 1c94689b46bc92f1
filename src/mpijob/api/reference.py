"""The API reference (docs/api-reference.md), generated from the CRD schema, which is generated from the
pydantic models: one table per object, a row per field. `make docs` rewrites it; a test fails on drift."""

from __future__ import annotations

import json
from typing import Any

from mpijob.api.crd import crd
from mpijob.api.models import API_VERSION, KIND

_RULES = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern")
# Objects documented elsewhere (Kubernetes' own types): not expanded.
_OPAQUE = ("template",)


def _type(node: dict[str, Any]) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"[]{_type(node.get('items') or {})}"
    if kind == "object" and "additionalProperties" in node:
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(name: str, node: dict[str, Any], required: bool) -> str:
    rules = [f"{r}: {node[r]}" for r in _RULES if r in node]
    rules += [f"`{v['rule']}` ({v.get('message', '')})" for v in node.get("x-kubernetes-validations") or []]
    if required:
        rules.insert(0, "required")
    default = f"`{json.dumps(node['default'])}`" if "default" in node else ""
    return (
        f"| `{name}` | {_type(node)} | {default} | {_cell('; '.join(rules))} | {_cell(node.get('description', ''))} |"
    )


def _tables(path: str, node: dict[str, Any], out: list[str]) -> None:
    props: dict[str, Any] = node.get("properties") or {}
    if not props:
        return
    out += [f"### `{path}`", ""]
    if node.get("description"):
        out += [_cell(node["description"]), ""]
    for rule in node.get("x-kubernetes-validations") or []:
        out += [f"- Rule: `{rule['rule']}` ({rule.get('message', '')})"]
    if node.get("x-kubernetes-validations"):
        out.append("")
    out += ["| Field | Type | Default | Validation | Description |", "|---|---|---|---|---|"]
    required = set(node.get("required") or [])
    out += [_row(name, child, name in required) for name, child in props.items()]
    out.append("")
    for name, child in props.items():
        if name in _OPAQUE:
            continue
        if child.get("type") == "array":
            child = child.get("items") or {}
            name += "[]"
        elif "additionalProperties" in child:
            child = child["additionalProperties"]
            name += "[*]"
        _tables(f"{path}.{name}", child, out)


def api_reference() -> str:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = [
        f"# API reference: {KIND} ({API_VERSION})",
        "",
        "Generated from the pydantic models in `src/mpijob/api/models.py` (through the CRD schema) by",
        "`make docs`; a test fails when this file and the models differ. Field names, defaults and meaning",
        "follow the Kubeflow MPI operator's v2beta1 API; `spec.elasticPolicy`, `status.leavingWorkers`,",
        "`status.lastWorkerIndex`, `status.discoveredHosts` and `replicaStatuses[*].ready` are this",
        "operator's additions. Pod templates are Kubernetes' `PodTemplateSpec` and are not expanded here.",
        "",
    ]
    for part in ("spec", "status"):
        _tables(part, schema["properties"][part], out)
    return "\n".join(out).rstrip() + "\n"
