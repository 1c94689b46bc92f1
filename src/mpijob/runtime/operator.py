"""Runs the operator: kopf watch streams and indexes, the reconcile workers, optional Lease leader election."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client as k8s_client

from mpijob.executor.client import ApiError, Client
from mpijob.executor.kubeconfig import load_api_client
from mpijob.planner import podgroups
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import resync
from mpijob.runtime.controller import Controller
from mpijob.runtime.metrics import InstrumentedController, InstrumentedExecutor, Metrics

log = logging.getLogger("mpijob.operator")


@dataclass
class OperatorOptions:
    kubeconfig: str | None = None
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    # Concurrent reconciles (the CLI's --workers): they mostly wait on the API server (docs/results.md).
    reconcilers: int = 16
    qps: float = 50.0
    burst: int = 100
    log_format: str = "text"
    log_level: str = "INFO"
    # What the planner decides with (cluster domain, termination signals, discovery, gang scheduler, managedBy).
    planner: OperatorConfig = field(default_factory=OperatorConfig)
    leader_elect: bool = False
    lock_namespace: str = "mpijob-system"
    health_port: int = 0
    metrics_port: int = 0  # 0: /metrics not served (metrics are still kept, for tests and benchmarks)
    metrics_address: str = "0.0.0.0"
    # Seconds between relists of the cached kinds (jittered); watch gaps close within this.
    resync_period: float = resync.PERIOD


class _NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a "diff base" (a deep copy of the body, then two more copies) on every watch event, for
    change-detecting handlers (on.create/update) that this operator does not have: skip that work."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf narrates every watch event at INFO; our own log says what matters.
    logging.getLogger("kopf").setLevel(logging.WARNING)


async def _connection_info(api: k8s_client.ApiClient) -> kopf.ConnectionInfo:
    cfg = api.configuration
    token = None
    # Through the refresh hook, so kopf gets a current token (in-cluster tokens rotate).
    maybe: Any = cfg.get_api_key_with_prefix("BearerToken")
    header = await maybe if inspect.isawaitable(maybe) else maybe
    if header:
        token = str(header).split(" ", 1)[-1]
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        token=token,
        scheme="Bearer" if token else None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


async def run(
    options: OperatorOptions,
    *,
    stop: asyncio.Event | None = None,
    started: Callable[[Controller], None] | None = None,
) -> Controller:
    api = await load_api_client(options.kubeconfig)
    client = Client(api, qps=options.qps, burst=options.burst)
    config = options.planner
    if config.gang_scheduler:
        await _check_pod_group_crd(client, config.gang_scheduler)
    metrics = Metrics()
    client.on_response = metrics.api_response
    executor = InstrumentedExecutor(client, metrics=metrics, config=config)
    controller = InstrumentedController(
        executor,
        config,
        reconcilers=options.reconcilers,
        # The API server's clock, so that grace periods mean the same to every leader (issue 8, rule 11).
        clock=client.clock.now,
        metrics=metrics,
    )
    executor.cache = controller.cache
    metrics.attach(controller)
    try:
        await client.get("/version")  # learns the API server's clock before the first plan
    except Exception as err:
        log.warning("could not read the API server's clock yet: %s", err)
    registry = kopf.OperatorRegistry()
    controller.register(registry)
    metrics.register(registry, config)
    if options.metrics_port:
        metrics.serve(options.metrics_port, options.metrics_address)
    if started is not None:
        started(controller)

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await _connection_info(api)

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # we post our own Events, on the MPIJob, only for decisions
    settings.watching.server_timeout = 300
    settings.persistence.diffbase_storage = _NoDiffBase()
    stop = stop or asyncio.Event()
    liveness = f"http://0.0.0.0:{options.health_port}/healthz" if options.health_port else None
    kopf_task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=not options.namespaces,
            namespaces=options.namespaces,
            liveness_endpoint=liveness,
            stop_flag=stop,
        )
    )
    if options.leader_elect:
        election = asyncio.create_task(_lead(api, options, controller))

        def election_ended(task: asyncio.Task[None]) -> None:
            # Leader election must never end quietly (e.g. no RBAC for Leases): stop the whole operator.
            if not task.cancelled():
                log.error("leader election ended: %r; stopping", task.exception())
                stop.set()

        election.add_done_callback(election_ended)
    else:
        controller.leading.set()
        election = None
    reconcilers = asyncio.create_task(controller.run_reconcilers())
    relist = asyncio.create_task(_resync(controller, executor.client, options))
    log.info(
        "operator started: namespaces=%s reconcilers=%d qps=%s burst=%d",
        options.namespaces or "all",
        options.reconcilers,
        options.qps,
        options.burst,
    )
    try:
        await kopf_task
    finally:
        reconcilers.cancel()
        relist.cancel()
        if election is not None:
            election.cancel()
        await asyncio.gather(reconcilers, relist, *([election] if election else []), return_exceptions=True)
        controller.queue.shutdown()
        await api.close()
    return controller


async def _check_pod_group_crd(kube: Client, gang_scheduler: str) -> None:
    """With gang scheduling on, the PodGroup kind must be served: otherwise the cache would never fill and
    no job would be reconciled. Say so and stop, rather than run without the gangs the flag asked for."""
    version = podgroups.api_version(gang_scheduler)
    try:
        found = await kube.get(f"/apis/{version}")
    except ApiError as err:
        if err.status != 404:
            raise
        found = {}
    if not any(r.get("name") == "podgroups" for r in found.get("resources") or []):
        raise SystemExit(
            f"--gang-scheduling={gang_scheduler}: the API server does not serve {version} podgroups; "
            "install the gang scheduler's PodGroup CRD (see docs/scheduling.md) or drop the flag"
        )


async def _resync(controller: Controller, client: Client, options: OperatorOptions) -> None:
    """Closes watch gaps: a periodic relist drops cached objects the API server no longer has."""
    await controller.warm.wait()
    await resync.resync_forever(
        client, controller.cache, controller.forget_ghost, options.namespaces, period=options.resync_period
    )


# What an unreachable API server raises (kubernetes_asyncio only turns HTTP answers into ApiException).
_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def sturdy_lease_lock(name: str, namespace: str, identity: str, api: k8s_client.ApiClient) -> Any:
    """kubernetes_asyncio's LeaseLock, except that a network error is a failed attempt, as an HTTP error is:
    the library lets it escape and ends the election, so a kube-apiserver restart stopped every operator
    (found by the chaos run). Now a follower keeps trying, and a leader loses the Lease only once its renew
    deadline passes without a renewal, as in client-go."""
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

    class SturdyLeaseLock(LeaseLock):
        async def get(self, name: str, namespace: str) -> Any:
            try:
                return await super().get(name, namespace)
            except _NETWORK_ERRORS as err:
                log.warning("leader election: API server unreachable: %s", err)
                failed = ApiException(status=503, reason="unreachable")
                failed.body = json.dumps({"code": 503}).encode()
                return False, failed

        async def create(self, name: str, namespace: str, election_record: Any) -> bool:
            try:
                return bool(await super().create(name, namespace, election_record))
            except _NETWORK_ERRORS:
                return False

        async def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            try:
                return bool(await super().update(name, namespace, updated_record))
            except _NETWORK_ERRORS:
                return False

    return SturdyLeaseLock(name, namespace, identity, api)


async def _lead(api: k8s_client.ApiClient, options: OperatorOptions, controller: Controller) -> None:
    """Reconcile only while holding the Lease; standbys keep warm caches. Losing the lease is fatal."""
    from kubernetes_asyncio.leaderelection import electionconfig, leaderelection

    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    lock = sturdy_lease_lock("mpijob-operator", options.lock_namespace, identity, api)

    async def started() -> None:
        log.info("leading as %s", identity)
        controller.leading.set()

    async def stopped() -> None:
        log.error("lost the lease; exiting so a fresh process starts clean")
        controller.leading.clear()  # no write after this point
        os.kill(os.getpid(), signal.SIGTERM)

    config = electionconfig.Config(lock, 15, 10, 2, started, stopped)
    await leaderelection.LeaderElection(config).run()


def main(options: OperatorOptions) -> int:
    configure_logging(options.log_format, options.log_level)
    stop = asyncio.Event()

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def started(controller: Controller) -> None:
            # SIGUSR1 prints the counters in one line (bench/compare.py reads them; handy when debugging).
            loop.add_signal_handler(signal.SIGUSR1, lambda: log.warning("stats: %s", controller.stats_line()))

        await run(options, stop=stop, started=started)

    asyncio.run(runner())
    return 0
