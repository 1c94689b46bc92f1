"""The reference operator's examples (data/reference-examples/, copies of kubeflow/mpi-operator v0.8.2's
examples/v2beta1/), loaded as it ships them, with only what this testbed cannot have swapped."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
MODULE = "github.com/kubeflow/mpi-operator"
VERSION = "v0.8.2"  # bench/reference/go.mod's (tests/unit/test_reference_examples.py checks)
REPO = Path(__file__).resolve().parents[2]
UPSTREAM_DIR = "examples/v2beta1"
HERE = Path(__file__).parent / "data" / "reference-examples" / "v2beta1"
# The examples this testbed can run (see data/reference-examples/README.md for the others).
RUNNABLE = ("pi/pi.yaml", "pi/pi-mpich.yaml", "pi/pi-intel.yaml")


def module_dir() -> Path:
    """The reference's module at VERSION, from the Go module cache (the Go module proxy the first time)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        cwd=REPO / "bench" / "reference",
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    )
    return Path(json.loads(out.stdout)["Dir"])


def load(path: str) -> Obj:
    body: Obj = yaml.safe_load((HERE / path).read_text())
    return body


def containers(job: Obj) -> Iterator[Obj]:
    for replica in (job["spec"]["mpiReplicaSpecs"] or {}).values():
        yield from replica["template"]["spec"]["containers"]


def as_run_here(path: str, image: str) -> Obj:
    """The example with every container's image swapped for `image` (a testbed image, imported into the
    real nodes), and `imagePullPolicy: Always` made `IfNotPresent`: the testbed has no registry to pull
    from. Nothing else changes (tests/unit/test_reference_examples.py)."""
    job = copy.deepcopy(load(path))
    for container in containers(job):
        container["image"] = image
        if container.get("imagePullPolicy") == "Always":
            container["imagePullPolicy"] = "IfNotPresent"
    return job
