"""Issue 8, rule 11: leadership fences writes.

The executor checks the fence (the controller wires it to "holding the Lease") before every write of a
batch, so a leader that loses its lease in the middle of a reconcile stops at the next write.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mpijob.executor.apply import Executor
from mpijob.planner.actions import Create, Delete, Emit, Patch

from .builders import mpijob
from .fakes import RecordingClient


def test_a_batch_stops_at_the_first_write_after_leadership_is_lost() -> None:
    client = RecordingClient()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]
    leading = [True]
    executor.fence = lambda: leading[0]
    job = mpijob()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pi-worker-0"}}

    async def lose_lease_after_first_write() -> Any:
        actions = [
            Patch("v1", "ConfigMap", "pi-config", {"data": {}}),
            Emit("Normal", "X", "y"),
            Create(pod),
            Delete("v1", "Pod", "pi-worker-1", uid="u"),
        ]
        original = client.merge_patch

        async def patch_then_lose(path: str, patch: Any, **kw: Any) -> Any:
            result = await original(path, patch, **kw)
            leading[0] = False
            return result

        client.merge_patch = patch_then_lose  # type: ignore[method-assign]
        return await executor.apply(job, actions)

    outcome = asyncio.run(lose_lease_after_first_write())

    assert client.writes == [("PATCH", "/api/v1/namespaces/team-a/configmaps/pi-config")]
    assert outcome.conflict is not None and "leader" in outcome.conflict


def test_without_a_fence_every_write_goes() -> None:
    client = RecordingClient()
    executor = Executor(client, post_events=False)  # type: ignore[arg-type]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pi-worker-0"}}

    asyncio.run(executor.apply(mpijob(), [Create(pod), Delete("v1", "Pod", "pi-worker-1", uid="u")]))

    assert len(client.writes) == 2


# -- the grace period is measured on the API server's clock ----------------------------------------------


def test_server_clock_follows_the_date_header_not_the_local_clock() -> None:
    from datetime import UTC, datetime, timedelta

    from mpijob.kube.client import ServerClock

    clock = ServerClock()
    local = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    # The API server says it is an hour later than this machine thinks.
    clock.observe("Sun, 01 Mar 2026 13:00:00 GMT", local=local)

    assert clock.seen
    assert abs(clock.offset - timedelta(hours=1)) <= timedelta(seconds=1)
    assert abs(clock.now() - (datetime.now(UTC) + timedelta(hours=1))) <= timedelta(seconds=2)


def test_server_clock_ignores_missing_or_bad_headers() -> None:
    from datetime import timedelta

    from mpijob.kube.client import ServerClock

    clock = ServerClock()
    for header in (None, "", "yesterday", "Sun, 01 Mar 2026 13:00:00"):
        clock.observe(header)
    assert not clock.seen and clock.offset == timedelta(0)
