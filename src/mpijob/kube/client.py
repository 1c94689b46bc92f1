"""A small JSON client over kubernetes_asyncio's ApiClient: get, create, merge-patch, delete any kind.

kubernetes_asyncio does the connection, TLS and authentication (kubeconfig or in-cluster); requests use its
aiohttp session, headers and auth but not its generic `call_api` (`_send`), so one code path serves every
kind and a patch's content type is explicit.

Every request first takes a token (`TokenBucket`: `qps` a second, `burst` at once; waiters of the lowest
rank first). Its bucket depends on its write class (`WriteClass`, `Client.bucket_for`):
- NORMAL (reads and the work's writes): the operator's QPS and burst, one bucket for MPIJobs and one for
  the rest, like the reference operator's two clients; watches open in the second;
- EVENT: the second bucket at rank 1, so an Event waits behind the NORMAL requests waiting there, and
  while the work draws the budget below half its burst;
- URGENT (`Plan.leave_discovery`'s writes): a bucket of its own, 10x the budget by default, so a spot
  notice's burst of discovery writes never queues behind that burst's statuses and Events.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio.client import ApiClient

from mpijob.api.jsoncodec import dumps, loads


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"{status} {reason}: {body[:300]}")
        self.status = status
        self.reason = reason
        self.body = body


class WriteClass(enum.Enum):
    """Which budget a request takes its token from (`Client.bucket_for`)."""

    URGENT = "urgent"  # Plan.leave_discovery: workers leaving a launcher's discovery
    NORMAL = "normal"  # everything else the operator does, reads included
    EVENT = "event"  # Events: the shared bucket, behind the NORMAL requests waiting in it


class TokenBucket:
    """Allows `burst` requests at once and `qps` per second on average. When requests wait for a token, the
    one of the lowest rank goes first (FIFO within a rank), so a request of a higher rank waits only while the
    budget is spent. A request of rank >= 1 (an Event) also leaves the last half of the burst to rank 0: it
    takes a token only while that reserve stays, so it does not spend a budget the work is drawing down (a
    ramp of creates); after `patience` seconds of waiting it takes its turn without one."""

    def __init__(self, qps: float, burst: int, patience: float = 30.0) -> None:
        self.qps = qps
        self.capacity = float(max(1, burst))
        self.reserve = self.capacity / 2
        self.patience = patience
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        # (rank, arrival, when rank >= 1 stops keeping the reserve, the waiter)
        self._waiting: list[tuple[int, int, float, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now

    def _needs(self, rank: int, patient_until: float) -> float:
        """The tokens a request needs in the bucket to take one."""
        return 1.0 if rank == 0 or self.stamp >= patient_until else min(self.capacity, 1.0 + self.reserve)

    async def take(self, rank: int = 0) -> None:
        if self.qps <= 0:
            return
        self._refill()
        patient_until = self.stamp + self.patience
        if not self._waiting and self.tokens >= self._needs(rank, patient_until):
            self.tokens -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (rank, next(self._arrivals), patient_until, future))
        self._dispatch()  # it may be the new head, served now or with a shorter wait than the old head's
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # Handed a token as it was cancelled: give it back to the next waiter (never above the burst).
                self.tokens = min(self.capacity, self.tokens + 1)
                self._dispatch()
            raise

    def _arm(self) -> None:
        if self._timer is None and self._waiting:
            rank, _, patient_until, _ = self._waiting[0]
            delay = (self._needs(rank, patient_until) - self.tokens) / self.qps
            if rank and self.stamp < patient_until:  # (past it, the head waits for one token like the work)
                delay = min(delay, patient_until - self.stamp)
            self._timer = asyncio.get_running_loop().call_later(max(0.0, delay), self._dispatch)

    def _dispatch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._refill()
        while self._waiting:
            rank, _, patient_until, future = self._waiting[0]
            if future.done():  # a cancelled waiter leaves its place
                heapq.heappop(self._waiting)
                continue
            if self.tokens < self._needs(rank, patient_until):
                break
            heapq.heappop(self._waiting)
            future.set_result(None)
            self.tokens -= 1
        self._arm()


class ServerClock:
    """The API server's clock, as the `Date` headers of its responses show it (1 s resolution).

    Times the operator writes and later compares (a leaving worker's `leaving-since`, then its grace period)
    are taken on this clock, so a new leader whose own clock is skewed agrees with the one that wrote them.
    It errs late, never early (up to about a second behind the server's).
    """

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self.seen = False
        # The last header and what it parsed to: responses within a second share their header, and parsing
        # it (email.utils) was ~2% of the operator's CPU (docs/design.md).
        self._parsed: tuple[str, datetime] | None = None

    def observe(self, date_header: str | None, local: datetime | None = None) -> None:
        if not date_header:
            return
        if self._parsed is not None and self._parsed[0] == date_header:
            server = self._parsed[1]
        else:
            try:
                server = parsedate_to_datetime(date_header)
            except (TypeError, ValueError):
                return
            if server.tzinfo is None:
                return
            self._parsed = (date_header, server)
        # The header is truncated to the second and was written before we read it: the server's time now is
        # at least `server`. Taken as that lower bound, so the operator's clock is never ahead of the API
        # server's (up to ~1 s behind): a leaving worker is never deleted before the deadline it was told.
        self.offset = server - (local or datetime.now(UTC))
        self.seen = True

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


# The URGENT class's default budget, as a multiple of the client's own. A spot notice gives every affected job
# the same 15 s to 2 min at once: 1,500 jobs' discovery writes at the shared 50 QPS took 28 s (docs/results.md).
# It bounds a burst the size of the affected jobs (the executor stops at the plan's Defer after these writes);
# the API server's own priority and fairness still applies.
URGENT_FACTOR = 10


class Client:
    def __init__(
        self,
        api: ApiClient,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 60.0,
        *,
        urgent_qps: float | None = None,
        urgent_burst: int | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout
        # One budget for MPIJobs and one for everything else, as the reference operator has one client
        # (with its own limiter) per API group set: `--kube-api-qps 50` means the same on both operators.
        self.bucket = TokenBucket(qps, burst)
        self.mpijob_bucket = TokenBucket(qps, burst)
        self.urgent_bucket = TokenBucket(
            qps * URGENT_FACTOR if urgent_qps is None else urgent_qps,
            burst * URGENT_FACTOR if urgent_burst is None else urgent_burst,
        )
        self.requests = 0
        # Called with (method, path, HTTP status) after every response: the operator's metrics.
        self.on_response: Callable[[str, str, int], None] | None = None
        self.clock = ServerClock()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: Any = None,
        accept: str = "application/json",
        *,
        write_class: WriteClass = WriteClass.NORMAL,
    ) -> Any:
        bucket, rank = self.bucket_for(write_class, path)
        await bucket.take(rank)
        self.requests += 1
        data = None if body is None or method in ("GET", "HEAD") else dumps(body, self.api.sanitize_for_serialization)
        headers = {"Content-Type": content_type, "Accept": accept}
        # Without a timeout a hung connection would hold a worker (and its job key) forever.
        raw = await self._send(method, path, query, headers, data, aiohttp.ClientTimeout(total=self.timeout))
        self.clock.observe(raw.headers.get("Date"))
        data = await raw.read()
        status = int(raw.status)
        if self.on_response is not None:
            self.on_response(method, path, status)
        if not 200 <= status < 300:
            raise ApiError(status, str(raw.reason), data.decode(errors="replace"))
        return loads(data) if data else None

    def bucket_for(self, write_class: WriteClass, path: str) -> tuple[TokenBucket, int]:
        """The token bucket of a request, and its rank there."""
        if write_class is WriteClass.URGENT:
            return self.urgent_bucket, 0
        if write_class is WriteClass.EVENT:
            return self.bucket, 1
        return (self.mpijob_bucket if path.startswith("/apis/kubeflow.org/") else self.bucket), 0

    async def stream(self, path: str, query: list[tuple[str, str]], connect: float = 30.0) -> Any:
        """A long-running GET (a watch): the aiohttp response, its body unread, whatever its status. The
        caller reads and closes it, and bounds its reads (the server ends a watch; only connecting is bounded
        here). Within the QPS budget, like every request."""
        await self.bucket.take()
        self.requests += 1
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect)
        raw = await self._send("GET", path, query, headers, None, timeout)
        if self.on_response is not None:
            self.on_response("GET", path, int(raw.status))
        return raw

    async def _send(
        self,
        method: str,
        path: str,
        query: Any,
        headers: dict[str, str],
        data: bytes | None,
        bound: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """What kubernetes_asyncio's `call_api` does for a JSON request, without its generic machinery
        (parameter sanitising, model handling, stdlib JSON: 3.0% of a profile's samples, docs/design.md
        "Performance"): its session (TLS, client certificates), its default headers (User-Agent), its auth (the
        bearer token, refreshed by its hook: in-cluster token rotation, exec plugins), proxy and TLS server name."""
        api = self.api
        headers.update(api.default_headers)
        if api.cookie:
            headers["Cookie"] = api.cookie
        queries = list(query.items()) if isinstance(query, dict) else list(query or ())
        await api.update_params_for_auth(headers, queries, ["BearerToken"])
        url = f"{api.configuration.host}{path}"
        if queries:
            url += "?" + urlencode(queries)
        rest = api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        response: aiohttp.ClientResponse = await rest.pool_manager.request(
            method, url, headers=headers, data=data, timeout=bound, **extra
        )
        return response

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def create(self, path: str, obj: Any, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        return await self.request("POST", path, obj, write_class=write_class)

    async def merge_patch(self, path: str, patch: Any, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        content = "application/merge-patch+json"
        return await self.request("PATCH", path, patch, content_type=content, write_class=write_class)

    async def delete(self, path: str, options: Any = None, *, write_class: WriteClass = WriteClass.NORMAL) -> Any:
        return await self.request("DELETE", path, options, write_class=write_class)
