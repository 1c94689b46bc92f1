"""The reference operator's own install file (kubeflow/mpi-operator v0.8.2 `deploy/v2beta1/mpi-operator.yaml`,
from its Go module), with one change: the Deployment's image is mpijob's. What a user who swaps the image
applies (docs/migration.md, "Swap the image")."""

from __future__ import annotations

from reference_examples import module_dir

REFERENCE_IMAGE = "image: mpioperator/mpi-operator:0.8.2"
# The name the kubelet resolves that image line to: the reference's own image (bench/reference/build-image.sh)
# is loaded onto the nodes under it, so the install file runs unchanged (its tag is not `latest`: the kubelet
# uses a present image and never pulls).
REFERENCE_IMAGE_NAME = "docker.io/mpioperator/mpi-operator:0.8.2"
NAMESPACE = "mpi-operator"
DEPLOYMENT = "mpi-operator"
LEASE = "mpi-operator"


def install() -> str:
    """The install file as the reference ships it."""
    return (module_dir() / "deploy" / "v2beta1" / "mpi-operator.yaml").read_text()


def swapped_install(image: str) -> str:
    """The install file with the operator's image swapped: the only line that changes."""
    text = install()
    assert text.count(REFERENCE_IMAGE) == 1, "the reference's install names its image once"
    return text.replace(REFERENCE_IMAGE, f"image: {image}")
