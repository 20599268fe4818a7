"""`POST /v1/chat/completions`: parse → route → run the chain → answer, streamed or not."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from olp.engine import Chain, FallbackEngine, Served
from olp.errors import ChainFailed, OLPError, UnsupportedMediaType
from olp.ir import ChatRequest, ResponseBuilder
from olp.observability import event_logger
from olp.server.asgi import ClientGone, DisconnectWatch, Headers, Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.meta import ResponseMeta
from olp.wire.openai_chat import ChunkEncoder, completion_body, error_body, parse_chat_request

__all__ = ["chat_completions"]

log = event_logger("olp.server")

_JSON = (b"content-type", b"application/json")
_SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(slots=True)
class _Exchange:
    """One chat request in flight: what we know so far, and whether headers went out."""

    ctx: AppContext
    send: Send
    meta: ResponseMeta
    started: bool = False

    async def start_sse(self) -> None:
        headers = [*_SSE_HEADERS, *self.meta.headers(self.ctx.config.auth)]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        self.started = True

    async def frame(self, data: bytes, *, last: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": not last})

    async def fail(self, err: OLPError) -> None:
        self.meta.note_failure(err)
        if self.started:
            # Headers are out (heartbeat): the error travels as a final SSE frame.
            await self.frame(error_frame(err), last=True)
            return
        headers = [_JSON, *self.meta.headers(self.ctx.config.auth, err)]
        await send_bytes(self.send, err.http_status, headers, error_body(err))


def error_frame(err: OLPError) -> bytes:
    return b"data: " + error_body(err) + b"\n\n"


async def chat_completions(ctx: AppContext, req: Request, send: Send) -> None:
    ex = _Exchange(ctx, send, ResponseMeta())
    watch: DisconnectWatch | None = None
    try:
        ex.meta.identity = ctx.auth.authenticate(ctx.token(req))
        content_type = req.header(b"content-type") or b""
        if b"application/json" not in content_type.lower():
            raise UnsupportedMediaType(
                "Content-Type must be application/json "
                f"(got {content_type.decode('latin-1') or 'none'!r})."
            )
        server = ctx.config.server
        body = await req.body(server.max_body_bytes, server.body_timeout_s)
        request = parse_chat_request(body)
        ex.meta.model = request.model
        chain = ctx.authorize(ex.meta.identity, ctx.router.resolve(request.model))
        watch = DisconnectWatch(req.receive)
        if request.stream:
            await _stream(ex, chain, request)
        else:
            await _complete(ex, chain, request)
    except OLPError as err:
        await ex.fail(err)
    except ClientGone:
        log.info("client_disconnected", request_id=ex.meta.request_id)
    except asyncio.CancelledError:
        if watch is None or not watch.disconnected:
            raise
        _uncancel()
        log.info("client_disconnected", request_id=ex.meta.request_id)
    except Exception:
        log.error("unhandled_error", request_id=ex.meta.request_id, exc_info=True)
        await ex.fail(
            OLPError(f"Internal server error; see the OLP log for request {ex.meta.request_id}.")
        )
    finally:
        if watch is not None:
            watch.stop()


def _uncancel() -> None:
    # The cancel came from our DisconnectWatch, not from shutdown: swallow it.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def _complete(ex: _Exchange, chain: Chain, request: ChatRequest) -> None:
    served = await ex.ctx.engine.open(chain, request, ex.meta.request_id)
    try:
        builder = ResponseBuilder()
        async for event in served.events():
            builder.add(event)
    finally:
        await served.aclose()
    _note_served(ex.meta, served)
    body = completion_body(builder.build(), _completion_id(ex), request.model, int(time.time()))
    await send_bytes(ex.send, 200, [_JSON, *ex.meta.headers(ex.ctx.config.auth)], body)


async def _stream(ex: _Exchange, chain: Chain, request: ChatRequest) -> None:
    try:
        served = await _open_with_heartbeat(ex, ex.ctx.engine, chain, request)
    except ChainFailed as err:
        await ex.fail(err)
        return
    _note_served(ex.meta, served)
    encoder = ChunkEncoder(
        _completion_id(ex), request.model, int(time.time()), request.include_usage
    )
    try:
        if not ex.started:
            await ex.start_sse()
        async for event in served.events():
            data = encoder.encode(event)
            if data:
                await ex.frame(data)
        await ex.frame(encoder.done(), last=True)
    finally:
        await served.aclose()


async def _open_with_heartbeat(
    ex: _Exchange, engine: FallbackEngine, chain: Chain, request: ChatRequest
) -> Served:
    """Run the chain; if it is slow to produce content, keep the client's line alive.

    A keepalive is not content (DESIGN §5 rule 2): fallback goes on behind it. The
    heartbeat task only exists once the first interval has passed, so the common fast
    path costs one timer.
    """
    interval = ex.ctx.config.server.heartbeat_interval_ms / 1000
    beats: list[asyncio.Task[None]] = []
    timer = asyncio.get_running_loop().call_later(
        interval, lambda: beats.append(asyncio.ensure_future(_heartbeat(ex, interval)))
    )
    try:
        return await engine.open(chain, request, ex.meta.request_id)
    finally:
        timer.cancel()
        for beat in beats:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)


async def _heartbeat(ex: _Exchange, interval: float) -> None:
    if not ex.started:
        await ex.start_sse()
    while True:
        await ex.frame(b": keepalive\n\n")
        await asyncio.sleep(interval)


def _note_served(meta: ResponseMeta, served: Served) -> None:
    meta.provider = served.hop.name
    meta.model = served.hop.model
    meta.hops = served.hop.index
    meta.failures = served.failures


def _completion_id(ex: _Exchange) -> str:
    return "chatcmpl-" + ex.meta.request_id.removeprefix("req_")
