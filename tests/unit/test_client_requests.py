"""What `Client` sends and how it reads the answer, now that it goes through kubernetes_asyncio's session
but not its `call_api`: the library's auth (its refresh hook asked on every request), User-Agent, the
query, the JSON body, and the status, reason and body of a refusal. A local HTTP server answers; the
ApiClient is the real one, built from a real Configuration."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from mpijob.kube.client import ApiError, Client, ServerClock

Seen = list[dict[str, Any]]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen]]:
    seen: Seen = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": list(request.query.items()),
                "headers": dict(request.headers),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/taken"):
            return web.Response(status=409, reason="Conflict", text='{"reason": "AlreadyExists"}')
        answer = {"metadata": {"resourceVersion": "7"}, "big": 2**63 - 1}
        return web.json_response(answer, headers={"Date": "Tue, 01 Dec 2026 23:00:00 GMT"})

    runner = web.AppRunner(web.Application())
    runner.app.router.add_route("*", "/{tail:.*}", handle)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


def _api(host: str, tokens: list[str]) -> k8s_client.ApiClient:
    cfg = k8s_client.Configuration(host=host)
    cfg.api_key["BearerToken"] = "from the loader"
    cfg.api_key_prefix["BearerToken"] = "Bearer"

    def refresh(config: k8s_client.Configuration) -> None:
        # As the in-cluster loader's hook does when the projected token rotates.
        config.api_key["BearerToken"] = tokens.pop(0)

    cfg.refresh_api_key_hook = refresh
    api = k8s_client.ApiClient(configuration=cfg)
    api.user_agent = "mpijob-test"
    return api


async def test_every_request_carries_the_token_the_refresh_hook_gives_and_the_user_agent(
    server: tuple[str, Seen],
) -> None:
    host, seen = server
    api = _api(host, ["first", "rotated"])
    try:
        client = Client(api, qps=0)
        await client.get("/api/v1/namespaces/a/pods/p")
        await client.get("/api/v1/namespaces/a/pods/p")
    finally:
        await api.close()
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer first", "Bearer rotated"]
    assert {s["headers"]["User-Agent"] for s in seen} == {"mpijob-test"}


async def test_a_merge_patch_sends_its_content_type_query_and_json_body(server: tuple[str, Seen]) -> None:
    host, seen = server
    api = _api(host, ["t"] * 3)
    try:
        client = Client(api, qps=0)
        answer = await client.merge_patch("/api/v1/namespaces/a/configmaps/c", {"data": {"h": "é\n"}})
        await client.request("GET", "/api/v1/pods", query=[("labelSelector", "a=b,c in (d)"), ("limit", "5")])
        await client.delete("/api/v1/namespaces/a/pods/p")
    finally:
        await api.close()
    patch, listing, delete = seen
    assert (patch["method"], patch["headers"]["Content-Type"]) == ("PATCH", "application/merge-patch+json")
    assert patch["body"] == {"data": {"h": "é\n"}}
    assert answer == {"metadata": {"resourceVersion": "7"}, "big": 2**63 - 1}
    assert listing["query"] == [("labelSelector", "a=b,c in (d)"), ("limit", "5")]
    assert (delete["method"], delete["body"]) == ("DELETE", None)


async def test_a_body_orjson_cannot_encode_is_sent_as_the_library_would(server: tuple[str, Seen]) -> None:
    """A datetime goes through the library's sanitiser (isoformat); a non-string key through stdlib JSON."""
    host, seen = server
    api = _api(host, ["t"] * 2)
    when = datetime(2026, 12, 1, 23, 0, 0, 5, tzinfo=UTC)
    try:
        client = Client(api, qps=0)
        await client.create("/api/v1/namespaces/a/configmaps", {"metadata": {"name": "c"}, "at": when})
        await client.create("/api/v1/namespaces/a/configmaps", {"data": {1: "one"}})
    finally:
        await api.close()
    assert seen[0]["body"]["at"] == when.isoformat()
    assert seen[1]["body"] == {"data": {"1": "one"}}


async def test_a_refusal_is_an_api_error_with_status_reason_and_body_and_is_counted(
    server: tuple[str, Seen],
) -> None:
    host, _ = server
    api = _api(host, ["t"] * 2)
    responses: list[tuple[str, str, int]] = []
    try:
        client = Client(api, qps=0)
        client.on_response = lambda method, path, status: responses.append((method, path, status))
        with pytest.raises(ApiError) as refused:
            await client.create("/api/v1/namespaces/a/taken", {"metadata": {"name": "taken"}})
        await client.get("/api/v1/namespaces/a/pods/p")
    finally:
        await api.close()
    assert (refused.value.status, refused.value.reason) == (409, "Conflict")
    assert json.loads(refused.value.body) == {"reason": "AlreadyExists"}
    assert responses == [("POST", "/api/v1/namespaces/a/taken", 409), ("GET", "/api/v1/namespaces/a/pods/p", 200)]
    assert client.requests == 2
    # The server's Date header set the clock (1 s resolution: the offset is far from zero here).
    server_time = datetime(2026, 12, 1, 23, 0, 0, tzinfo=UTC)
    assert client.clock.seen and abs(client.clock.now() - server_time).total_seconds() < 2


def test_the_clock_offset_follows_every_response_though_a_repeated_header_is_parsed_once() -> None:
    clock = ServerClock()
    base = datetime(2026, 12, 1, 22, 59, 50, tzinfo=UTC)
    clock.observe("Tue, 01 Dec 2026 23:00:00 GMT", local=base)
    assert clock.offset == timedelta(seconds=10)
    # The same header read later: the same server second, a later local time, so a smaller offset.
    clock.observe("Tue, 01 Dec 2026 23:00:00 GMT", local=base + timedelta(seconds=0.25))
    assert clock.offset == timedelta(seconds=9.75)
    clock.observe("Tue, 01 Dec 2026 23:00:01 GMT", local=base + timedelta(seconds=0.5))
    assert clock.offset == timedelta(seconds=10.5)
    # What does not parse changes nothing, even after a good one.
    clock.observe("not a date", local=base)
    clock.observe("Tue, 01 Dec 2026 23:00:05", local=base)
    assert clock.offset == timedelta(seconds=10.5)


def test_the_clock_is_never_ahead_of_the_api_servers_whatever_fraction_of_a_second_the_header_was_cut_at() -> None:
    """A Date header is the server's second, truncated, written before the operator reads it: taken as a
    lower bound, the operator's clock never runs ahead, so no deadline it told is met early (issue 31: a
    leaving worker was deleted up to 0.5 s before its deadline with the midpoint estimate)."""
    local = datetime(2026, 12, 1, 22, 0, 0, tzinfo=UTC)
    true_offset = timedelta(seconds=3)
    for fraction in (0.0, 0.2, 0.5, 0.8, 0.999):
        server_now = local + true_offset + timedelta(seconds=fraction)
        header = server_now.replace(microsecond=0).strftime("%a, %d %b %Y %H:%M:%S GMT")
        for latency in (0.0, 0.05, 0.3):  # the response read a moment after the server wrote its header
            clock = ServerClock()
            clock.observe(header, local=local + timedelta(seconds=fraction + latency))
            estimate = local + timedelta(seconds=fraction + latency) + clock.offset
            real = server_now + timedelta(seconds=latency)
            assert timedelta(0) <= real - estimate < timedelta(seconds=1.5), (fraction, latency)
