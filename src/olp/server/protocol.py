"""uvicorn's httptools protocol, with writes coalesced per event-loop iteration.

It also tells the app at once when a client goes away mid-response (`DISCONNECT_HOOKS`),
so a request need not keep a task waiting on `receive()` just to find out.

uvicorn writes the status line and every body chunk with its own `transport.write()`,
and each is a `send()` syscall. A streamed answer is a dozen small SSE frames, and a JSON
answer is headers + body: measured under load, those syscalls were the largest single cost
in OLP (`docs/performance.md`). Frames produced in the same loop iteration (the headers
and the body; the events of one upstream read) now leave in one write, at the end of that
iteration — far fewer syscalls. A complete response that is the only one in progress
leaves at once instead, so a lone client does not wait for the next iteration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["DISCONNECT_HOOKS", "CoalescingHttpToolsProtocol", "CoalescingTransport"]

# Scope key: a list the app may add callbacks to; they run when the connection is lost
# before the response is complete. Absent under other servers (see `DisconnectWatch`).
DISCONNECT_HOOKS = "olp.disconnect_hooks"


class CoalescingTransport:
    """Buffers `write()`s and flushes them once per loop iteration; the rest passes through."""

    __slots__ = ("_buffer", "_loop", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._buffer: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._buffer.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_scheduled)

    def _flush_scheduled(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Write what is buffered now."""
        if not self._buffer:
            return
        data = self._buffer[0] if len(self._buffer) == 1 else b"".join(self._buffer)
        self._buffer.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._buffer.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._buffer))

    # Written out rather than left to `__getattr__`: uvicorn asks `is_closing()` once per
    # response and `get_extra_info()` several times per connection; `__getattr__` runs
    # only after the normal lookup has built an AttributeError and thrown it away.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        # pause_reading, resume_reading, set_protocol, …
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast.
        self._coalescing = CoalescingTransport(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(cast(Any, self._coalescing))

    def on_response_complete(self) -> None:
        # The response is whole. If it is the only one in progress, it leaves now: waiting
        # for the end of the loop iteration would cost a lone client an iteration of
        # latency (1 connection: 132 -> 96 µs per cache hit). Under load it waits, so
        # that responses finishing together leave together (64 connections: 15 % more
        # hits per second than flushing each at once).
        if len(self.tasks) <= 1:
            self._coalescing.flush()
        super().on_response_complete()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        hooks: list[Callable[[], None]] = []
        cast(dict[str, Any], self.scope)[DISCONNECT_HOOKS] = hooks

    def connection_lost(self, exc: Exception | None) -> None:
        # uvicorn types it as always set, but it is None until the first request arrives.
        cycle: RequestResponseCycle | None = self.cycle
        gone_mid_response = cycle is not None and not cycle.response_complete
        super().connection_lost(exc)
        if cycle is not None and gone_mid_response:
            for hook in cast(dict[str, Any], cycle.scope).get(DISCONNECT_HOOKS, ()):
                hook()
