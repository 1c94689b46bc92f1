"""mpijob-run, Restart mode's launcher supervisor (src/mpijob/planner/mpijob_run.sh), around each MPI
implementation's real launcher in the testbed's images (chroot, one host, no cluster): with the environment
the operator gives a Restart-mode launcher for that implementation, a change of the host list reaches the
ranks as SIGUSR1 through `mpirun`/`mpiexec` (OpenMPI 4.1's orterun, OpenMPI 5's prterun, MPICH's hydra), they
checkpoint and stop, and the next run starts from that checkpoint with the new rank count, read from the
hostfile the supervisor wrote at the path the operator points the implementation to. The end: jacobi's grid of
an uninterrupted run (checked against an independent evaluation in Python)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from mpi_rootfs import IN_ROOT, fnv1a64, python_jacobi, unpack_image

from mpijob.api import constants as c
from mpijob.planner.children import launcher_job
from mpijob.planner.plan import validate
from mpijob.planner.restart import RUN_SCRIPT

pytestmark = pytest.mark.integration

SIZE, ITERATIONS, DELAY_MS = 40, 300, 20
LAUNCHERS = {
    "openmpi4": ("OpenMPI", "mpirun --allow-run-as-root --oversubscribe"),
    "openmpi5": ("OpenMPI", "mpirun --allow-run-as-root --oversubscribe"),
    "mpich": ("MPICH", "mpiexec"),
}


def _operator_env(implementation: str) -> dict[str, str]:
    """The environment the operator gives a Restart-mode launcher of this implementation (its own builder)."""
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ns", "uid": "u"},
        "spec": {
            "mpiImplementation": implementation,
            "elasticPolicy": {"mode": "Restart", "minReplicas": 1, "maxReplicas": 4},
            "mpiReplicaSpecs": {
                "Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i", "command": ["x"]}]}}},
                "Worker": {"replicas": 3, "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}},
            },
        },
    }
    spec, errors = validate(job)
    assert spec is not None and not errors, errors
    container = launcher_job(job, spec)["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


def _listing(slots: int) -> str:
    return f"# mpijob discovery of ns/pi, changed now\nlocalhost:{slots}\n"


@pytest.mark.parametrize("image", sorted(LAUNCHERS))
def test_a_shrink_stops_the_real_mpi_launcher_at_a_checkpoint_and_the_next_run_resumes_smaller_to_the_same_grid(
    tmp_path: Path, image: str
) -> None:
    root = unpack_image(image, tmp_path)
    implementation, launcher = LAUNCHERS[image]
    run_dir = root / "tmp" / "run"
    (run_dir / "ckpt").mkdir(parents=True)
    (root / c.RUN_MOUNT_PATH.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (run_dir / "mpijob-run").write_text(RUN_SCRIPT)
    hosts = run_dir / "hosts"
    hosts.write_text(_listing(3))
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        **_operator_env(implementation),
        "MPIJOB_RUN_LIST": "/tmp/run/hosts",
        "MPIJOB_RUN_LEAVING": "/tmp/run/leaving",
        "MPIJOB_RUN_CONFIG_LIST": "/tmp/run/none",
    }
    program = (f'{launcher} -n "$MPIJOB_RANKS" /home/mpiuser/jacobi --size {SIZE} --iterations {ITERATIONS} '
               f"--checkpoint-dir /tmp/run/ckpt --delay-ms {DELAY_MS}")  # fmt: skip
    unshare = shutil.which("unshare") or "unshare"
    out = run_dir / "out"
    command = [unshare, "--mount", "--propagation", "private", "sh", "-c", IN_ROOT, "sh", str(root),
               "sh", "/tmp/run/mpijob-run", "--", "sh", "-c", program]  # fmt: skip
    with out.open("w") as sink:
        proc = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            _wait_for(out, r"starting at iteration 0 with 3 ranks")
            time.sleep(1)  # some sweeps done
            hosts.write_text(_listing(2))
            assert proc.wait(timeout=90) == 0, out.read_text()
        finally:
            proc.kill()
    text = out.read_text()
    [(stopped, three)] = re.findall(r"stopped at iteration (\d+) with (\d+) ranks", text)
    assert three == "3" and 0 < int(stopped) < ITERATIONS, text
    assert f"starting at iteration {stopped} with 2 ranks" in text, text
    assert "mpijob-run: run 2 on 1 hosts, 2 ranks" in text, text
    [checksum] = re.findall(rf"finished iteration {ITERATIONS} with 2 ranks: checksum ([0-9a-f]{{16}})", text)
    assert checksum == fnv1a64(python_jacobi(SIZE, ITERATIONS)), text


def _wait_for(out: Path, pattern: str, within: float = 60) -> None:
    end = time.monotonic() + within
    while not re.search(pattern, out.read_text()):
        assert time.monotonic() < end, f"no {pattern!r} within {within} s: {out.read_text()}"
        time.sleep(0.1)
