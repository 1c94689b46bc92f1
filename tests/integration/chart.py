"""The Helm chart as tests render it (`helm template` with a helm built from its Go module, at
MPIJOB_HELM_BIN), and reading what it renders: shared by test_install.py and test_rbac.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy/helm/mpijob-operator"
HELM = Path(os.environ.get("MPIJOB_HELM_BIN", REPO / ".cache/helm/bin")) / "helm"
KUBE_VERSION = "1.37.2"
# The chart renders nothing without an image (no image is published from this repository).
IMAGE = ("--set", "image.repository=registry.example/mpijob-operator")


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def helm(*args: str) -> str:
    if not HELM.exists():
        pytest.fail(f"{HELM} missing: run `bash testbed/helm/build.sh` (make test does)")
    proc = subprocess.run([str(HELM), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def helm_refuses(*args: str) -> str:
    """What helm says when it refuses (a test that it does)."""
    proc = subprocess.run([str(HELM), *args], capture_output=True, text=True, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


NODES_ONLY = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]


def namespaced_chart(release_ns: str, *watched: str) -> list[dict[str, Any]]:
    """The chart rendered with watchNamespaces (user roles off: they are aggregated ClusterRoles for people)."""
    return docs(
        helm(
            "template", "r", str(CHART), "-n", release_ns, "--kube-version", KUBE_VERSION, *IMAGE,
            "--set", f"watchNamespaces={{{','.join(watched)}}}", "--set", "userRoles.create=false",
        )
    )  # fmt: skip
