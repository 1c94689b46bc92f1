"""The reference operator's own install file (kubeflow/mpi-operator v0.8.2 `deploy/v2beta1/mpi-operator.yaml`,
from its Go module), with one change: the Deployment's image is mpijob's. What a user who swaps the image
applies (docs/migration.md, "Swap the image")."""

from __future__ import annotations

from reference_examples import module_dir

REFERENCE_IMAGE = "image: mpioperator/mpi-operator:0.8.2"
NAMESPACE = "mpi-operator"
DEPLOYMENT = "mpi-operator"
LEASE = "mpi-operator"


def swapped_install(image: str) -> str:
    """The install file with the operator's image swapped: the only line that changes."""
    text = (module_dir() / "deploy" / "v2beta1" / "mpi-operator.yaml").read_text()
    assert text.count(REFERENCE_IMAGE) == 1, "the reference's install names its image once"
    return text.replace(REFERENCE_IMAGE, f"image: {image}")
