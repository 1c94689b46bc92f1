"""The reference operator's own install file (kubeflow/mpi-operator v0.8.2 `deploy/v2beta1/mpi-operator.yaml`,
from its Go module), with one change: the Deployment's image is mpijob's. What a user who swaps the image
applies (docs/migration.md, "Swap the image")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE = "github.com/kubeflow/mpi-operator"
REFERENCE_IMAGE = "image: mpioperator/mpi-operator:0.8.2"
NAMESPACE = "mpi-operator"
DEPLOYMENT = "mpi-operator"
LEASE = "mpi-operator"


def module_dir() -> Path:
    """The module bench/reference/go.mod pins, from the Go module cache (the proxy the first time)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    out = subprocess.run(
        ["go", "mod", "download", "-json", MODULE],
        cwd=REPO / "bench" / "reference",
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    )
    return Path(json.loads(out.stdout)["Dir"])


def swapped_install(image: str) -> str:
    """The install file with the operator's image swapped: the only line that changes."""
    text = (module_dir() / "deploy" / "v2beta1" / "mpi-operator.yaml").read_text()
    assert text.count(REFERENCE_IMAGE) == 1, "the reference's install names its image once"
    return text.replace(REFERENCE_IMAGE, f"image: {image}")
