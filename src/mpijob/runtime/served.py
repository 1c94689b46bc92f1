"""Waiting, before kopf starts, until the API server's discovery serves the custom kinds the operator watches.

kopf learns which resources exist once, at start-up, from discovery (/apis, then /apis/<group>/<version>),
and scans again only when a CRD is added or changed. Right after a kube-apiserver (re)start, discovery
answers 200 for a moment without the CRD groups (on the testbed: about 0.1 s after an 11 s restart, longer on
a loaded machine), while the CRDs themselves exist. An operator whose scan lands in that moment never
watches MPIJobs (kopf logs "Unresolved resources cannot be served") and, if it holds the Lease, never
reconciles anything until it is restarted. So: for each kind whose CRD exists and serves the version we
watch, wait until discovery lists it. A kind whose CRD is absent (or unreadable) is left to kopf, which
starts watching it when the CRD is created, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

import aiohttp

from mpijob.executor.client import ApiError, Client

log = logging.getLogger("mpijob.operator")

# What an unreachable or restarting API server raises besides an HTTP error.
_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)

SERVED, ABSENT, PENDING = "served", "absent", "pending"


# Built-in groups (no CRD): discovery must list them, and right after a restart it may not (measured: an
# operator's start-up scan missed batch/v1 and policy/v1).
BUILTIN = frozenset({"", "batch", "policy", "rbac.authorization.k8s.io"})


async def _listed(client: Client, group: str, version: str, plural: str) -> bool:
    """Whether discovery lists the kind, as kopf's scan reads it (/api for the core group, else /apis)."""
    if group:
        groups = (await client.get("/apis") or {}).get("groups") or []
        listed = any(
            g.get("name") == group and any(v.get("version") == version for v in g.get("versions") or []) for g in groups
        )
    else:
        listed = version in ((await client.get("/api") or {}).get("versions") or [])
    if not listed:
        return False
    found = await client.get(f"/apis/{group}/{version}" if group else f"/api/{version}") or {}
    return any(r.get("name") == plural for r in found.get("resources") or [])


async def discovery_state(client: Client, group: str, version: str, plural: str) -> str:
    """SERVED: discovery lists the kind. ABSENT: no CRD serves it (kopf picks it up when one does).
    PENDING: a built-in kind, or one whose CRD serves it, is not listed yet, or the API server does not
    answer."""
    try:
        if await _listed(client, group, version, plural):
            return SERVED
    except ApiError as err:
        if err.status != 404 or group in BUILTIN:
            return PENDING
    except _NETWORK_ERRORS:
        return PENDING
    if group in BUILTIN:
        return PENDING  # always served once the API server is up
    try:
        crd: Any = await client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{group}")
    except ApiError as err:
        # 404: not installed; 403: we may not read CRDs (then we cannot tell, and do not hold up the start).
        return PENDING if err.status >= 500 or err.status == 429 else ABSENT
    except _NETWORK_ERRORS:
        return PENDING
    versions = ((crd or {}).get("spec") or {}).get("versions") or []
    return PENDING if any(v.get("name") == version and v.get("served") for v in versions) else ABSENT


async def wait_until_served(
    client: Client, kinds: Iterable[tuple[str, str, str]], *, pause: float = 0.2, most: float = 2.0
) -> None:
    """Returns once every (group, version, plural) is SERVED or ABSENT; retries every `pause` seconds,
    doubling up to `most`, and says every ~10 s what it waits for."""
    for group, version, plural in kinds:
        delay = pause
        said = 0.0
        while (state := await discovery_state(client, group, version, plural)) == PENDING:
            if not said:
                log.info("waiting for the API server to serve %s/%s %s (discovery)", group, version, plural)
                said = time.monotonic()
            elif time.monotonic() - said >= 10:
                log.warning("waiting for the API server to serve %s/%s %s (discovery)", group, version, plural)
                said = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(most, delay * 2)
        if state == ABSENT:
            log.warning(
                "%s/%s %s is not served (no CRD): it is watched once its CRD is created", group, version, plural
            )
