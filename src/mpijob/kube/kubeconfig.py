"""The one way this project turns a kubeconfig (or the pod's in-cluster identity) into an API client: the
operator, the CLI, the kubectl plugin, the testbed, tests and benchmarks all call `load_api_client`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

DEFAULT_KUBECONFIG = Path("~/.kube/config")


def kubeconfig_files(explicit: str | os.PathLike[str] | None) -> list[Path]:
    """kubectl's order: --kubeconfig, else every file in KUBECONFIG, else ~/.kube/config."""
    if explicit:
        return [Path(explicit)]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    default = DEFAULT_KUBECONFIG.expanduser()
    return [default] if default.exists() else []


def merged_kubeconfig(files: list[Path]) -> dict[str, Any]:
    """kubectl's merge of the current context and the contexts: the first file to set one wins."""
    merged: dict[str, Any] = {"current-context": None, "contexts": {}}
    for path in files:
        if not path.exists():
            continue
        doc = yaml.safe_load(path.read_text()) or {}
        merged["current-context"] = merged["current-context"] or doc.get("current-context")
        for entry in doc.get("contexts") or []:
            merged["contexts"].setdefault(entry.get("name"), entry.get("context") or {})
    return merged


def context_names(kubeconfig: str | os.PathLike[str] | None) -> list[str]:
    return [str(n) for n in merged_kubeconfig(kubeconfig_files(kubeconfig))["contexts"]]


def _no_env_lookups_per_request(api: k8s_client.ApiClient) -> None:
    """kubernetes_asyncio's aiohttp session trusts the environment, so every request looks up proxy
    variables and reads ~/.netrc. Read the environment once instead: with no proxy or netrc configured
    there is nothing to find, and the per-request lookups were a measurable share of the operator's CPU."""
    names = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy", "netrc")
    if any(os.environ.get(n) or os.environ.get(n.upper()) for n in names) or Path("~/.netrc").expanduser().exists():
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


async def load_api_client(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None, master: str | None = None
) -> k8s_client.ApiClient:
    """kubectl's resolution: the explicit file, else KUBECONFIG / ~/.kube/config, else in-cluster; `context`
    picks a context other than the current one; `master` replaces the server's URL (client-go's
    BuildConfigFromFlags). The caller closes the client (`await api.close()`)."""
    explicit = str(kubeconfig) if kubeconfig is not None else None
    cfg = k8s_client.Configuration()
    if context is not None:
        files = kubeconfig_files(explicit)
        if not files:
            raise ValueError(f"--context {context}: no kubeconfig (set --kubeconfig or KUBECONFIG)")
        # kubernetes_asyncio reads one file; with several in KUBECONFIG, the context's own file is the one.
        source = next(
            (
                f
                for f in files
                if f.exists()
                and context in [c.get("name") for c in (yaml.safe_load(f.read_text()) or {}).get("contexts") or []]
            ),
            files[0],
        )
        await k8s_config.load_kube_config(config_file=str(source), context=context, client_configuration=cfg)
    elif explicit or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG.expanduser().exists():  # noqa: ASYNC240
        await k8s_config.load_kube_config(config_file=explicit, client_configuration=cfg)
    else:
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    if master:
        cfg.host = master.rstrip("/")
    api = k8s_client.ApiClient(configuration=cfg)
    _no_env_lookups_per_request(api)
    return api
