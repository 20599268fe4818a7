"""The few ASGI pieces OLP needs, written out plainly (no framework on the hot path)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from olp.errors import RequestTimeout, RequestTooLarge

__all__ = [
    "ClientGone",
    "DisconnectWatch",
    "Headers",
    "Receive",
    "Request",
    "Scope",
    "Send",
    "send_bytes",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client disconnected while we were still reading its request."""


class Request:
    __slots__ = ("_headers", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self.receive = receive
        self._headers: dict[bytes, bytes] | None = None

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    def header(self, name: bytes) -> bytes | None:
        if self._headers is None:
            # Last one wins, as most frameworks do; names are lower-case in ASGI.
            self._headers = dict(self.scope["headers"])
        return self._headers.get(name)

    @property
    def client_host(self) -> str | None:
        client = self.scope.get("client")
        return str(client[0]) if client else None

    def is_loopback(self) -> bool:
        host = self.client_host or ""
        return host == "::1" or host.startswith("127.") or host == "localhost"

    async def body(self, limit: int, timeout_s: float) -> bytes:
        """The whole body within `timeout_s`, refusing more than `limit` bytes."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._body(limit)
        except TimeoutError:
            raise RequestTimeout(
                f"Request body not received within {timeout_s:g}s "
                "(server.body_timeout_s in config.json)."
            ) from None

    async def _body(self, limit: int) -> bytes:
        declared = self.header(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(_too_large(limit))
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise RequestTooLarge(_too_large(limit))
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> str:
    return (
        f"Request body too large: the limit is {limit} bytes "
        "(server.max_body_bytes in config.json)."
    )


async def send_bytes(send: Send, status: int, headers: Headers, body: bytes) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DisconnectWatch:
    """Cancels the handling task when the client goes away mid-response.

    Cancellation then unwinds the provider stream, which closes the upstream connection
    or kills the CLI. The news is an `http.disconnect` from `receive()` (ASGI's way), so a
    small task waits on it once the body is read.
    """

    __slots__ = ("_active", "_receive", "_spawn", "_task", "_watcher", "disconnected")

    def __init__(self, req: Request) -> None:
        self._task = asyncio.current_task()
        self._active = True
        self.disconnected = False
        self._receive: Receive | None = req.receive
        self._watcher: asyncio.Task[None] | None = None
        # The watcher task starts on the loop's next turn: a handler that finishes
        # without ever waiting (a cache hit) never pays for a task it did not need.
        self._spawn: asyncio.Handle | None = asyncio.get_running_loop().call_soon(self._start)

    def _gone(self) -> None:
        if self._active and self._task is not None:
            self.disconnected = True
            self._task.cancel()

    def _start(self) -> None:
        self._spawn = None
        if self._active and self._receive is not None:
            self._watcher = asyncio.ensure_future(self._watch(self._receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._gone()
                return

    def stop(self) -> None:
        # Also let go of the request: the watch, the task and the connection's request
        # cycle refer to one another (through `receive`), and a cycle of them would wait for
        # the garbage collector instead of going when the request ends.
        self._active = False
        self._task = None
        self._receive = None
        if self._spawn is not None:
            self._spawn.cancel()
            self._spawn = None
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
