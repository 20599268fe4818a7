"""Shared HTTP machinery for HTTP providers.

One `HttpClient` per provider owns one pooled aiohttp session (created lazily inside the
running loop) and enforces OLP's own deadlines: aiohttp only bounds the socket connect;
first byte, idle and total are checked here so each expiry names which one fired.
Every aiohttp/OS failure is mapped to the trigger taxonomy at one boundary
(`upstream_errors`); non-2xx answers go through `error_for_status`.

The pool itself is unbounded; `max_concurrent`, when configured, is a slot a request
takes before it is sent. Waiting for a slot has its own deadline and its own error
(`CONCURRENCY_LIMIT`: the request was never sent), so time in the queue is never
reported as an upstream that did not answer.

A call is an async context manager, so leaving it early (the consumer stopped iterating,
the task was cancelled because the client went away) closes the upstream connection
instead of returning a half-read one to the pool: the upstream sees the disconnect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from olp.config.model import Timeouts
from olp.errors import Failure, ProviderError
from olp.providers._http_errors import ERROR_BODY_CAP, QuotaMemory, error_for_status
from olp.providers.base import QuotaSnapshot
from olp.wire.sse import SSEDecoder, SSEMessage

__all__ = [
    "BODY_CAP",
    "SSE_LINE_CAP",
    "HttpClient",
    "UpstreamCall",
    "error_for_status",
    "stream_ended_early",
    "upstream_errors",
]

BODY_CAP = 32 * 1024 * 1024
SSE_LINE_CAP = 1024 * 1024
# Idle pooled connections are dropped before the shortest common server idle timeout
# (uvicorn and Node close after 5 s): aiohttp never retries a POST on a connection the
# server closed meanwhile, so a stale one would be a spurious TRANSPORT failure.
_KEEPALIVE_S = 4.0
# After a terminal event, how long to wait for the end of the body so the connection can
# go back to the pool; a slower upstream just gets its connection closed.
_DRAIN_S = 0.25


@contextmanager
def upstream_errors(provider: str, *, mid_body: bool = False) -> Iterator[None]:
    """Map aiohttp/OS failures to the taxonomy, chained with `from exc`.

    `mid_body`: the response had started, so a broken connection means the upstream
    stopped before finishing its answer.
    """
    try:
        yield
    except ProviderError:
        raise
    except aiohttp.ConnectionTimeoutError as exc:
        raise ProviderError(
            Failure.TIMEOUT, f"upstream timeout: could not connect ({exc})", provider=provider
        ) from exc
    except TimeoutError as exc:
        raise ProviderError(
            Failure.TIMEOUT, f"upstream timeout: {str(exc) or 'timed out'}", provider=provider
        ) from exc
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        if not mid_body and isinstance(exc, aiohttp.ServerDisconnectedError):
            raise ProviderError(
                Failure.TRANSPORT, f"upstream closed the connection: {exc}", provider=provider
            ) from exc
        raise stream_ended_early(provider, exc) from exc
    except (aiohttp.ClientError, OSError) as exc:
        what = "connection lost" if mid_body else "connection failed"
        raise ProviderError(
            Failure.TRANSPORT,
            f"upstream {what}: {str(exc) or type(exc).__name__}",
            provider=provider,
        ) from exc


def stream_ended_early(provider: str, cause: BaseException | None = None) -> ProviderError:
    """The body ended (connection closed) before the protocol's terminal event."""
    detail = f" ({cause})" if cause is not None and str(cause) else ""
    return ProviderError(
        Failure.TRANSPORT, f"upstream stream ended before completion{detail}", provider=provider
    )


class HttpClient:
    """One provider's pooled session, concurrency slots, deadlines and quota memory."""

    __slots__ = ("_headers", "_quota", "_session", "_slots", "limit", "name", "queued", "timeouts")

    def __init__(
        self,
        name: str,
        timeouts: Timeouts,
        *,
        headers: Mapping[str, str],
        limit: int | None = None,
    ) -> None:
        self.name = name
        self.timeouts = timeouts
        # Sent with every request as session defaults, so no per-request header merge.
        self._headers = {"Content-Type": "application/json", **headers}
        self.limit = limit
        self._slots = asyncio.Semaphore(limit) if limit else None
        self.queued = 0  # requests that had to wait for a slot, since start
        self._session: aiohttp.ClientSession | None = None
        self._quota = QuotaMemory()

    def session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=0,  # unbounded: `max_concurrent` is enforced by the slots instead
                limit_per_host=0,
                keepalive_timeout=_KEEPALIVE_S,
                ttl_dns_cache=300,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.timeouts.connect_ms / 1000.0
                ),
                # No cookies: one member's upstream session must never leak into another's.
                cookie_jar=aiohttp.DummyCookieJar(),
                # config is the only module that reads the environment (docs/design.md §2).
                trust_env=False,
            )
            self._session = session
        return session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def acquire(self) -> None:
        """Take one of `max_concurrent` slots (no-op without a limit); `release()` it after.

        Waits at most `first_byte_ms` (or `total_ms` if shorter), then raises
        `CONCURRENCY_LIMIT`: the request was never sent, so the next hop may take it.
        """
        slots = self._slots
        if slots is None:
            return
        if not slots.locked():
            await slots.acquire()  # free: returns at once
            return
        self.queued += 1
        wait_ms = min(self.timeouts.first_byte_ms, self.timeouts.total_ms)
        try:
            async with asyncio.timeout(wait_ms / 1000.0):
                await slots.acquire()
        except TimeoutError:
            raise ProviderError(
                Failure.CONCURRENCY_LIMIT,
                f"no connection slot free within {wait_ms} ms ({self.name} is at "
                f"max_concurrent={self.limit}); the request was not sent",
                provider=self.name,
            ) from None

    def release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def post(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> UpstreamCall:
        """`async with client.post(url, body) as call:` — raises for non-2xx answers.

        `headers`: this request's own, added to the client's."""
        return UpstreamCall(self, url, body, headers)

    def quota(self) -> QuotaSnapshot | None:
        return self._quota.snapshot()

    def note_headers(self, headers: Mapping[str, str]) -> None:
        self._quota.note(headers)

    async def probe(self, url: str, timeout_s: float) -> tuple[int | None, str | None, float]:
        """GET `url` once: (status or None, what went wrong or None, latency in ms)."""
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                async with self.session().get(url, allow_redirects=False) as resp:
                    status = resp.status
                    self.note_headers(resp.headers)
        except TimeoutError:
            return None, f"no answer within {timeout_s:g} s", _ms_since(start)
        except (aiohttp.ClientError, OSError) as exc:
            return None, str(exc) or type(exc).__name__, _ms_since(start)
        return status, None, _ms_since(start)


def _ms_since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 1)


class UpstreamCall:
    """One POST, its response, and OLP's deadlines for reading it."""

    __slots__ = (
        "_body",
        "_client",
        "_decoder",
        "_eof",
        "_first_at",
        "_has_slot",
        "_headers",
        "_resp",
        "_total_at",
        "_url",
    )

    def __init__(
        self,
        client: HttpClient,
        url: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._url = url
        self._body = body
        self._headers = headers
        self._resp: aiohttp.ClientResponse | None = None
        self._decoder: SSEDecoder | None = None
        self._eof = False
        self._has_slot = False
        # Deadlines on the loop clock; the first-byte one also covers connect and headers.
        self._first_at: float | None = 0.0
        self._total_at = 0.0

    async def __aenter__(self) -> UpstreamCall:
        client = self._client
        t = client.timeouts
        self._total_at = asyncio.get_running_loop().time() + t.total_ms / 1000.0
        await client.acquire()
        self._has_slot = True
        try:
            await self._send()
        except BaseException:
            self._let_go()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._let_go(done=exc_type is None)

    async def _send(self) -> None:
        """Send the request (the slot is held) and take the status line and headers."""
        client = self._client
        # The first-byte deadline starts once the request may go: queueing is not counted.
        self._first_at = asyncio.get_running_loop().time() + client.timeouts.first_byte_ms / 1000.0
        with upstream_errors(client.name):
            try:
                async with asyncio.timeout_at(min(self._first_at, self._total_at)) as deadline:
                    resp = await client.session().post(
                        self._url, data=self._body, headers=self._headers, allow_redirects=False
                    )
            except TimeoutError as exc:
                if deadline.expired():  # ours, not aiohttp's connect timeout
                    raise self._timed_out(self._first_at) from exc
                raise
        self._resp = resp
        client.note_headers(resp.headers)
        if not 200 <= resp.status < 300:
            try:
                body = await self._read_capped(ERROR_BODY_CAP, truncate=True)
            except ProviderError:
                body = b""  # the status says enough; a body that never comes changes nothing
            raise error_for_status(client.name, resp.status, resp.headers, body)

    def _let_go(self, *, done: bool = False) -> None:
        """Give back the connection (to the pool only if fully read) and the slot."""
        resp, self._resp = self._resp, None
        if resp is not None:
            # A fully read answer, even an error (a 429 storm should not also cost a TLS
            # handshake per attempt), keeps its connection; a half-read, failed or
            # abandoned one is closed, never handed to the pool.
            if self._eof and (done or not 200 <= resp.status < 300):
                resp.release()
            else:
                resp.close()
        if self._has_slot:
            self._has_slot = False
            self._client.release()

    @property
    def is_event_stream(self) -> bool:
        return self._response().content_type == "text/event-stream"

    async def read_json(self) -> Any:
        """The whole body as JSON, within BODY_CAP; UPSTREAM_ERROR if malformed."""
        resp = self._response()
        declared = resp.content_length
        if declared is not None and declared > BODY_CAP:
            raise self._too_large()
        body = await self._read_capped(BODY_CAP, truncate=False)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            snippet = body[:120].decode("utf-8", "replace")
            raise ProviderError(
                Failure.UPSTREAM_ERROR,
                f"malformed response from upstream: {exc}; body starts {snippet!r}",
                provider=self._client.name,
            ) from exc

    async def next_messages(self) -> list[SSEMessage] | None:
        """The SSE messages the next network read completed; None at the end of the body."""
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = SSEDecoder(SSE_LINE_CAP)
        while not self._eof:
            chunk = await self._read()
            if messages := self._decode(decoder, chunk):
                return messages
        return None

    def _decode(self, decoder: SSEDecoder, chunk: bytes) -> list[SSEMessage]:
        """The messages `chunk` completes, and at the end of the body the last one."""
        try:
            messages = decoder.feed(chunk) if chunk else []
            return messages + decoder.flush() if self._eof else messages
        except ValueError as exc:
            raise ProviderError(
                Failure.UPSTREAM_ERROR,
                f"upstream sent an SSE line over {SSE_LINE_CAP // 1024} KiB",
                provider=self._client.name,
            ) from exc

    async def finish(self) -> None:
        """The terminal event arrived: take the end of the body so the connection is reused.

        Never raises: if the end does not come promptly the connection is closed on exit.
        """
        content = self._response().content
        if self._eof or content.at_eof():  # (usually: the end came with the last event)
            self._eof = True
            return
        try:
            async with asyncio.timeout(_DRAIN_S):
                for _ in range(4):
                    if content.at_eof():
                        self._eof = True
                        return
                    if not await content.readany():
                        self._eof = True
                        return
        except (TimeoutError, aiohttp.ClientError, OSError):
            return

    def _response(self) -> aiohttp.ClientResponse:
        if self._resp is None:
            raise RuntimeError("UpstreamCall used outside `async with`")
        return self._resp

    async def _read(self) -> bytes:
        """One read of whatever arrived, within the first-byte or idle deadline."""
        loop = asyncio.get_running_loop()
        step_at = self._first_at
        if step_at is None:
            step_at = loop.time() + self._client.timeouts.idle_ms / 1000.0
        with upstream_errors(self._client.name, mid_body=True):
            try:
                async with asyncio.timeout_at(min(step_at, self._total_at)) as deadline:
                    chunk = await self._response().content.readany()
            except TimeoutError as exc:
                if deadline.expired():
                    raise self._timed_out(step_at) from exc
                raise
        self._first_at = None
        # The end is known as soon as the last chunk is read (a body with a length usually
        # ends in that chunk): no further read, and no further deadline, is needed.
        if not chunk or self._response().content.at_eof():
            self._eof = True
        return chunk

    async def _read_capped(self, cap: int, *, truncate: bool) -> bytes:
        parts: list[bytes] = []
        size = 0
        while not self._eof:
            chunk = await self._read()
            size += len(chunk)
            if size > cap:
                if truncate:
                    parts.append(chunk[: len(chunk) - (size - cap)])
                    break
                raise self._too_large()
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _too_large(self) -> ProviderError:
        return ProviderError(
            Failure.UPSTREAM_ERROR,
            f"upstream response larger than {BODY_CAP // (1024 * 1024)} MiB",
            provider=self._client.name,
        )

    def _timed_out(self, step_at: float) -> ProviderError:
        t = self._client.timeouts
        if self._total_at <= step_at:
            what = f"response not complete within {t.total_ms} ms (total)"
        elif self._first_at is not None:
            what = f"first byte not received within {t.first_byte_ms} ms"
        else:
            what = f"no data for {t.idle_ms} ms (idle)"
        return ProviderError(
            Failure.TIMEOUT, f"upstream timeout: {what}", provider=self._client.name
        )
