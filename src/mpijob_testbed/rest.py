"""A minimal synchronous JSON client for the API server and the components' health endpoints.

`up`/`down` are plain synchronous code (they run from the CLI and from pytest's synchronous fixture
setup), so they talk HTTP with the standard library instead of starting an asyncio loop of their own.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Verify the server against the testbed CA; present a client certificate when given one."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key) if key is not None else None)
    return ctx


def _opener(ctx: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    # No ProxyHandler entries: loopback traffic must never go through an HTTP(S)_PROXY from the environment.
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ctx is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    return urllib.request.build_opener(*handlers)


def get_status(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 3.0) -> int | None:
    """HTTP status of GET `url`, or None when nothing answers (refused, reset, TLS not up yet)."""
    try:
        with _opener(ctx).open(urllib.request.Request(url), timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return None


class Rest:
    """JSON requests against one API server with one TLS identity."""

    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self.server = server.rstrip("/")
        self._opener = _opener(ctx)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None); HTTP errors are returned, not raised."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                return int(resp.status), _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), _decode(exc.read())

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self.request("POST", path, body)

    def delete(self, path: str) -> tuple[int, Any]:
        return self.request("DELETE", path)


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
