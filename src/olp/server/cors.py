"""CORS: which web pages may call OLP from a browser (`server.cors_origins`).

A pure ASGI middleware. For a request from an allowed origin it answers the browser's
preflight (`OPTIONS` with `Access-Control-Request-Method`) itself, 204, naming the methods
and the request headers the OpenAI and Anthropic SDKs send; and it adds the CORS headers
to every other response, exposing OLP's own headers (`X-OLP-*`, `Retry-After`,
`x-request-id`) to the page's script. A request from any other origin passes through
untouched: without these headers the browser keeps the answer from the page.

The allowed origin is echoed (with `Vary: Origin`), also for `"*"`, which the
configuration allows only when every request needs a key: no cookie authenticates to OLP,
so a page can only use a key its user gave it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from olp.server.asgi import Headers, Receive, Scope, Send

__all__ = ["CorsMiddleware"]

_App = Callable[[Scope, Receive, Send], Awaitable[None]]

_METHODS = b"GET, POST, DELETE, OPTIONS"
# What the openai and anthropic SDKs (and OLP's own options) send from a browser.
_ALLOWED_HEADERS = frozenset(
    {
        "authorization",
        "content-type",
        "x-api-key",
        "anthropic-version",
        "anthropic-beta",
        "anthropic-dangerous-direct-browser-access",
        "openai-beta",
        "openai-organization",
        "openai-project",
        "cache-control",
        "x-olp-cache",
    }
)
_ALLOWED_PREFIX = "x-stainless-"  # the SDKs' platform headers: x-stainless-os, -arch, ...
_EXPOSED = (
    b"x-olp-request-id, x-olp-provider-used, x-olp-model-used, x-olp-fallback-hops, "
    b"x-olp-cache, x-olp-latency-ms, x-olp-fallback-exhausted, x-olp-fallback-detail, "
    b"retry-after, x-request-id"
)
_MAX_AGE = b"600"


class CorsMiddleware:
    """Wraps an ASGI app; `origins` as configured (non-empty)."""

    __slots__ = ("_any", "_app", "_origins")

    def __init__(self, app: _App, origins: tuple[str, ...]) -> None:
        self._app = app
        self._any = "*" in origins
        self._origins = frozenset(o.encode() for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None or not (self._any or origin in self._origins):
            await self._app(scope, receive, send)
            return
        requested = _header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and requested is not None:
            await _preflight(scope, send, origin)
            return
        await self._app(scope, receive, _with_cors(send, origin))


async def _preflight(scope: Scope, send: Send, origin: bytes) -> None:
    headers: Headers = [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-methods", _METHODS),
        (b"access-control-max-age", _MAX_AGE),
        (b"vary", b"Origin, Access-Control-Request-Headers"),
        (b"content-length", b"0"),
    ]
    allowed = _allowed_headers(_header(scope, b"access-control-request-headers"))
    if allowed:
        headers.append((b"access-control-allow-headers", allowed))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _allowed_headers(requested: bytes | None) -> bytes:
    """The requested headers OLP accepts (a browser refuses the request if one is left out)."""
    if not requested:
        return b""
    names = (n.strip().lower() for n in requested.decode("latin-1").split(","))
    kept = [n for n in names if n in _ALLOWED_HEADERS or n.startswith(_ALLOWED_PREFIX)]
    return ", ".join(kept).encode("latin-1")


def _with_cors(send: Send, origin: bytes) -> Send:
    extra = [
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", _EXPOSED),
        (b"vary", b"Origin"),
    ]

    async def send_with_cors(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), *extra]
        await send(message)

    return send_with_cors


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
