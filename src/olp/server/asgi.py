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
    "ReadDeadlines",
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


class ReadDeadlines:
    """Deadlines for reading request bodies, kept by one timer for all requests.

    `asyncio.timeout()` per request costs a timer, a handle and a context manager (about
    5 µs, a few % of a cache hit); almost every body has arrived by the time we ask. Here a
    request only enters a dict, and a single timer, set for the earliest deadline, cancels
    the requests whose body is late.
    """

    __slots__ = ("_expired", "_timer", "_timer_at", "_waiting")

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def enter(self, task: asyncio.Task[Any], timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self._waiting[task] = deadline
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)

    def leave(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching `task`; True if its deadline passed (and it was cancelled for it)."""
        self._waiting.pop(task, None)
        if task in self._expired:
            self._expired.discard(task)
            return True
        return False

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire)
        self._timer_at = when

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in list(self._waiting.items()):
            if deadline <= now:
                del self._waiting[task]
                self._expired.add(task)
                task.cancel()
        if self._waiting:
            self._arm(loop, min(self._waiting.values()))


class Request:
    __slots__ = ("_deadlines", "_headers", "receive", "scope")

    def __init__(
        self, scope: Scope, receive: Receive, deadlines: ReadDeadlines | None = None
    ) -> None:
        self.scope = scope
        self.receive = receive
        self._headers: dict[bytes, bytes] | None = None
        self._deadlines = deadlines if deadlines is not None else ReadDeadlines()

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
        task = asyncio.current_task()
        if task is None:  # not in a task (never under an ASGI server): no deadline
            return await self._body(limit)
        self._deadlines.enter(task, timeout_s)
        try:
            return await self._body(limit)
        except asyncio.CancelledError:
            if not self._deadlines.leave(task):
                raise
            task.uncancel()
            raise RequestTimeout(
                f"Request body not received within {timeout_s:g}s "
                "(server.body_timeout_s in config.json)."
            ) from None
        finally:
            self._deadlines.leave(task)

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

    ASGI servers tell us only through `receive()`, so once the body is read a small task
    waits on it. Cancellation then unwinds the provider stream, which closes the
    upstream connection or kills the CLI.
    """

    __slots__ = ("_active", "_receive", "_spawn", "_task", "_watcher", "disconnected")

    def __init__(self, receive: Receive) -> None:
        self._task = asyncio.current_task()
        self._active = True
        self.disconnected = False
        self._receive = receive
        self._watcher: asyncio.Task[None] | None = None
        # The watcher task starts on the loop's next turn: a handler that finishes without
        # ever waiting (a cache hit) never pays for a task it did not need.
        self._spawn: asyncio.Handle | None = asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._spawn = None
        if self._active:
            self._watcher = asyncio.ensure_future(self._watch(self._receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self._active and self._task is not None:
                    self.disconnected = True
                    self._task.cancel()
                return

    def stop(self) -> None:
        self._active = False
        if self._spawn is not None:
            self._spawn.cancel()
            self._spawn = None
        if self._watcher is not None:
            self._watcher.cancel()
