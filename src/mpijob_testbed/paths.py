"""Where the testbed keeps things: the repository, the binaries and the state directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mpijob_testbed.errors import TestbedError

ENV_STATE_DIR = "MPIJOB_TESTBED_DIR"
ENV_BIN_DIR = "MPIJOB_TESTBED_BIN"

# Every binary testbed/build.sh produces; `up` builds when any is missing.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")

# A file `up` writes into every state directory it owns; `down` refuses to delete a directory without it,
# so a mistyped --dir can never remove somebody else's files.
MARKER_NAME = ".mpijob-testbed"


def _is_repo_root(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() and (path / "testbed" / "build.sh").is_file()


def find_repo_root() -> Path | None:
    """The checkout holding testbed/build.sh: searched upwards from this file (editable install), then cwd."""
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for candidate in (start, *start.parents):
            if _is_repo_root(candidate):
                return candidate
    return None


def repo_root() -> Path:
    root = find_repo_root()
    if root is None:
        raise TestbedError(
            "cannot find the mpijob checkout (a directory with pyproject.toml and testbed/build.sh) "
            f"above the package or the current directory; run from the checkout or set {ENV_STATE_DIR} "
            f"and {ENV_BIN_DIR}"
        )
    return root


def default_state_dir() -> Path:
    env = os.environ.get(ENV_STATE_DIR)
    return Path(env).expanduser().absolute() if env else repo_root() / ".testbed"


def default_bin_dir() -> Path:
    env = os.environ.get(ENV_BIN_DIR)
    return Path(env).expanduser().absolute() if env else repo_root() / ".cache" / "testbed" / "bin"


def resolve_state_dir(state_dir: str | os.PathLike[str] | None) -> Path:
    return Path(state_dir).expanduser().absolute() if state_dir is not None else default_state_dir()


def resolve_bin_dir(bin_dir: str | os.PathLike[str] | None) -> Path:
    return Path(bin_dir).expanduser().absolute() if bin_dir is not None else default_bin_dir()


@dataclass(frozen=True)
class Layout:
    """File names inside one testbed's state directory (logs and pid files sit at the top for easy tailing)."""

    root: Path

    @property
    def marker(self) -> Path:
        return self.root / MARKER_NAME

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd-data"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    @property
    def kwok_home(self) -> Path:
        # kwok also loads ~/.kwok/kwok.yaml when it exists; a private HOME keeps a user's file out.
        return self.root / "kwok-home"

    def log(self, component: str) -> Path:
        return self.root / f"{component}.log"

    def pid(self, component: str) -> Path:
        return self.root / f"{component}.pid"

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / "kubeconfigs" / f"{component}.kubeconfig"
