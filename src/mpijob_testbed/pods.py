"""Ending fake pods: the testbed never completes a pod on its own (see `mpijob_testbed.stages`)."""

from __future__ import annotations

import os

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from mpijob_testbed.client import load_api_client
from mpijob_testbed.stages import COMPLETE_ANNOTATION


async def complete_pod(
    api_or_kubeconfig: ApiClient | str | os.PathLike[str], namespace: str, name: str, succeeded: bool
) -> None:
    """Make the running pod `namespace/name` finish: phase Succeeded with exit code 0 in every container,
    or Failed with exit code 1. It works by setting the annotation `testbed.mpijob.io/complete`, which a
    kwok stage turns into the status change within a second or so; this call does not wait for it.
    A pod that is still Pending finishes right after it starts running."""
    outcome = "Succeeded" if succeeded else "Failed"
    body = {"metadata": {"annotations": {COMPLETE_ANNOTATION: outcome}}}
    if isinstance(api_or_kubeconfig, ApiClient):
        await CoreV1Api(api_or_kubeconfig).patch_namespaced_pod(name, namespace, body)
        return
    api = await load_api_client(api_or_kubeconfig)
    async with api:
        await CoreV1Api(api).patch_namespaced_pod(name, namespace, body)
