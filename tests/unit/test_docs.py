"""Generated docs match their source."""

from __future__ import annotations

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
