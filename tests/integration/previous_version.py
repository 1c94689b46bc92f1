"""The earlier mpijob the upgrade tests start from: one named commit whose operator differs from this one's, for
the kwok upgrade (test_upgrade.py, its `src/`) and the real nodes' `helm upgrade` (test_real_node_mpi.py, the image
its own build script makes). A commit, not `HEAD^`: the commit before this one often changes no code at all, and an
upgrade to the same code proves nothing. Move it forward when an upgrade from a newer version matters more."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

from cannot_run import cannot_run

REPO = Path(__file__).resolve().parents[2]

# This project before the operator asked the API server what it may do (runtime/permissions.py).
PREVIOUS_SOURCE = "c00bfe5"


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=False)


def previous_commit() -> str:
    """PREVIOUS_SOURCE's full hash; a clone without it (shallow) cannot run the upgrade tests."""
    found = _git("rev-parse", "--verify", "--quiet", f"{PREVIOUS_SOURCE}^{{commit}}")
    if found.returncode != 0:
        cannot_run(f"commit {PREVIOUS_SOURCE} (the version upgraded from) is not in this clone; fetch its history")
    return found.stdout.decode().strip()


def changed_sources(commit: str) -> list[str]:
    """The files of `src/` that differ between `commit` and this checkout (committed or not)."""
    diff = _git("diff", "--name-only", commit, "--", "src")
    assert diff.returncode == 0, diff.stderr.decode()
    return diff.stdout.decode().split()


def previous_tree(into: Path, *paths: str) -> Path:
    """`paths` (default: all) of PREVIOUS_SOURCE, extracted under `into` (git archive)."""
    archive = _git("archive", previous_commit(), *paths)
    if archive.returncode != 0:
        cannot_run(f"git archive {PREVIOUS_SOURCE}: {archive.stderr.decode()[-500:]}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into
