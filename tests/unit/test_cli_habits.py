"""kubectl's habits in the CLI that need no cluster: namespace resolution, option placement, completion
of static words (one-line errors: test_cli_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mpijob.cli.kube import resolve_namespace
from mpijob.cli.plugin import candidates, hoist_global_options


def _config(path: Path, current: str | None, contexts: dict[str, str | None]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [
            {"name": n, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
            for n, ns in contexts.items()
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_namespace_comes_from_n_then_the_context_then_default(tmp_path: Path) -> None:
    config = str(_config(tmp_path / "a", "one", {"one": "team-a", "two": None}))
    assert resolve_namespace(config, None, None) == "team-a"
    assert resolve_namespace(config, "two", None) == "default"
    assert resolve_namespace(config, "one", "explicit") == "explicit"


def test_kubeconfig_files_merge_as_kubectl_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _config(tmp_path / "first", None, {"x": "from-first"})
    second = _config(tmp_path / "second", "x", {"x": "from-second", "y": "why"})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    # The current context from the only file that sets it; the context's entry from the first file naming it.
    assert resolve_namespace(None, None, None) == "from-first"
    assert resolve_namespace(None, "y", None) == "why"


def test_options_before_the_command_are_moved_after_it() -> None:
    assert hoist_global_options(["-n", "a", "--context", "c", "status", "j"]) == [
        "status",
        "-n",
        "a",
        "--context",
        "c",
        "j",
    ]
    assert hoist_global_options(["--version"]) == ["--version"]
    assert hoist_global_options(["status", "j", "-n", "a"]) == ["status", "j", "-n", "a"]


def test_static_completions() -> None:
    assert candidates(["sc"]) == ["scale", "scale-in"]
    assert candidates(["status", "j", "-o", ""]) == ["json", "yaml", "wide"]
    assert "--wait" in candidates(["scale-in", "j", "--w"])
