"""The testbed's MPI images as root filesystems on this host (chroot, no cluster), and jacobi's result computed
independently: for tests/integration/test_jacobi_program.py and test_restart_supervisor.py.

The images come from testbed/build-mpi-images.sh, cached by input hash (~1 min cold each). Needs root (chroot,
mount) and umoci; elsewhere the tests skip, or fail under CI=true (cannot_run)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

from cannot_run import cannot_run

REPO = Path(__file__).resolve().parents[2]

# Each run in its own mount namespace: the mounts vanish with it, so no test leaves one behind.
IN_ROOT = 'r=$1; shift; mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && mount --rbind /sys "$r/sys" \
&& exec chroot "$r" "$@"'


def unpack_image(name: str, tmp: Path) -> Path:
    """The image's root filesystem under `tmp`, unpacked from the archive build-mpi-images.sh keeps in its cache."""
    if os.geteuid() != 0:
        cannot_run(f"jacobi runs in a chroot of the {name} image: needs root")
    umoci = shutil.which("umoci")
    if umoci is None:
        cannot_run("umoci not found (Debian package umoci)")
    build = subprocess.run(
        ["bash", str(REPO / "testbed/build-mpi-images.sh"), str(tmp / "images"), name],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        cannot_run(f"the {name} image cannot be built here (exit {build.returncode}): {build.stderr[-2000:]}")
    with tarfile.open(tmp / "images" / f"{name}.tar") as archive:
        archive.extractall(tmp / "oci", filter="tar")
    subprocess.run([umoci, "unpack", "--image", f"{tmp / 'oci'}:{name}", str(tmp / "bundle")], check=True,
                   capture_output=True)  # fmt: skip
    root = (tmp / "bundle/rootfs").resolve()  # as /proc/PID/root shows it
    # A container runtime writes /etc/hosts; without one, OpenMPI asks DNS for the host's name and every
    # other start waits 5 s for the resolver.
    shutil.copy("/etc/hosts", root / "etc/hosts")
    return root


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def python_jacobi(n: int, sweeps: int) -> bytes:
    """The same sweeps evaluated here, operation for operation as jacobi.c does them (IEEE doubles both)."""
    last = float(n - 1)
    grid = [[0.0] * n for _ in range(n)]
    for j in range(n):
        grid[0][j], grid[n - 1][j] = 1.0, 0.5 * j / last
    for i in range(1, n - 1):
        grid[i][0] = 1.0 - i / last  # the right column stays 0.0
    for _ in range(sweeps):
        new = [row[:] for row in grid]
        for i in range(1, n - 1):
            up, row, down = grid[i - 1], grid[i], grid[i + 1]
            new[i][1 : n - 1] = [0.25 * (((up[j] + down[j]) + row[j - 1]) + row[j + 1]) for j in range(1, n - 1)]
        grid = new
    return struct.pack(f"={n * n}d", *(v for row in grid for v in row))
