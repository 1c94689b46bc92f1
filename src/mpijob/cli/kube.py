"""Small helpers the CLI commands share: a client from a kubeconfig, MPIJob reads and patches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.executor.client import Client
from mpijob.executor.resources import collection_path, object_path
from mpijob.planner.children import worker_selector
from mpijob.runtime.operator import load_api_client


@asynccontextmanager
async def client(kubeconfig: str | None) -> AsyncIterator[Client]:
    api = await load_api_client(kubeconfig)
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


def default_namespace(explicit: str | None) -> str:
    return explicit or "default"
