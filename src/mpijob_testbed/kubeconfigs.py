"""Kubeconfig files: a self-contained one for people and tools, file-referencing ones for the components."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT_NAME = "mpijob-testbed"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def kubeconfig_dict(server: str, *, ca: Path, cert: Path, key: Path, user: str, embed: bool) -> dict[str, Any]:
    """A single-context kubeconfig; `embed` inlines the PEM data so the file can be copied elsewhere."""
    if embed:
        cluster: dict[str, Any] = {"server": server, "certificate-authority-data": _b64(ca)}
        credentials: dict[str, Any] = {
            "client-certificate-data": _b64(cert),
            "client-key-data": _b64(key),
        }
    else:
        cluster = {"server": server, "certificate-authority": str(ca)}
        credentials = {"client-certificate": str(cert), "client-key": str(key)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": user}}],
        "current-context": CONTEXT_NAME,
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # It carries a private key (inline or by path); keep it owner-only like the keys themselves.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
