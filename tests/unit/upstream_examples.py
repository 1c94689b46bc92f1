"""The integration tests' record of the reference's examples (tests/integration/reference_examples.py: its Go
module, the examples kept here, how they are run), loaded by path: tests/integration is not a package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    path = REPO / "tests" / "integration" / "reference_examples.py"
    spec = importlib.util.spec_from_file_location("reference_examples", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


examples = _load()


def upstream_dir() -> Path:
    return Path(examples.module_dir())
