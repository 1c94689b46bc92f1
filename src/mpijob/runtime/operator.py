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
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
import orjson
from kubernetes_asyncio import client as k8s_client

from mpijob.executor.client import ApiError, Client
from mpijob.executor.kubeconfig import load_api_client
from mpijob.planner import podgroups
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import resync
from mpijob.runtime.controller import Controller
from mpijob.runtime.metrics import InstrumentedController, InstrumentedExecutor, Metrics
from mpijob.runtime.served import wait_until_served

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


class _NoProgress(kopf.ProgressStorage):
    """kopf keeps handler progress (annotations or status fields) for change-detecting handlers and daemons,
    which this operator does not have, and cleans every event's body of it before comparing: 1.5% of the
    operator's CPU at 50 x 8 for nothing. Storing nothing also makes sure kopf never writes progress."""

    def fetch(self, *, key: Any, body: Any) -> None:
        return None

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        return None

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        return None

    def touch(self, *, body: Any, patch: Any, value: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


def _loads(data: str | bytes) -> Any:
    """orjson, with the standard library's decoder for what orjson refuses (e.g. a lone surrogate escape,
    which the standard library accepts). Integers are exact up to 64 bits (every Kubernetes number is an
    int32 or int64); beyond that orjson returns a float, which no field the operator reads can hold."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _fast_watch_decoding() -> None:
    """kopf decodes every watch event with the standard library's `json.loads` (kopf/_cogs/clients/api.py,
    module attribute `json`): 8% of the operator's CPU at 50 x 8. orjson decodes the same text ~2x faster.
    kopf offers no setting for the decoder, so its module's `json` is swapped for a copy of the standard
    module whose `loads` is `_loads`; if kopf's layout ever changes, nothing is swapped (same results,
    slower)."""
    from kopf._cogs.clients import api as kopf_api

    if getattr(kopf_api, "json", None) is json:
        fast = types.ModuleType("json")
        fast.__dict__.update(json.__dict__)
        fast.loads = _loads  # type: ignore[attr-defined]
        kopf_api.json = fast  # type: ignore[attr-defined]


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
    if logging.getLevelName(level) == logging.DEBUG:
        # Except, at DEBUG, when each watch stream starts, restarts (410), goes quiet or ends: one line each,
        # which is what a stalled cache needs to be explained (docs/reliability.md, the fault round's stall).
        logging.getLogger("kopf._cogs.clients.watching").setLevel(logging.DEBUG)


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
    # kopf reads discovery once at start: make sure it sees every kind we cache (runtime/served.py); the
    # relist's list of kinds is that list.
    watched = [kind.resource for kind in resync.KINDS]
    if config.gang_scheduler:
        group, version = podgroups.api_version(config.gang_scheduler).split("/")
        watched.append((group, version, "podgroups"))
    await wait_until_served(client, watched)
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

    _fast_watch_decoding()
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # we post our own Events, on the MPIJob, only for decisions
    settings.watching.server_timeout = 300
    # kopf's default is 5 min per request (discovery, list pages): a request hung across an API server
    # restart would hold the start-up listing, hence every handler, for longer than a lease handover
    # takes. Our own client's bound (60 s) instead; list pages are small (kopf pages them).
    settings.networking.request_timeout = client.timeout
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.persistence.progress_storage = _NoProgress()
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
        # The Lease as our last successful write returned it (None: read it before the next write).
        renewed: Any = None

        async def get(self, name: str, namespace: str) -> Any:
            if self.renewed is not None:
                # The leader renews optimistically, as client-go does: it assumes the Lease is still as it
                # wrote it and skips the GET. If anyone else wrote it since, the update's resourceVersion
                # no longer matches (409), the attempt fails, and the next one reads the Lease first.
                self.lease_reference = self.renewed
                return True, self.election_record(self.renewed)
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
            # The library's update, except that it keeps what the API server returned (the new
            # resourceVersion), which the next renewal writes on without reading the Lease again.
            self.renewed = None
            if self.lease_reference is None:
                return False
            try:
                self.lease_reference.spec = self.update_lease(updated_record, self.lease_reference.spec)
                written = await self.api_instance.replace_namespaced_lease(
                    name=name, namespace=namespace, body=self.lease_reference
                )
            except ApiException as err:
                log.warning("leader election: could not update the Lease: %s %s", err.status, err.reason)
                return False
            except _NETWORK_ERRORS:
                return False
            spec = getattr(written, "spec", None)
            if getattr(spec, "holder_identity", None) == self.identity:
                self.renewed = written
            return True

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

    # Lease duration 15 s, renew deadline 10 s, retry period 3 s: the reference operator's lease and retry
    # period (cmd/mpi-operator/app/server.go, v0.8.2), so both renew once per 3 s with one request.
    config = electionconfig.Config(lock, 15, 10, 3, started, stopped)
    await leaderelection.LeaderElection(config).run()


def _log_memory_sites() -> None:
    import tracemalloc

    if not tracemalloc.is_tracing():
        log.warning("memory: not tracing (start the operator with PYTHONTRACEMALLOC=1)")
        return
    snapshot = tracemalloc.take_snapshot()
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    lines = [f"memory: {total / 2**20:.1f} MiB traced; largest allocation sites:"]
    for stat in snapshot.statistics("traceback")[:25]:
        frames = " <- ".join(f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}" for f in stat.traceback)
        lines.append(f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks  {frames}")
    log.warning("\n".join(lines))


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
            # SIGUSR2: where the memory is, when run with PYTHONTRACEMALLOC=N (bench/compare.py --tracemalloc).
            loop.add_signal_handler(signal.SIGUSR2, _log_memory_sites)

        await run(options, stop=stop, started=started)

    asyncio.run(runner())
    return 0
