"""kubernetes_asyncio clients for the testbed (or any cluster, given its kubeconfig)."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio.client import ApiClient

from mpijob.kube.kubeconfig import load_api_client as operator_loader
from mpijob_testbed.paths import Layout, resolve_state_dir


def kubeconfig_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where `up` writes the admin kubeconfig of the testbed at `state_dir` (default: the usual one)."""
    return Layout(resolve_state_dir(state_dir)).kubeconfig


async def load_api_client(kubeconfig: str | os.PathLike[str] | None = None) -> ApiClient:
    """An ApiClient for `kubeconfig` (default: the testbed's). The caller closes it (`await api.close()`
    or `async with`)."""
    return await operator_loader(kubeconfig if kubeconfig is not None else kubeconfig_path())
