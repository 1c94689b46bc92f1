"""Generated docs match their source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mpijob.api.crd import crd
from mpijob.api.reference import api_reference

REPO = Path(__file__).resolve().parents[2]


def test_api_reference_matches_the_models() -> None:
    committed = (REPO / "docs/api-reference.md").read_text()
    assert committed == api_reference(), "docs/api-reference.md is stale: run `make docs`"


def test_every_elastic_policy_field_is_in_the_api_reference() -> None:
    # The CRD's schema is the list (test_crd.py pins its names); the reference must document each.
    (version,) = crd()["spec"]["versions"]
    fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["elasticPolicy"]["properties"]
    text = api_reference()
    for field in fields:
        assert f"| `{field}` |" in text, field
    assert "### `spec.elasticPolicy`" in text


def test_every_code_pointer_in_the_design_names_an_existing_function() -> None:
    """docs/design.md's "Where each rule lives" names `module.py:Function` (or `Class.method`): each must
    exist, so the pointers cannot rot when code moves."""
    text = (REPO / "docs/design.md").read_text()
    section = text.split("## Where each rule lives", 1)[1].split("\n## ", 1)[0]
    pointers = re.findall(r"`([a-z_/]+\.py):([A-Za-z_.]+)`", section)
    assert len(pointers) > 20
    for path, dotted in pointers:
        tree = ast.parse((REPO / "src/mpijob" / path).read_text())
        scope: list[ast.stmt] = tree.body
        for part in dotted.split("."):
            found = [
                node
                for node in scope
                if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == part)
                or (
                    isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == part for t in node.targets)
                )
            ]
            assert found, f"docs/design.md points to {path}:{dotted}, which does not exist"
            node = found[0]
            scope = node.body if isinstance(node, ast.ClassDef) else []
