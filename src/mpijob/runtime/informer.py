"""Informers: per watched kind (and namespace), a paged list, then a watch from the list's resourceVersion.

What each one guarantees its sink (the controller):
- `replaced(watched, namespace, items)` after every list: the complete set of objects at the list's
  resourceVersion. The sink replaces its store with it, so what vanished while no watch ran (a 410 Gone
  gap, an API server restart) is delivered as a deletion, and a creation in the gap as an addition;
- `observed(watched, type, obj)` for every ADDED, MODIFIED, DELETED watch event, in the server's order;
- each object decoded (orjson) and slimmed (runtime/slim.py) once, as it arrives: the full object is never
  kept.
The watch resumes from the last resourceVersion seen (events and bookmarks, `allowWatchBookmarks`); a 410
Gone (the resourceVersion is older than the server's window) relists. Errors back off exponentially with
full jitter, reset by a list or a watch that delivered something. A watch that delivers nothing, not even a
bookmark, for `stall` seconds is taken for a dead connection (a half-open TCP stream, a proxy that
stopped forwarding) and restarted from its last resourceVersion. A kind the API server does not serve yet
(404: a CRD created after the operator started) is retried with the same backoff until it is served.
Every `relist` seconds (jittered) a list replaces the store again: a safety net, not a mechanism. So it
waits while the controller is busy (`busy`: a burst of reconciles, when a list of every pod competes with
the plans for the one core), at most one more period; the watch keeps the store current meanwhile. A burst
that comes while such a list runs makes it pause between two pages (at most `PAGE_WAIT` s per list).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from mpijob.api.jsoncodec import loads
from mpijob.api.objects import Obj
from mpijob.kube.client import ApiError, Client
from mpijob.runtime.kinds import Watched

log = logging.getLogger("mpijob.informer")

PAGE = 500
# The API server ends a watch after timeoutSeconds: a random one in this range, as client-go picks, so a
# fleet of informers does not re-watch in step.
WATCH_TIMEOUT = (300, 600)
# The API server sends a bookmark to every watcher about once a minute (allowWatchBookmarks): a watch
# silent for longer than this is dead.
STALL = 150.0
RELIST = 300.0
JITTER = 0.2
# A periodic relist due while the controller is busy is looked at again this often (the watch is restarted
# from its resourceVersion in between: one request, nothing replayed).
BUSY_RECHECK = 15.0
# A periodic relist that meets a burst between two pages waits for the controller to be idle, looking every
# PAGE_RECHECK s, at most PAGE_WAIT s in all per list: well inside the few minutes a list's continue token
# lasts (the API server's compaction interval, 5 min by default), so the list goes on where it stopped.
PAGE_RECHECK = 0.5
PAGE_WAIT = 60.0
# Backoff on errors: from 0.2 s doubling to 30 s, with full jitter.
BACKOFF = (0.2, 30.0)
# What an unreachable or restarting API server raises besides an HTTP error.
NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class Sink(Protocol):
    def replaced(self, watched: Watched, namespace: str | None, items: dict[Any, Obj]) -> None: ...

    def observed(self, watched: Watched, type: str, obj: Obj) -> None: ...


class Gone(Exception):
    """410: the resourceVersion is older than what the API server keeps."""


class Stalled(Exception):
    """No event and no bookmark for longer than the stall bound."""


def ident(watched: Watched, obj: Obj) -> Any:
    """How the store keys an object: (namespace, name), or the name of a cluster-scoped one."""
    meta = obj["metadata"]
    return (str(meta.get("namespace")), str(meta.get("name"))) if watched.namespaced else str(meta.get("name"))


@dataclass
class Backoff:
    base: float = BACKOFF[0]
    most: float = BACKOFF[1]
    failures: int = 0
    rand: Callable[[float, float], float] = random.uniform

    def next(self) -> float:
        """Full jitter (uniform in [0, base * 2^failures], capped), so restarted informers spread out."""
        delay = min(self.most, self.base * 2**self.failures)
        self.failures += 1
        return self.rand(delay / 2, delay)

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Counters:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    gone: int = 0
    stalls: int = 0
    errors: int = 0


@dataclass
class Informer:
    watched: Watched
    path: str
    client: Client
    sink: Sink
    namespace: str | None = None
    stall: float = STALL
    relist: float = RELIST
    watch_timeout: tuple[int, int] = WATCH_TIMEOUT
    # Set once the first list is delivered (the warm gate waits for every informer's).
    listed: asyncio.Event = field(default_factory=asyncio.Event)
    counters: Counters = field(default_factory=Counters)
    backoff: Backoff = field(default_factory=Backoff)
    resource_version: str | None = None
    # Loop time of the next periodic relist.
    relist_at: float = 0.0
    # The sink's cached view of an object, by (store name, key): a relist keeps the view of an object whose
    # uid and resourceVersion are unchanged instead of slimming a second copy (docs/design.md, "Memory").
    cached: Callable[[str, Any], Obj | None] | None = None
    # Called after each list is in the store (runtime/heap.py: the pages' freed heap is returned then).
    on_listed: Callable[[], None] | None = None
    # True while the controller has work queued or running: a periodic relist waits (see the module's doc).
    busy: Callable[[], bool] | None = None

    @property
    def name(self) -> str:
        return self.watched.kind + (f" in {self.namespace}" if self.namespace else "")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                if (wait := self.until_list(loop.time())) <= 0:
                    await self._list()
                    self.relist_at = loop.time() + self.relist * (1 + random.uniform(-JITTER, JITTER))
                    self.backoff.reset()
                    wait = self.relist_at - loop.time()
                await self._watch(max(1, int(wait)))
            except asyncio.CancelledError:
                raise
            except Gone:
                self.counters.gone += 1
                log.info("watch %s: resourceVersion %s expired (410 Gone); relisting", self.name, self.resource_version)
                self.resource_version = None
                # Short the first time after a success; a server that keeps answering 410 is not hammered.
                await asyncio.sleep(self.backoff.next())
            except Stalled:
                self.counters.stalls += 1
                log.warning("watch %s: nothing for %.0f s, not even a bookmark; restarting it", self.name, self.stall)
            except Exception as err:
                self.counters.errors += 1
                delay = self.backoff.next()
                level = logging.INFO if isinstance(err, ApiError) and err.status == 404 else logging.WARNING
                log.log(level, "informer %s: %s; retrying in %.1f s", self.name, _short(err), delay)
                await asyncio.sleep(delay)

    def until_list(self, now: float) -> float:
        """Seconds until the next list, <= 0 for now: at once without a resourceVersion; at `relist_at`,
        unless the controller is busy then, in which case up to one more `relist` later."""
        if self.resource_version is None:
            return 0.0
        if now < self.relist_at:
            return self.relist_at - now
        latest = self.relist_at + self.relist
        if self.busy is None or now >= latest or not self.busy():
            return 0.0
        return min(BUSY_RECHECK, latest - now)

    async def _list(self) -> None:
        """A paged list; the store is replaced only once every page is in (a partial list proves nothing)."""
        items: dict[Any, Obj] = {}
        token: str | None = None
        rv: str | None = None
        why, started, pages = self._why_list(), time.perf_counter(), 0
        # Only a periodic relist yields: a first list or a 410's relist is what the controller waits for.
        may_wait = PAGE_WAIT if why == "relist" else 0.0
        while True:
            if token and may_wait > 0:
                may_wait -= await self._wait_while_busy(may_wait)
            pages += 1
            query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
            # The decoded page is dropped (inside _take) before the next one is asked for: two pages of full
            # objects at once were the operator's memory peak, and the heap keeps its peak (docs/design.md).
            token, rv = self._take(await self.client.request("GET", self.path, query=query), rv, items)
            if not token:
                break
        self.counters.lists += 1
        self.resource_version = str(rv)
        self.sink.replaced(self.watched, self.namespace, items)
        # When a list ran and what it cost: a relist of every pod is seconds of CPU at scale, and a profile
        # alone cannot tell whether it fell inside a burst.
        took = time.perf_counter() - started
        log.info("%s %s: %d objects, %d pages, %.2f s", why, self.name, len(items), pages, took)
        self.listed.set()
        if self.on_listed is not None:
            self.on_listed()

    async def _wait_while_busy(self, most: float) -> float:
        """Between two pages of a periodic relist: waits while the controller is busy (a burst that came
        after the relist started: at 2,000 x 8 a pod relist took 46 s and a mass scale-in met it), at most
        `most` seconds. Returns how long it waited."""
        waited = 0.0
        while self.busy is not None and waited < most and self.busy():
            pause = min(PAGE_RECHECK, most - waited)
            await asyncio.sleep(pause)
            waited += pause
        return waited

    def _why_list(self) -> str:
        if not self.listed.is_set():
            return "first list"
        return "relist after 410" if self.resource_version is None else "relist"

    def _take(self, page: Any, rv: str | None, items: dict[Any, Obj]) -> tuple[str | None, str | None]:
        """Slims a page's items into `items`; returns the continue token and the list's resourceVersion."""
        meta = page.get("metadata") or {}
        # Listed items lack the kind and apiVersion a watch event's object has: the same shape either way.
        kind = str(page.get("kind") or "").removesuffix("List")
        slim, cached, index = self.watched.slim, self.cached, self.watched.index
        for item in page.get("items") or []:
            key = ident(self.watched, item)
            # Unchanged since the store got it (a relist of a steady cluster: nearly every object): the
            # cached view is the slimmed object at that version, so the store is not held twice meanwhile.
            old = cached(index, key) if cached is not None else None
            if old is not None and (item.get("metadata") or {}).get("resourceVersion") and same_version(old, item):
                items[key] = old
                continue
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", page.get("apiVersion"))
            items[key] = slim(item)
        return meta.get("continue") or None, rv or meta.get("resourceVersion")

    async def _watch(self, longest: int) -> None:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", str(self.resource_version)),
            ("timeoutSeconds", str(min(longest, random.randint(*self.watch_timeout)))),
        ]
        # No total bound (the server ends the watch); the stall bound guards the reads.
        response = await self.client.stream(self.path, query)
        try:
            if response.status == 410:
                raise Gone()
            if not 200 <= response.status < 300:
                body = await response.read()
                raise ApiError(response.status, str(response.reason), body.decode(errors="replace"))
            self.counters.watches += 1
            await self._read(response.content)
        finally:
            response.release()

    async def _read(self, content: aiohttp.StreamReader) -> None:
        """Reads the stream's lines (one JSON event each) until the server ends it."""
        loop = asyncio.get_running_loop()
        pending = b""
        try:
            async with asyncio.timeout(self.stall) as deadline:
                while chunk := await content.readany():
                    deadline.reschedule(loop.time() + self.stall)
                    lines = (pending + chunk if pending else chunk).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if line:
                            self._event(line)
        except TimeoutError:
            if deadline.expired():
                raise Stalled() from None
            raise

    def _event(self, line: bytes) -> None:
        event = loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise Gone()
            raise ApiError(code, str(obj.get("reason") or "watch error"), str(obj.get("message") or ""))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.counters.bookmarks += 1
        elif kind in ("ADDED", "MODIFIED", "DELETED"):
            self.counters.events += 1
            self.sink.observed(self.watched, kind, self.watched.slim(obj))
        if rv:
            self.resource_version = str(rv)
        self.backoff.reset()


def same_version(a: Obj, b: Obj) -> bool:
    """The same object at the same resourceVersion (uid and resourceVersion equal)."""
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return bool(ma.get("uid") == mb.get("uid") and ma.get("resourceVersion") == mb.get("resourceVersion"))


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__


def informers(
    kinds: tuple[Watched, ...], client: Client, sink: Sink, namespaces: list[str], **settings: Any
) -> list[Informer]:
    """One informer per kind, or per kind and namespace when the operator watches namespaces."""
    out = []
    for w in kinds:
        scopes: list[str | None] = list(namespaces) if namespaces and w.namespaced else [None]
        for ns in scopes:
            path = w.ns_path.format(ns=ns) if ns is not None and w.ns_path else w.path
            out.append(Informer(w, path, client, sink, namespace=ns, **settings))
    return out
