"""`mpijob scale-in`, `mpijob scale`, `mpijob status`: elastic operations as single API writes."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from mpijob.api import constants as c
from mpijob.api.objects import FINISHED_PHASES, is_leaving, pod_phase
from mpijob.cli import history
from mpijob.cli.errors import CommandError
from mpijob.cli.kube import (
    client,
    get_job,
    job_path,
    missing_job,
    namespace_arg,
    print_document,
    run_command,
    worker_pods,
)
from mpijob.kube.client import ApiError, Client
from mpijob.kube.resources import object_path
from mpijob.planner.discovery import listed_lines
from mpijob.planner.hostfile import parse_discovery_output
from mpijob.planner.snapshot import controller_uid


def _common(parser: argparse.ArgumentParser) -> None:
    """kubectl's habits: -n (else the context's namespace), --context, --kubeconfig, -o."""
    parser.add_argument("job")
    parser.add_argument("-n", "--namespace", default=None, help="default: the namespace of the current context")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--context", default=None, help="kubeconfig context to use")
    parser.add_argument("-o", "--output", choices=("json", "yaml", "wide"), default=None)


def register(subparsers: Any) -> None:
    si = subparsers.add_parser("scale-in", help="remove named workers (or those on a node) and lower replicas")
    _common(si)
    group = si.add_mutually_exclusive_group(required=True)
    group.add_argument("--workers", help="comma-separated worker pod names")
    group.add_argument("--node", help="remove this job's workers on NODE")
    si.add_argument("--replace", action="store_true", help="keep replicas (drain and replace)")
    si.add_argument("--wait", action="store_true", help="show progress until the removed workers are gone")
    si.add_argument("--timeout", type=float, default=600.0, help="with --wait: give up after this many seconds")
    si.set_defaults(func=lambda a: run_command(_scale_in(a)))

    sc = subparsers.add_parser("scale", help="set Worker replicas through the scale subresource")
    _common(sc)
    sc.add_argument("--replicas", type=int, required=True)
    sc.set_defaults(func=lambda a: run_command(_scale(a)))

    stt = subparsers.add_parser("status", help="workers (index, node, phase, leaving) and the discovery list")
    _common(stt)
    stt.set_defaults(func=lambda a: run_command(_status(a)))

    history.register(subparsers, _common)


async def scale_in(
    kube: Client, namespace: str, job: str, workers: list[str] | None, node: str | None, replace: bool
) -> tuple[int, int, list[str]]:
    """One optimistic-concurrency patch: names appended to workersToDelete, replicas lowered by as many.

    Returns (old replicas, new replicas, names added). Retries on a concurrent change.
    """
    for _ in range(5):
        obj = await get_job(kube, namespace, job)
        spec = obj["spec"]
        elastic = spec.get("elasticPolicy")
        if elastic is None:
            raise CommandError(f"MPIJob {namespace}/{job} has no spec.elasticPolicy; targeted scale-in needs one")
        # Only serving workers of this very job count: lowering replicas for a typo, a pod that is already
        # leaving or a pod of someone else would make the operator remove some other, healthy worker.
        serving = {
            p["metadata"]["name"]: p
            for p in await worker_pods(kube, namespace, job)
            if controller_uid(p) == obj["metadata"]["uid"]
            and not p["metadata"].get("deletionTimestamp")
            and not is_leaving(p)
            and pod_phase(p) not in FINISHED_PHASES
        }
        if node is not None:
            workers = [n for n, p in serving.items() if (p.get("spec") or {}).get("nodeName") == node]
            if not workers:
                raise CommandError(f"no serving worker of {namespace}/{job} runs on node {node}")
        assert workers is not None
        unknown = [w for w in workers if w not in serving]
        if unknown:
            raise CommandError(
                f"not serving workers of {namespace}/{job} (no such pod, not this job's, or already leaving): "
                + ", ".join(unknown)
            )
        listed = list(elastic.get("workersToDelete") or [])
        added = [w for w in dict.fromkeys(workers) if w not in listed]
        replicas = int(spec["mpiReplicaSpecs"]["Worker"]["replicas"])
        # A Kueue-managed job keeps its admitted Worker count: a lower one makes Kueue suspend the job.
        kueue = bool((obj["metadata"].get("labels") or {}).get(c.LABEL_KUEUE_QUEUE_NAME))
        if kueue and not replace:
            print(
                f"MPIJob {namespace}/{job} is managed by Kueue: keeping Worker replicas at {replicas} "
                "(the workers are replaced; a lower count would make Kueue suspend the job)",
                file=sys.stderr,
            )
        new = replicas if replace or kueue else replicas - len(added)
        floor = int(elastic.get("minReplicas", 1))
        if new < floor:
            raise CommandError(
                f"removing {len(added)} workers would take replicas to {new}, below minReplicas {floor}; "
                "use --replace to drain and replace instead"
            )
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {
                "mpiReplicaSpecs": {"Worker": {"replicas": new}},
                "elasticPolicy": {"workersToDelete": listed + added},
            },
        }
        try:
            await kube.merge_patch(job_path(namespace, job), patch)
        except ApiError as err:
            if err.status == 409:
                continue
            raise
        return replicas, new, added
    raise CommandError("the MPIJob kept changing; try again")


async def _scale_in(args: argparse.Namespace) -> int:
    workers = [w.strip() for w in args.workers.split(",") if w.strip()] if args.workers else None
    ns = namespace_arg(args)
    async with client(args.kubeconfig, args.context) as kube:
        old, new, added = await scale_in(kube, ns, args.job, workers, args.node, args.replace)
        if args.output in ("json", "yaml"):
            print_document(
                {"namespace": ns, "job": args.job, "replicas": {"old": old, "new": new}, "workersToDelete": added},
                args.output,
            )
        else:
            print(f"mpijob {ns}/{args.job}: workersToDelete += {', '.join(added) or '(none)'}; replicas {old} -> {new}")
        if args.wait:
            return await wait_gone(kube, ns, args.job, added, args.timeout)
    return 0


async def wait_gone(kube: Client, namespace: str, job: str, victims: list[str], within: float) -> int:
    """Prints each victim's progress (serving -> leaving -> terminating -> gone) until all are gone."""
    started = time.monotonic()
    last: dict[str, str] = {}
    while True:
        pods = {p["metadata"]["name"]: p for p in await worker_pods(kube, namespace, job)}
        for name in victims:
            pod = pods.get(name)
            if pod is None:
                state = "gone"
            elif pod["metadata"].get("deletionTimestamp"):
                state = "terminating"
            elif is_leaving(pod):
                since = pod["metadata"]["annotations"][c.ANNOTATION_LEAVING_SINCE]
                state = f"left discovery at {since}; pod deleted after the grace period"
            else:
                state = "still serving"
            if last.get(name) != state:
                print(f"[{time.monotonic() - started:6.1f}s] {name}: {state}", flush=True)
                last[name] = state
        if all(v == "gone" for v in last.values()):
            print(f"all {len(victims)} workers gone")
            return 0
        if time.monotonic() - started > within:
            left = ", ".join(n for n, v in last.items() if v != "gone")
            print(
                f"error: timed out after {within:.0f}s; still there: {left}",
                file=sys.stderr,
            )
            return 1
        await asyncio.sleep(0.5)


async def _scale(args: argparse.Namespace) -> int:
    ns = namespace_arg(args)
    async with client(args.kubeconfig, args.context) as kube:
        try:
            result = await kube.merge_patch(job_path(ns, args.job, "scale"), {"spec": {"replicas": args.replicas}})
        except ApiError as err:
            if err.status == 404:
                raise missing_job(err, ns, args.job) from err
            raise
    if args.output in ("json", "yaml"):
        print_document(result, args.output)
    else:
        print(f"mpijob {ns}/{args.job} scaled to {args.replicas} workers")
    return 0


def discovery_from_config_map(config_map: dict[str, Any]) -> list[tuple[str, int]]:
    """The discovery list as the API holds it (what the launcher's discover_hosts.sh prints from the API)."""
    return parse_discovery_output("\n".join(listed_lines(config_map.get("data") or {}) or []))


def worker_rows(pods: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    rows = []
    for pod in pods:
        meta = pod["metadata"]
        status = pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        rows.append(
            {
                "name": meta["name"],
                "index": c.worker_index(job, meta["name"]),
                "phase": "Terminating" if meta.get("deletionTimestamp") else str(status.get("phase") or "Pending"),
                "node": (pod.get("spec") or {}).get("nodeName"),
                "leavingSince": annotations.get(c.ANNOTATION_LEAVING_SINCE),
                "leavingReason": annotations.get(c.ANNOTATION_LEAVING_REASON),
                "podIP": status.get("podIP"),
                "uid": meta.get("uid"),
            }
        )
    return rows


def pod_table(pods: list[dict[str, Any]], job: str, wide: bool = False) -> str:
    rows = [("NAME", "INDEX", "STATUS", "NODE", "LEAVING") + (("REASON", "IP") if wide else ())]
    for w in worker_rows(pods, job):
        row = (
            w["name"],
            "-" if w["index"] is None else str(w["index"]),
            w["phase"],
            str(w["node"] or "<none>"),
            f"since {w['leavingSince']}" if w["leavingSince"] else "no",
        )
        rows.append(row + ((str(w["leavingReason"] or "-"), str(w["podIP"] or "<none>")) if wide else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


async def _status(args: argparse.Namespace) -> int:
    ns = namespace_arg(args)
    async with client(args.kubeconfig, args.context) as kube:
        obj = await get_job(kube, ns, args.job)
        pods = await worker_pods(kube, ns, args.job)
        try:
            cm = await kube.get(object_path("v1", "ConfigMap", ns, c.config_map_name(args.job)))
        except ApiError:
            cm = {}
    status = obj.get("status") or {}
    spec = obj["spec"]
    replicas = spec["mpiReplicaSpecs"].get("Worker", {}).get("replicas")
    elastic = spec.get("elasticPolicy") or {}
    if args.output in ("json", "yaml"):
        doc = {
            "namespace": ns,
            "name": args.job,
            "state": status.get("state"),
            "replicas": replicas,
            "elasticPolicy": elastic or None,
            "workers": worker_rows(pods, args.job),
            "discovery": [f"{h}:{s}" for h, s in discovery_from_config_map(cm)],
            "conditions": status.get("conditions") or [],
        }
        print_document(doc, args.output)
        return 0
    print(f"MPIJob {ns}/{args.job}: state={status.get('state') or '-'} replicas={replicas}")
    if elastic:
        print(
            f"elastic: min={elastic.get('minReplicas')} max={elastic.get('maxReplicas', '-')} "
            f"workersToDelete={elastic.get('workersToDelete') or []}"
        )
    print(pod_table(pods, args.job, wide=args.output == "wide"))
    print("discovery (discover_hosts.sh):")
    for host, slots in discovery_from_config_map(cm):
        print(f"  {host}:{slots}")
    return 0
