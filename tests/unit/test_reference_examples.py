"""The reference's examples kept in tests/integration/data/reference-examples/ are upstream's files, and
the integration tests run them with only the image (and a pull policy the testbed cannot honour) swapped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .upstream_examples import examples, upstream_dir

REPO = Path(__file__).resolve().parents[2]


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def test_the_pinned_version_is_the_one_the_reference_build_uses() -> None:
    go_mod = (REPO / "bench" / "reference" / "go.mod").read_text()
    assert f"{examples.MODULE} {examples.VERSION}" in go_mod


@pytest.mark.parametrize("path", examples.RUNNABLE)
def test_each_kept_example_is_upstreams_file_byte_for_byte(path: str) -> None:
    upstream = upstream_dir() / examples.UPSTREAM_DIR / path
    assert (examples.HERE / path).read_bytes() == upstream.read_bytes(), path


@pytest.mark.parametrize("path", examples.RUNNABLE)
def test_an_example_as_run_here_differs_from_upstream_only_in_the_image(path: str) -> None:
    upstream = yaml.safe_load((examples.HERE / path).read_text())
    here = examples.as_run_here(path, "mpijob.local/x:testbed")
    changed = _differences(upstream, here)
    allowed = {
        p for p in changed if p.endswith(".image") or (p.endswith(".imagePullPolicy") and _at(upstream, p) == "Always")
    }
    assert changed and set(changed) == allowed, changed
    assert all(c["image"] == "mpijob.local/x:testbed" for c in examples.containers(here))


def _at(obj: Any, path: str) -> Any:
    for part in path.strip(".").replace("[", ".").replace("]", "").split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj.get(part)
    return obj
