"""Small helpers the CLI commands share: a client from a kubeconfig, MPIJob reads and patches, and kubectl's
habits (the namespace of `-n` or the context, `-o json|yaml`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s_client

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.cli.errors import EXIT_NO_CLUSTER, CommandError, KubeconfigError
from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import context_names, kubeconfig_files, load_api_client, merged_kubeconfig
from mpijob.kube.resources import collection_path, object_path
from mpijob.planner.children import worker_selector

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def resolve_namespace(kubeconfig: str | None, context: str | None, explicit: str | None) -> str:
    """-n, else the namespace of the (current or --context) context, else in-cluster's, else `default`."""
    if explicit:
        return explicit
    files = check_kubeconfig(kubeconfig)
    if files:
        merged = merged_kubeconfig(files)
        name = context or merged["current-context"]
        ns = (merged["contexts"].get(name) or {}).get("namespace")
        return str(ns) if ns else "default"
    if IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    return "default"


def namespace_arg(args: argparse.Namespace) -> str:
    """The namespace a command's -n/--kubeconfig/--context arguments name (`resolve_namespace`)."""
    return resolve_namespace(args.kubeconfig, args.context, args.namespace)


def print_document(obj: Any, output: str) -> None:
    """`-o json` or `-o yaml` output, as kubectl prints it."""
    if output == "json":
        print(json.dumps(obj, indent=2))
    else:
        print(yaml.safe_dump(obj, sort_keys=False), end="")


def check_kubeconfig(kubeconfig: str | None) -> list[Path]:
    """The kubeconfig files kubectl would read, each checked to be there (when named) and a kubeconfig, so that
    a mistake names its file (the client library's own errors do not)."""
    files = kubeconfig_files(kubeconfig)
    found: list[Any] = []
    for path in files:
        if not path.exists():
            if kubeconfig:  # files missing from KUBECONFIG are skipped, as kubectl does
                raise KubeconfigError(f"kubeconfig {path}: no such file")
            continue
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as err:
            raise KubeconfigError(f"kubeconfig {path}: cannot read it: {err.strerror or err}") from err
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise KubeconfigError(f"kubeconfig {path}: not valid YAML{where}") from err
        if doc is not None and not isinstance(doc, dict):
            raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (a mapping of clusters, contexts and users)")
        found.append(doc)
    if found and not any(found):  # the client library fails on an empty file with a TypeError
        raise KubeconfigError(f"kubeconfig {os.pathsep.join(str(f) for f in files)}: empty")
    return files


async def load_cli_api_client(kubeconfig: str | None, context: str | None) -> k8s_client.ApiClient:
    """The one loader, after the checks kubectl makes: a named file exists, a named context is there."""
    files = check_kubeconfig(kubeconfig)
    if context is not None and files and context not in context_names(kubeconfig):
        where = " or ".join(str(f) for f in files)
        raise KubeconfigError(f'context "{context}" does not exist in kubeconfig {where}')
    return await load_api_client(kubeconfig, context)


async def reach_api_server(kubeconfig: str | None, master: str | None = None, within: float = 30.0) -> None:
    """One request before a long-running command starts, so that an API server that is not there is reported
    at once instead of retried forever; any HTTP answer, even a refusal, means one is there."""
    api = await load_api_client(kubeconfig, master=master)
    server = api.configuration.host
    try:
        await asyncio.wait_for(Client(api, qps=0, burst=1).get("/version"), within)
    except ApiError:
        pass
    except aiohttp.ClientConnectorError as err:
        reason = err.os_error.strerror or str(err.os_error)
        raise CommandError(f"cannot reach the API server at {server}: {reason}", EXIT_NO_CLUSTER) from err
    except (aiohttp.ClientConnectionError, TimeoutError) as err:
        raise CommandError(f"no answer from the API server at {server} within {within:.0f}s", EXIT_NO_CLUSTER) from err
    finally:
        await api.close()


@asynccontextmanager
async def client(kubeconfig: str | None, context: str | None = None) -> AsyncIterator[Client]:
    api = await load_cli_api_client(kubeconfig, context)
    try:
        yield Client(api, qps=0, burst=1)
    finally:
        await api.close()


def job_path(namespace: str, name: str, subresource: str | None = None) -> str:
    return object_path(API_VERSION, "MPIJob", namespace, name, subresource)


def missing_job(err: ApiError, namespace: str, name: str) -> CommandError:
    """A 404 on the job's path: the job is not there, or (no object named in the answer) MPIJobs are not served."""
    try:
        details = json.loads(err.body).get("details") or {}
    except (ValueError, AttributeError):
        details = {}
    if details.get("name") == name:
        return CommandError(f"MPIJob {namespace}/{name} not found")
    return CommandError(f"the API server does not serve MPIJobs ({API_VERSION}); install the CRD: `mpijob install`")


async def get_job(kube: Client, namespace: str, name: str) -> dict[str, Any]:
    try:
        job: dict[str, Any] = await kube.get(job_path(namespace, name))
    except ApiError as err:
        if err.status == 404:
            raise missing_job(err, namespace, name) from err
        raise
    return job


async def worker_pods(kube: Client, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = worker_selector(job)
    result = await kube.request("GET", collection_path("v1", "Pod", namespace), query=[("labelSelector", selector)])
    pods: list[dict[str, Any]] = result.get("items") or []
    return sorted(pods, key=lambda p: (c.worker_index(job, p["metadata"]["name"]) or 0, p["metadata"]["name"]))


def run_command(coro: Coroutine[Any, Any, int]) -> int:
    """Runs a CLI command; its errors are the program's to report (cli/errors.py, run_program)."""
    return asyncio.run(coro)
