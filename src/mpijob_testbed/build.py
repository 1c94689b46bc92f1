"""Building the control-plane binaries with testbed/build.sh."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import BINARIES, ENV_BIN_DIR, repo_root


def missing_binaries(bin_dir: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]


def run_build(bin_dir: Path, *, echo: Callable[[str], None] = print) -> None:
    """Run testbed/build.sh (idempotent: a no-op when the binaries are current); its own progress lines
    go straight to this process's stdout/stderr."""
    root = repo_root()
    echo(f"[testbed] building control-plane binaries into {bin_dir} with testbed/build.sh")
    env = {**os.environ, ENV_BIN_DIR: str(bin_dir)}
    code = subprocess.call(["bash", str(root / "testbed" / "build.sh")], cwd=root, env=env)
    if code != 0:
        raise TestbedError(f"testbed/build.sh failed with exit code {code}")
    missing = missing_binaries(bin_dir)
    if missing:
        raise TestbedError(f"testbed/build.sh finished but {', '.join(missing)} is missing in {bin_dir}")


def ensure_binaries(bin_dir: Path, *, echo: Callable[[str], None] = print) -> None:
    missing = missing_binaries(bin_dir)
    if missing:
        echo(f"[testbed] missing in {bin_dir}: {', '.join(missing)}")
        run_build(bin_dir, echo=echo)
