"""The informers (runtime/informer.py) against the real API server: a 410 Gone with deletions and creations
in the gap, a kind whose CRD appears after the informer started, a watch the server closes, and a watch
that stalls (a connection that stops delivering) detected and restarted."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cannot_run import cannot_run
from kube import eventually
from kubernetes_asyncio.client import ApiClient

from mpijob.executor.apply import Executor
from mpijob.kube.client import ApiError, Client
from mpijob.kube.kubeconfig import load_api_client
from mpijob.kube.resources import object_path
from mpijob.runtime.controller import Controller
from mpijob.runtime.informer import Informer
from mpijob.runtime.kinds import BY_KIND, Watched, own_key

pytestmark = pytest.mark.integration
Obj = dict[str, Any]
CONFIGMAPS = BY_KIND["ConfigMap"]


class Recorder:
    """A sink that keeps what it was told, in order, and a store replaced by every list."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lists: list[list[str]] = []
        self.store: dict[Any, Obj] = {}

    def replaced(self, watched: Watched, namespace: str | None, items: dict[Any, Obj]) -> None:
        self.lists.append(sorted(str(k[1]) for k in items))
        self.store = dict(items)

    def observed(self, watched: Watched, type: str, obj: Obj) -> None:
        name = str(obj["metadata"]["name"])
        self.events.append((type, name))
        key = (obj["metadata"]["namespace"], name)
        if type == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj


def _config_map(name: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


@contextlib.asynccontextmanager
async def _running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _names(client: Client, path: str) -> list[str]:
    return sorted(i["metadata"]["name"] for i in (await client.get(path))["items"])


async def test_a_410_gap_relists_and_delivers_what_was_deleted_and_created_in_it(
    testbed: Any, api: ApiClient, namespace: str
) -> None:
    if testbed is None:
        cannot_run("restarts the testbed's API server (MPIJOB_TEST_KUBECONFIG points elsewhere)")
    from mpijob_testbed import cluster

    client = Client(api)
    path = CONFIGMAPS.ns_path.format(ns=namespace)  # type: ignore[union-attr]
    for name in ("gap-a-config", "gap-b-config", "kept-config"):
        await client.create(path, _config_map(name))
    controller = Controller(Executor(client), _config())  # the real sink: cache, indexes, queue (no reconciler)
    informer = Informer(CONFIGMAPS, path, client, controller, namespace=namespace)
    async with _running(informer):
        await asyncio.wait_for(informer.listed.wait(), 30)
        await eventually(lambda: _async(informer.counters.watches >= 1), what="the watch")
    store = controller.cache.indexes["configmaps"]
    assert {(namespace, "gap-a-config"), (namespace, "kept-config")} <= set(store)
    drain(controller)

    # The gap: no watch runs while two are deleted and one is created.
    await client.delete(object_path("v1", "ConfigMap", namespace, "gap-a-config"))
    await client.delete(object_path("v1", "ConfigMap", namespace, "gap-b-config"))
    await client.create(path, _config_map("born-config"))
    # A restarted API server's watch cache starts after the gap: resuming from the informer's
    # resourceVersion answers 410 Gone (as after an etcd compaction).
    await asyncio.to_thread(cluster.restart_component, "kube-apiserver", testbed.state_dir, echo=lambda _: None)
    async with _running(informer):
        await eventually(lambda: _async(informer.counters.gone >= 1), what="410 Gone")
        live = await _names(client, path)
        await eventually(
            lambda: _async(sorted(k[1] for k in store if k[0] == namespace) == live), what="store == server"
        )

    assert (namespace, "gap-a-config") not in store and (namespace, "gap-b-config") not in store
    assert (namespace, "born-config") in store and (namespace, "kept-config") in store
    # The deletions reached the queue as the jobs they belong to (the ConfigMap is named after its job).
    assert {(namespace, "gap-a"), (namespace, "gap-b"), (namespace, "born")} <= drain(controller)
    assert controller.stats.ghosts == 2
    assert informer.counters.lists == 2


async def test_a_kind_whose_crd_appears_after_start_is_watched_once_served(api: ApiClient, namespace: str) -> None:
    client = Client(api)
    group = f"i{uuid.uuid4().hex[:8]}.informer.mpijob.test"
    crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}"
    kind = Watched(
        "Widget",
        "widgets",
        f"/apis/{group}/v1/widgets",
        f"/apis/{group}/v1/namespaces/{{ns}}/widgets",
        lambda body: body,
        own_key,
    )
    path = f"/apis/{group}/v1/namespaces/{namespace}/widgets"
    sink = Recorder()
    informer = Informer(kind, path, client, sink, namespace=namespace)
    try:
        async with _running(informer):
            await eventually(lambda: _async(informer.counters.errors >= 2), what="404s while no CRD serves it")
            assert not informer.listed.is_set()
            await client.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd(group))
            await asyncio.wait_for(informer.listed.wait(), 60)

            async def created() -> bool:
                try:
                    await client.create(
                        path, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}}
                    )
                except ApiError as err:  # the CRD may be listed before its storage serves writes
                    if err.status in (404, 503):
                        return False
                    raise
                return True

            await eventually(created, what="a Widget created")
            await eventually(lambda: _async(("ADDED", "w1") in sink.events), what="the Widget's event")
    finally:
        with contextlib.suppress(ApiError):
            await client.delete(crd_path)


async def test_a_watch_the_server_closes_resumes_from_its_resource_version(api: ApiClient, namespace: str) -> None:
    client = Client(api)
    path = CONFIGMAPS.ns_path.format(ns=namespace)  # type: ignore[union-attr]
    sink = Recorder()
    # The API server ends each watch after 1 s (timeoutSeconds): every re-watch resumes where it stopped.
    informer = Informer(CONFIGMAPS, path, client, sink, namespace=namespace, watch_timeout=(1, 1))
    async with _running(informer):
        await asyncio.wait_for(informer.listed.wait(), 30)
        await eventually(lambda: _async(informer.counters.watches >= 3), what="three watches, each closed")
        await client.create(path, _config_map("after-close"))
        await eventually(lambda: _async(("ADDED", "after-close") in sink.events), what="the event after the closes")
    assert informer.counters.lists == 1 and informer.counters.gone == 0  # resumed, never relisted


async def test_a_stalled_watch_is_detected_and_restarted(kubeconfig: Path, api: ApiClient, namespace: str) -> None:
    proxy = FreezingProxy()
    api_via_proxy = await load_api_client(kubeconfig)
    host = str(api_via_proxy.configuration.host)
    upstream_host, upstream_port = host.split("//", 1)[1].rsplit(":", 1)
    port = await proxy.start(upstream_host, int(upstream_port))
    api_via_proxy.configuration.host = f"https://{upstream_host}:{port}"
    client, direct = Client(api_via_proxy), Client(api)
    path = CONFIGMAPS.ns_path.format(ns=namespace)  # type: ignore[union-attr]
    await direct.create(path, _config_map("ticker", n="0"))
    sink = Recorder()
    informer = Informer(CONFIGMAPS, path, client, sink, namespace=namespace, stall=3.0)
    ticks = 0

    async def tick() -> None:
        # An event every 0.3 s: a live watch is never silent for the stall bound.
        nonlocal ticks
        while True:
            ticks += 1
            await direct.merge_patch(object_path("v1", "ConfigMap", namespace, "ticker"), {"data": {"n": str(ticks)}})
            await asyncio.sleep(0.3)

    ticker = asyncio.create_task(tick())
    try:
        async with _running(informer):
            await asyncio.wait_for(informer.listed.wait(), 30)
            await eventually(lambda: _async(informer.counters.events >= 5), what="ticks through the watch")
            assert informer.counters.stalls == 0  # a watch that delivers is never taken for stalled
            proxy.freeze()  # the open connection stops delivering, without closing (a half-open stream)
            await eventually(lambda: _async(informer.counters.stalls >= 1), within=30, what="the stall detected")
            seen = informer.counters.events
            await eventually(lambda: _async(informer.counters.events >= seen + 3), what="ticks on the new watch")
        assert informer.counters.lists == 1  # restarted from its resourceVersion, not relisted
        assert proxy.connections >= 2
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        proxy.close()
        await api_via_proxy.close()


class FreezingProxy:
    """A TCP proxy to the API server whose open connections can be frozen: they stay open and deliver
    nothing more (what a dead peer behind a NAT looks like). Connections made afterwards flow."""

    def __init__(self) -> None:
        self.connections = 0
        self.frozen: list[asyncio.Event] = []
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            stop = asyncio.Event()
            self.frozen.append(stop)
            up_reader, up_writer = await asyncio.open_connection(host, port)

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    while data := await src.read(65536):
                        if stop.is_set():
                            await asyncio.Event().wait()  # hold the connection open, deliver nothing
                        dst.write(data)
                        await dst.drain()
                dst.close()

            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def freeze(self) -> None:
        for stop in self.frozen:
            stop.set()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _crd(group: str) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def _config() -> Any:
    from mpijob.planner.snapshot import OperatorConfig

    return OperatorConfig()


def drain(controller: Controller) -> set[tuple[str, str]]:
    """Every key queued so far (the queue is emptied)."""
    return set(controller.queue.take_pending())  # type: ignore[arg-type]


async def _async(value: bool) -> bool:
    return value
