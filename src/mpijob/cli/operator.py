"""`mpijob operator`, `mpijob install`, `mpijob crd`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from mpijob.api.constants import DEFAULT_TERMINATION_TAINTS
from mpijob.api.crd import crd, crd_yaml
from mpijob.api.models import MANAGED_BY_US
from mpijob.api.reference import api_reference
from mpijob.app.operator import OperatorOptions
from mpijob.app.operator import main as operator_main
from mpijob.cli.kube import check_kubeconfig, reach_api_server
from mpijob.cli.kube import client as cli_client
from mpijob.kube.client import ApiError
from mpijob.planner.snapshot import OperatorConfig


def _env_list(name: str) -> list[str]:
    return [v.strip() for v in os.environ.get(name, "").split(",") if v.strip()]


def _optional_float(value: str | None) -> float | None:
    return None if value is None or not value.strip() else float(value)


def _optional_int(value: str | None) -> int | None:
    return None if value is None or not value.strip() else int(value)


def _kube_api_flags(op: Any) -> None:
    """The client's budgets on the API server."""
    op.add_argument("--kube-api-qps", type=float, default=float(os.environ.get("MPIJOB_KUBE_API_QPS", "50")))
    op.add_argument("--kube-api-burst", type=int, default=int(os.environ.get("MPIJOB_KUBE_API_BURST", "100")))
    op.add_argument(
        "--kube-api-urgent-qps",
        type=float,
        default=_optional_float(os.environ.get("MPIJOB_KUBE_API_URGENT_QPS")),
        help="budget of the URGENT write class: the writes that take leaving workers out of discovery, which "
        "must not wait behind the others after a spot notice (default: 10x --kube-api-qps; env "
        "MPIJOB_KUBE_API_URGENT_QPS)",
    )
    op.add_argument(
        "--kube-api-urgent-burst",
        type=int,
        default=_optional_int(os.environ.get("MPIJOB_KUBE_API_URGENT_BURST")),
        help="burst of those writes (default: 10x --kube-api-burst; env MPIJOB_KUBE_API_URGENT_BURST)",
    )


def _runtime_flags(op: Any) -> None:
    """How the operator's own loop runs."""
    op.add_argument(
        "--resync-period",
        type=float,
        default=float(os.environ.get("MPIJOB_RESYNC_PERIOD", "300")),
        help="seconds between relists that drop objects deleted in a watch gap (jittered; waits out a burst)",
    )
    op.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default=os.environ.get("MPIJOB_EVENT_LOOP", "uvloop"),
        help="uvloop (default: less CPU per request) or the standard asyncio loop (env MPIJOB_EVENT_LOOP)",
    )


def _election_flags(op: Any) -> None:
    op.add_argument("--leader-elect", action="store_true", help="hold a Lease before reconciling")
    op.add_argument("--lock-namespace", default=os.environ.get("MPIJOB_LOCK_NAMESPACE", "mpijob-system"))
    op.add_argument(
        "--lease-name",
        default="mpijob-operator",
        help="the Lease of --leader-elect (the reference binary's command line uses the reference's, mpi-operator)",
    )


def register(subparsers: Any) -> None:
    op = subparsers.add_parser("operator", help="run the MPIJob controller in the foreground")
    op.add_argument("--kubeconfig", default=None, help="default: KUBECONFIG, ~/.kube/config, then in-cluster")
    op.add_argument("--master", default=None, help="the API server's URL, over the kubeconfig's (as the reference's)")
    op.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        default=_env_list("MPIJOB_NAMESPACES"),
        help="namespace to watch (repeatable; env MPIJOB_NAMESPACES, comma-separated); default: all",
    )
    op.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("MPIJOB_WORKERS", "16")),
        help="concurrent reconciles (different jobs); a reconcile mostly waits on the API server, and after a "
        "node taint every affected job needs its discovery write at once (env MPIJOB_WORKERS)",
    )
    _kube_api_flags(op)
    _runtime_flags(op)
    op.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("MPIJOB_LOG_FORMAT", "text"))
    op.add_argument("--log-level", default=os.environ.get("MPIJOB_LOG_LEVEL", "INFO"))
    op.add_argument("--cluster-domain", default=os.environ.get("MPIJOB_CLUSTER_DOMAIN", ""))
    op.add_argument(
        "--termination-taints",
        default=",".join(DEFAULT_TERMINATION_TAINTS),
        help="comma-separated taint keys that mark a node as going away",
    )
    op.add_argument("--no-cordon-signal", action="store_true", help="do not treat a cordoned node as terminating")
    op.add_argument(
        "--no-api-discovery",
        action="store_true",
        default=os.environ.get("MPIJOB_API_DISCOVERY", "true").lower() in ("false", "0", "no", "off"),
        help="elastic launchers read their host list from the projected file only: no per-job ServiceAccount, "
        "Role or RoleBinding (env MPIJOB_API_DISCOVERY=false)",
    )
    _election_flags(op)
    op.add_argument(
        "--gang-scheduling",
        default=os.environ.get("MPIJOB_GANG_SCHEDULING", ""),
        help="gang scheduler, as the reference's flag: 'volcano', or the schedulerName of a scheduler-plugins "
        "scheduler with coscheduling (e.g. scheduler-plugins-scheduler); default: off",
    )
    op.add_argument("--health-port", type=int, default=0, help="serve /healthz and /readyz on this port (0: off)")
    op.add_argument(
        "--metrics-port",
        "--monitoring-port",  # the reference operator's name for it
        dest="metrics_port",
        type=int,
        default=int(os.environ.get("MPIJOB_METRICS_PORT", "0")),
        help="serve Prometheus /metrics on this port (0: off)",
    )
    op.add_argument(
        "--controller-name",
        default=os.environ.get("MPIJOB_CONTROLLER_NAME", MANAGED_BY_US),
        help="the spec.runPolicy.managedBy value of jobs this operator runs (default: the reference operator's)",
    )
    op.add_argument(
        "--ignore-unmanaged",
        action="store_true",
        default=os.environ.get("MPIJOB_IGNORE_UNMANAGED", "") == "1",
        help="leave jobs without spec.runPolicy.managedBy to another operator (running beside the reference one)",
    )
    op.add_argument("--metrics-bind-address", default=os.environ.get("MPIJOB_METRICS_BIND_ADDRESS", "0.0.0.0"))
    op.set_defaults(func=_operator)

    inst = subparsers.add_parser("install", help="apply the MPIJob CRD to the current cluster")
    inst.add_argument("--kubeconfig", default=None)
    inst.set_defaults(func=_install)

    gen = subparsers.add_parser("crd", help="print the generated CRD YAML")
    gen.set_defaults(func=lambda args: (sys.stdout.write(crd_yaml()), 0)[1])

    ref = subparsers.add_parser("api-reference", help="print the API reference (Markdown) generated from the models")
    ref.set_defaults(func=lambda args: (sys.stdout.write(api_reference()), 0)[1])


def _operator(args: argparse.Namespace) -> int:
    # A mistake in the command line's kubeconfig or server is said now, in one line; once running, the operator
    # retries an API server that goes away, as the reference's informers do.
    check_kubeconfig(args.kubeconfig)
    asyncio.run(reach_api_server(args.kubeconfig, args.master))
    return operator_main(
        OperatorOptions(
            kubeconfig=args.kubeconfig,
            master=args.master,
            namespaces=list(dict.fromkeys(args.namespaces)),
            reconcilers=args.workers,  # the flag keeps its name; it counts reconciles, not pods
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            urgent_qps=args.kube_api_urgent_qps,
            urgent_burst=args.kube_api_urgent_burst,
            log_format=args.log_format,
            log_level=args.log_level.upper(),
            planner=OperatorConfig(
                cluster_domain=args.cluster_domain,
                termination_taints=tuple(t.strip() for t in args.termination_taints.split(",") if t.strip()),
                cordon_is_termination=not args.no_cordon_signal,
                api_discovery=not args.no_api_discovery,
                gang_scheduler=args.gang_scheduling.strip(),
                controller_name=args.controller_name,
                claim_unmanaged=not args.ignore_unmanaged,
            ),
            leader_elect=args.leader_elect,
            lock_namespace=args.lock_namespace,
            lease_name=args.lease_name,
            startup_notes=list(getattr(args, "startup_notes", [])),
            health_port=args.health_port,
            metrics_port=args.metrics_port,
            metrics_address=args.metrics_bind_address,
            resync_period=args.resync_period,
            event_loop=args.event_loop,
        )
    )


async def install_crd(kubeconfig: str | None) -> None:
    """Creates or replaces the CRD, then waits until the API server serves it."""
    async with cli_client(kubeconfig) as client:
        body = crd()
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        name = body["metadata"]["name"]
        try:
            current = await client.get(f"{path}/{name}")
        except ApiError as err:
            if err.status != 404:
                raise
            await client.create(path, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await client.request("PUT", f"{path}/{name}", body)
        for _ in range(300):
            current = await client.get(f"{path}/{name}")
            conds = {c["type"]: c["status"] for c in (current.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"CRD {name} not established after 30s")


def _install(args: argparse.Namespace) -> int:
    asyncio.run(install_crd(args.kubeconfig))
    print("installed customresourcedefinition mpijobs.kubeflow.org")
    return 0
