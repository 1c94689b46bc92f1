"""Small helpers the CLI commands share: a client from a kubeconfig, MPIJob reads and patches."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.executor.client import ApiError, Client
from mpijob.executor.kubeconfig import context_names, kubeconfig_files, load_api_client, merged_kubeconfig
from mpijob.executor.resources import collection_path, object_path
from mpijob.planner.children import worker_selector

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def resolve_namespace(kubeconfig: str | None, context: str | None, explicit: str | None) -> str:
    """-n, else the namespace of the (current or --context) context, else in-cluster's, else `default`."""
    if explicit:
        return explicit
    files = kubeconfig_files(kubeconfig)
    if files:
        merged = merged_kubeconfig(files)
        name = context or merged["current-context"]
        ns = (merged["contexts"].get(name) or {}).get("namespace")
        return str(ns) if ns else "default"
    if IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    return "default"


async def load_cli_api_client(kubeconfig: str | None, context: str | None) -> k8s_client.ApiClient:
    """The one loader, after the checks kubectl makes: a named file exists, a named context is there."""
    missing = [str(f) for f in kubeconfig_files(kubeconfig) if not f.exists()]
    if kubeconfig and missing:
        raise ValueError(f"kubeconfig {kubeconfig}: no such file")
    if context is not None and kubeconfig_files(kubeconfig) and context not in context_names(kubeconfig):
        raise ValueError(f'context "{context}" does not exist')
    return await load_api_client(kubeconfig, context)


@asynccontextmanager
async def client(kubeconfig: str | None, context: str | None = None) -> AsyncIterator[Client]:
    api = await load_cli_api_client(kubeconfig, context)
    try:
        yield Client(api, qps=0, burst=1)
    finally:
        await api.close()


def job_path(namespace: str, name: str, subresource: str | None = None) -> str:
    return object_path(API_VERSION, "MPIJob", namespace, name, subresource)


async def worker_pods(kube: Client, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = worker_selector(job)
    result = await kube.request("GET", collection_path("v1", "Pod", namespace), query=[("labelSelector", selector)])
    pods: list[dict[str, Any]] = result.get("items") or []
    return sorted(pods, key=lambda p: (c.worker_index(job, p["metadata"]["name"]) or 0, p["metadata"]["name"]))


def error_line(err: BaseException) -> str:
    """What kubectl would print: the API's own message when there is one, one line, no traceback."""
    if isinstance(err, ApiError):
        try:
            message = json.loads(err.body).get("message")
        except (ValueError, AttributeError):
            message = None
        return f"error: {message or f'{err.status} {err.reason}'}"
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"error: {text}"


def run_command(coro: Coroutine[Any, Any, int]) -> int:
    """Runs a CLI command; API refusals, unreachable servers and bad kubeconfigs are one line on stderr."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130
    except (ApiError, OSError, ValueError, aiohttp.ClientError, k8s_config.ConfigException) as err:
        print(error_line(err), file=sys.stderr)
        return 1
