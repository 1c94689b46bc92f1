"""The reference operator (kubeflow/mpi-operator, built from its Go module by bench/reference/build.sh) as a
process on a testbed, for the hand-over tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from cannot_run import cannot_run

from mpijob.kube.client import Client

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path(os.environ.get("MPIJOB_REFERENCE_BIN", REPO / ".cache" / "reference"))
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def reference_built() -> None:
    build = subprocess.run(
        ["bash", str(REPO / "bench" / "reference" / "build.sh")], capture_output=True, text=True, check=False
    )
    if build.returncode != 0:
        cannot_run(f"the reference operator does not build here: {build.stdout[-1500:]}{build.stderr[-1500:]}")


class Reference:
    """The reference operator as a process, with the admin kubeconfig (its own RBAC is not what is tested)."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig, self.log = kubeconfig, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(REFERENCE / "mpi-operator"), f"--kubeConfig={self.kubeconfig}", "--threadiness=2",
                 "--lock-namespace=mpi-operator"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


async def put_reference_crd(client: Client) -> None:
    """The reference's CRD in place of the one that serves MPIJobs now."""
    body: dict[str, Any] = yaml.safe_load((REFERENCE / "crd.yaml").read_text())
    name = body["metadata"]["name"]
    current = await client.get(f"{CRD_PATH}/{name}")
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await client.request("PUT", f"{CRD_PATH}/{name}", body)
