"""Runs the operator: the informers, the reconcile workers, optional Lease leader election, /healthz, /readyz."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from mpijob.app.metrics import Metrics
from mpijob.executor.apply import Executor
from mpijob.executor.events import EventPoster
from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import load_api_client
from mpijob.planner import podgroups
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import heap, informer, permissions
from mpijob.runtime.controller import Controller

# How long a stopping operator waits for its Events still in flight (then drops them: best effort).
EVENT_DRAIN_SECONDS = 5.0

log = logging.getLogger("mpijob.operator")


@dataclass
class OperatorOptions:
    kubeconfig: str | None = None
    master: str | None = None  # the API server's URL over the kubeconfig's (the reference's --master)
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    # Concurrent reconciles (the CLI's --workers): they mostly wait on the API server (docs/results.md).
    reconcilers: int = 16
    qps: float = 50.0
    burst: int = 100
    # The URGENT write class's budget (Plan.leave_discovery's writes); None: URGENT_FACTOR x qps and burst.
    urgent_qps: float | None = None
    urgent_burst: int | None = None
    log_format: str = "text"
    log_level: str = "INFO"
    # What the planner decides with (cluster domain, termination signals, discovery, gang scheduler, managedBy).
    planner: OperatorConfig = field(default_factory=OperatorConfig)
    leader_elect: bool = False
    lock_namespace: str = "mpijob-system"
    lease_name: str = "mpijob-operator"
    # Said once logging is set up: flags accepted with no effect here (cli/reference_flags.py).
    startup_notes: list[str] = field(default_factory=list)
    health_port: int = 0
    metrics_port: int = 0  # 0: /metrics not served (metrics are still kept, for tests and benchmarks)
    metrics_address: str = "0.0.0.0"
    # Seconds between relists of the cached kinds (jittered): a safety net; 410 Gone relists at once.
    resync_period: float = informer.RELIST
    # A watch silent (no event, no bookmark) for longer than this is restarted.
    watch_stall: float = informer.STALL
    # "uvloop" (the default: less CPU per request, 0.91x on the testbed: docs/design.md) or "asyncio".
    event_loop: str = "uvloop"


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


async def run(
    options: OperatorOptions,
    *,
    stop: asyncio.Event | None = None,
    started: Callable[[Controller], None] | None = None,
) -> Controller:
    api = await load_api_client(options.kubeconfig, master=options.master)
    client = Client(api, options.qps, options.burst, urgent_qps=options.urgent_qps, urgent_burst=options.urgent_burst)
    grants = await _grants(client, options)
    config = config_within(options.planner, grants)
    metrics = Metrics()
    client.on_response = metrics.api_response
    events = EventPoster(client)
    executor = Executor(client, events=events, update_kinds=grants.update_instead_of_patch())
    controller = Controller(
        executor,
        config,
        reconcilers=options.reconcilers,
        # The API server's clock, so that grace periods mean the same to every leader (issue 8, rule 11).
        clock=client.clock.now,
        observer=metrics,
    )
    metrics.attach(controller)
    metrics.attach_events(events)
    try:
        await client.get("/version")  # learns the API server's clock before the first plan
    except Exception as err:
        log.warning("could not read the API server's clock yet: %s", err)
    metrics.register(controller, config)
    if options.metrics_port:
        metrics.serve(options.metrics_port, options.metrics_address)
    if started is not None:
        started(controller)
    stop = stop or asyncio.Event()
    watches = _informers(options, client, controller)
    # Tasks that run until the operator stops (/healthz watches them); the warm gate ends once warm.
    tasks = [asyncio.create_task(i.run(), name=f"informer {i.name}") for i in watches]
    warm_up = asyncio.create_task(controller.warm_up(watches))
    health = await _serve_health(options.health_port, tasks, controller.warm) if options.health_port else None
    election = Election(api, options) if options.leader_elect else None
    if election is not None:
        tasks.append(election.start(controller, stop))
    else:
        controller.leading.set()
    reconcilers = asyncio.create_task(controller.run_reconcilers(), name="reconcilers")

    def reconcilers_ended(task: asyncio.Task[None]) -> None:
        # A reconciler that dies (a bug) must not leave the operator watching with nobody reconciling.
        if not task.cancelled():
            log.error("the reconcilers ended: %r; stopping", task.exception())
            stop.set()

    reconcilers.add_done_callback(reconcilers_ended)
    tasks.append(reconcilers)
    started_as = (options.namespaces or "all", options.reconcilers, options.qps, options.burst)
    log.info("operator started: namespaces=%s reconcilers=%d qps=%s burst=%d", *started_as)
    try:
        await stop.wait()
    finally:
        for task in (*tasks, warm_up):
            task.cancel()
        await asyncio.gather(*tasks, warm_up, return_exceptions=True)
        if election is not None and controller.leading.is_set():
            await election.release()  # nothing of ours writes any more: the reconcilers have ended
        if health is not None:
            await health.cleanup()
        controller.queue.shutdown()
        await events.drain(EVENT_DRAIN_SECONDS)
        await api.close()
    return controller


async def _grants(client: Client, options: OperatorOptions) -> permissions.Grants:
    """What the operator may do; with gang scheduling on, its PodGroup kind must be served first."""
    if options.planner.gang_scheduler:
        await _check_pod_group_crd(client, options.planner.gang_scheduler)
    return await permissions.check(client, options.namespaces, options.planner.gang_scheduler)


def config_within(config: OperatorConfig, grants: permissions.Grants) -> OperatorConfig:
    """The planner's settings with the features the operator may not use turned off (runtime/kinds.py:watched
    then leaves their kinds unwatched)."""
    off = grants.off()
    return replace(
        config,
        node_signals=config.node_signals and permissions.NODE_SIGNALS not in off,
        disruption_budgets=config.disruption_budgets and permissions.DISRUPTION_BUDGETS not in off,
        discovery_access=config.discovery_access and permissions.API_DISCOVERY not in off,
        api_discovery=config.api_discovery and permissions.API_DISCOVERY not in off,
        permissions_message=grants.elastic_message(),
    )


def _informers(options: OperatorOptions, client: Client, controller: Controller) -> list[informer.Informer]:
    # Freed heap goes back to the OS (runtime/heap.py): after lists, and when a burst of reconciles is over.
    heap.configure()
    trimmer = heap.Trimmer()
    controller.queue.on_idle = trimmer.idle
    return informer.informers(
        controller.kinds,
        client,
        controller,
        options.namespaces,
        relist=options.resync_period,
        stall=options.watch_stall,
        cached=controller.cache.get,
        on_listed=trimmer.listed,
        busy=controller.queue.busy,
    )


async def _serve_health(port: int, tasks: list[asyncio.Task[Any]], warm: asyncio.Event) -> web.AppRunner:
    """/healthz on `port`: 200 while every informer and worker task runs (they run until the operator
    stops), 500 once one has ended, so the kubelet restarts a process that can no longer see the cluster.
    /readyz: 200 once every informer has listed (the warm gate) and while /healthz is; 503 before. A standby
    that does not hold the Lease is ready too: its cache is warm, it takes over at once (a rolling update
    waits for it, and not for a lease it cannot get while the old leader runs)."""

    def ended() -> list[str]:
        return [t.get_name() for t in tasks if t.done()]

    async def healthz(_: web.Request) -> web.Response:
        if gone := ended():
            return web.json_response({"ended": gone}, status=500)
        return web.json_response({"ok": True})

    async def readyz(_: web.Request) -> web.Response:
        if gone := ended():
            return web.json_response({"ended": gone}, status=503)
        if not warm.is_set():
            return web.json_response({"waiting": "informers listing"}, status=503)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


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


# Bounds the release of the Lease on a graceful stop: an unreachable API server must not hold up the exit.
RELEASE_TIMEOUT = 3.0


class Election:
    """The Lease this process competes for. Reconcile only while holding it; standbys keep warm caches; losing
    it is fatal. On a graceful stop the leader releases it (client-go's ReleaseOnCancel): a standby then leads
    at its next retry, within 3 s, instead of waiting out the 15 s lease; the reference's v0.8.2 does not
    release, and its standbys take a released Lease as they take an expired one."""

    def __init__(self, api: k8s_client.ApiClient, options: OperatorOptions) -> None:
        self.identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.name, self.namespace = options.lease_name, options.lock_namespace
        self.lock = sturdy_lease_lock(self.name, self.namespace, self.identity, api)

    def start(self, controller: Controller, stop: asyncio.Event) -> asyncio.Task[None]:
        task = asyncio.create_task(self._lead(controller), name="leader election")

        def ended(task: asyncio.Task[None]) -> None:
            # Leader election must never end quietly (e.g. no RBAC for Leases): stop the whole operator.
            if not task.cancelled():
                log.error("leader election ended: %r; stopping", task.exception())
                stop.set()

        task.add_done_callback(ended)
        return task

    async def _lead(self, controller: Controller) -> None:
        from kubernetes_asyncio.leaderelection import electionconfig, leaderelection

        async def started() -> None:
            log.info("leading as %s", self.identity)
            controller.leading.set()

        async def stopped() -> None:
            log.error("lost the lease; exiting so a fresh process starts clean")
            controller.leading.clear()  # no write after this point
            os.kill(os.getpid(), signal.SIGTERM)

        # Lease duration 15 s, renew deadline 10 s, retry period 3 s: the reference operator's lease and retry
        # period (cmd/mpi-operator/app/server.go, v0.8.2), so both renew once per 3 s with one request.
        config = electionconfig.Config(self.lock, 15, 10, 3, started, stopped)
        await leaderelection.LeaderElection(config).run()

    async def release(self) -> None:
        """Empties the Lease's holder, on the resourceVersion of our last renewal (or of a fresh read that
        still names us): a Lease someone else took meanwhile is left alone (409)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                lease = self.lock.renewed or await self.lock.api_instance.read_namespaced_lease(
                    self.name, self.namespace
                )
                if lease.spec.holder_identity != self.identity:
                    return
                now = datetime.datetime.now(datetime.UTC)
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.acquire_time = lease.spec.renew_time = now
                await self.lock.api_instance.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("released the lease %s/%s", self.namespace, self.name)
        except (ApiException, *_NETWORK_ERRORS) as err:
            log.warning("could not release the lease (a standby leads once it runs out): %r", err)


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
    for note in options.startup_notes:
        log.info("%s", note)
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

    with _event_loop_runner(options.event_loop) as loop_runner:
        loop_runner.run(runner())
    return 0


def _event_loop_runner(name: str) -> asyncio.Runner:
    """uvloop's event loop (libuv: its sockets, TLS and timers cost less CPU per request than the standard
    loop's), or the standard one."""
    if name == "uvloop":
        import uvloop  # only the operator needs it; the CLI's short commands keep the standard loop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    if name != "asyncio":
        raise ValueError(f"event loop {name!r}: uvloop or asyncio")
    return asyncio.Runner()
