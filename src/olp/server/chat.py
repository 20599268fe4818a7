"""The one request pipeline: parse → route → run the chain → answer, streamed or not.

Every generating route (`/v1/chat/completions`, `/v1/messages`, …) is this handler with
its wire's `Dialect`, which parses the body into the IR and writes the answer and errors
back in the wire's shape. Everything between (keys, limits, routing, fallback, the
first-chunk rule, the cache, heartbeats, the ledger, the X-OLP-* headers) is the same for
all of them and knows no dialect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from olp.accounts import Identity
from olp.cache import CacheHop, ResponseCache, cache_policy, request_fingerprint
from olp.cache.reuse import OPT_IN_HEADER, may_reuse
from olp.engine import CacheScope, Chain, HopGate, HopSource, Served
from olp.errors import ChainFailed, OLPError, ShuttingDown, UnsupportedMediaType
from olp.ir import ChatRequest, ChatResponse, Event, Finish, ResponseBuilder, Usage
from olp.observability import event_logger
from olp.server.asgi import ClientGone, DisconnectWatch, Headers, Request, Send, send_bytes
from olp.server.context import AppContext, Snapshot
from olp.server.meta import ResponseMeta
from olp.server.outcome import RequestOutcome
from olp.server.share_gate import share_gate
from olp.wire.dialect import Dialect, StreamEncoder

__all__ = ["DialectHandler", "handle", "read_json_body", "serve"]

log = event_logger("olp.server")

_JSON = (b"content-type", b"application/json")
_SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


DialectHandler = Callable[[AppContext, Request, Send], Awaitable[None]]


def serve(dialect: Dialect) -> DialectHandler:
    """The route handler that answers in `dialect`."""

    async def route(ctx: AppContext, req: Request, send: Send) -> None:
        await handle(ctx, req, send, dialect)

    return route


@dataclass(slots=True)
class _Exchange:
    """One request in flight: what we know so far, and whether headers went out."""

    ctx: AppContext
    live: Snapshot  # read once, at the request's start: a config reload swaps in another
    send: Send
    meta: ResponseMeta
    dialect: Dialect
    encoder: StreamEncoder | None = None  # a streamed answer's, once it is known
    started: bool = False
    stream: bool = False
    requested: str = "unknown"
    status: int = 200
    error: OLPError | None = None
    usage: Usage | None = None
    ttft_ms: float | None = None
    served: Served | None = None
    holding: str | None = None  # the key whose concurrent slot this request holds
    client_left: bool = False

    async def start_sse(self, encoder: StreamEncoder) -> None:
        headers = [*_SSE_HEADERS, *self.meta.headers(self.live.config.auth)]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        self.started = True
        opening = encoder.start()
        if opening:
            await self.frame(opening)

    async def frame(self, data: bytes, *, last: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": not last})

    async def fail(self, err: OLPError) -> None:
        self.meta.note_failure(err)
        # Kept for the ledger, which wants its code and message only: its traceback holds
        # the handler's frame, which holds this exchange, a cycle that would outlive the
        # request (a client hammering a 401 or a 429 would feed the garbage collector).
        self.error = err.with_traceback(None)
        self.status = 200 if self.started else err.http_status
        if self.started and self.encoder is not None:
            # Headers are out (heartbeat): the error travels as a final SSE frame.
            await self.frame(self.encoder.error_frame(err), last=True)
            return
        headers = [_JSON, *self.meta.headers(self.live.config.auth, err)]
        await send_bytes(self.send, err.http_status, headers, self.dialect.error_body(err))


async def handle(ctx: AppContext, req: Request, send: Send, dialect: Dialect) -> None:
    """Answer one generating request in `dialect`; nothing escapes but a shutdown's cancel."""
    ex = _Exchange(ctx, ctx.live, send, ResponseMeta(), dialect)
    watch: DisconnectWatch | None = None
    ctx.metrics.request_started()
    try:
        identity = ex.meta.identity = ctx.auth.authenticate(ctx.token(req))
        body = await read_json_body(ex.live, req)
        request = dialect.parse(body)
        ex.meta.model, ex.stream = request.model, request.stream
        ex.requested = request.model
        chain = ex.live.authorize(identity, ex.live.router.resolve(request.model))
        _admit(ex, identity)
        watch = DisconnectWatch(req)
        scope = _cache_scope(ex, req, identity, body, request)
        ex.meta.cache = "miss" if scope is not None and scope.lookup else "bypass"
        if request.stream:
            await _stream(ex, chain, request, scope)
        else:
            await _complete(ex, chain, request, scope)
    except OLPError as err:
        await ex.fail(err)
    except ClientGone:
        log.info("client_disconnected", request_id=ex.meta.request_id)
    except asyncio.CancelledError:
        # The cancel came from our DisconnectWatch, or from the server stopping past
        # server.shutdown_grace_s: either way this handler still ends the request itself.
        _uncancel()
        if watch is not None and watch.disconnected:
            ex.client_left = True
            log.info("client_disconnected", request_id=ex.meta.request_id)
        else:
            await _cut_by_shutdown(ex)
    except Exception:
        log.error("unhandled_error", request_id=ex.meta.request_id, exc_info=True)
        await ex.fail(
            OLPError(f"Internal server error; see the OLP log for request {ex.meta.request_id}.")
        )
    finally:
        if watch is not None:
            watch.stop()
        if ex.holding is not None:
            ctx.limits.release(ex.holding)
        ctx.metrics.request_ended()
        _finished(ex)


async def read_json_body(live: Snapshot, req: Request) -> bytes:
    """The request's body, once its content type is JSON, within the server's limits."""
    content_type = req.header(b"content-type") or b""
    if b"application/json" not in content_type.lower():
        raise UnsupportedMediaType(
            "Content-Type must be application/json "
            f"(got {content_type.decode('latin-1') or 'none'!r}); "
            "with curl, add -H 'Content-Type: application/json'."
        )
    server = live.config.server
    return await req.body(server.max_body_bytes, server.body_timeout_s)


def _admit(ex: _Exchange, identity: Identity) -> None:
    """Let the request in under its key's limits (429 key_limit_exceeded, with Retry-After,
    if one is reached) and count it; with a `concurrent` limit it holds a slot until the
    handler's end releases it."""
    if ex.ctx.limits.admit(identity):
        ex.holding = identity.key_id


def _cache_scope(
    ex: _Exchange,
    req: Request,
    identity: Identity,
    body: bytes,
    request: ChatRequest,
) -> CacheScope | None:
    """The cache's part in this request, or None when the cache is off or bypassed.

    A request that may not be answered from the cache (olp.cache.reuse: not deterministic
    and not opted in) only stores its answer.
    """
    cache = ex.live.config.cache
    if not cache.enabled or request.forward is not None:
        return None  # (a forwarded body is not what a cache key describes)
    cache_control = req.header(b"cache-control")
    lookup = store = True
    if cache_control:
        lookup, store = cache_policy(cache_control.decode("latin-1"))
        if not store:
            return None
    opt_in = req.header(OPT_IN_HEADER)
    lookup = lookup and may_reuse(request, cache.serve_nondeterministic, opt_in)
    return CacheScope(
        ex.ctx.cache,
        identity.key_id,
        request_fingerprint(request),
        lookup,
        store,
        # Cheap and conservative: any marker anywhere makes Anthropic hops step aside.
        prompt_cache_markers=b'"cache_control"' in body,
    )


async def _cut_by_shutdown(ex: _Exchange) -> None:
    """OLP is stopping with this request still open: answer it as its client expects
    (a 503 with Retry-After before the first byte; after it, the stream's end and an error
    frame), and let the ledger record it."""
    err = ShuttingDown(
        "OLP is shutting down and stopped this request before it was answered; "
        "retry in a few seconds."
    )
    log.info("request_cut_by_shutdown", request_id=ex.meta.request_id, started=ex.started)
    if ex.encoder is not None and ex.ttft_ms is not None:  # content went out
        await ex.frame(ex.encoder.encode(Finish("length")))
    await ex.fail(err)


def _finished(ex: _Exchange) -> None:
    """Hand the finished request to every observer (ledger, limits, metrics)."""
    meta, served = ex.meta, ex.served
    if ex.error is None and served is None and not ex.client_left:
        return  # the client went away before its request was read: nothing to record
    status = 499 if ex.client_left and not ex.started else ex.status  # (nginx's "client closed")
    outcome = RequestOutcome(
        request_id=meta.request_id,
        started_at=meta.wall_start,
        identity=meta.identity,
        requested_model=ex.requested,
        provider=meta.provider,
        model=meta.model,
        hops=meta.hops,
        cache=meta.cache,
        status=status,
        error_code=_error_code(ex),
        error_message=ex.error.message if ex.error is not None else None,
        usage=ex.usage,
        stream=ex.stream,
        latency_ms=(time.perf_counter() - meta.started) * 1000,
        ttft_ms=ex.ttft_ms,
        failures=meta.failures,
        truncated=served.truncated if served is not None else False,
        shared=served is not None and not served.source.upstream,
    )
    for observer in ex.ctx.observers:
        try:
            observer(outcome)
        except Exception:  # an observer's bug must not break the response
            log.error("observer_failed", request_id=meta.request_id, exc_info=True)


def _error_code(ex: _Exchange) -> str | None:
    if ex.error is not None:
        return ex.error.code
    return "client_disconnected" if ex.client_left and not ex.started else None


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def _complete(
    ex: _Exchange, chain: Chain, request: ChatRequest, scope: CacheScope | None
) -> None:
    served = await ex.live.engine.open(chain, request, ex.meta.request_id, scope, _gate(ex))
    await _send_complete(ex, served, request)


async def _send_complete(ex: _Exchange, served: Served, request: ChatRequest) -> None:
    _note_served(ex, served)
    try:
        whole = served.whole()
        if whole is not None:
            response = _whole_response(ex.ctx.cache, served.source, whole)
        else:
            builder = ResponseBuilder()
            async with aclosing(served.events()) as events:
                async for event in events:
                    builder.add(event)
            response = builder.build()
    finally:
        await served.aclose()
        ex.live.engine.report(served)
    ex.usage = response.usage
    response_id = ex.dialect.response_id(ex.meta.request_id)
    body = ex.dialect.response_body(response, request, response_id, int(time.time()))
    ex.ttft_ms = (time.perf_counter() - ex.meta.started) * 1000
    await send_bytes(ex.send, 200, [_JSON, *ex.meta.headers(ex.live.config.auth)], body)


def _whole_response(cache: ResponseCache, source: HopSource, events: list[Event]) -> ChatResponse:
    """An answer already whole as one response; a cache entry's is built only once."""
    if not isinstance(source, CacheHop) or source.answer is None:
        return ResponseBuilder().extend(events).build()
    if source.answer.response is not None:
        return source.answer.response
    response = ResponseBuilder().extend(events).build()
    cache.keep_response(source, response)
    return response


async def _stream(
    ex: _Exchange, chain: Chain, request: ChatRequest, scope: CacheScope | None
) -> None:
    response_id = ex.dialect.response_id(ex.meta.request_id)
    encoder = ex.encoder = ex.dialect.stream_encoder(request, response_id, int(time.time()))
    try:
        served = await _open_with_heartbeat(ex, encoder, chain, request, scope)
    except ChainFailed as err:
        await ex.fail(err)
        return
    await _send_stream(ex, encoder, served)


async def _send_stream(ex: _Exchange, encoder: StreamEncoder, served: Served) -> None:
    _note_served(ex, served)
    ex.ctx.metrics.stream_started()
    try:
        if not ex.started:
            await ex.start_sse(encoder)
        whole = served.whole()
        if whole is not None:
            await _send_whole(ex, encoder, whole)
            return
        # (Closed on the way out, so that a cut-off answer says so before `report`.)
        async with aclosing(served.events()) as events:
            async for event in events:
                if isinstance(event, Usage):
                    ex.usage = event
                data = encoder.encode(event)
                if data:
                    if ex.ttft_ms is None:
                        ex.ttft_ms = (time.perf_counter() - ex.meta.started) * 1000
                    await ex.frame(data)
        await ex.frame(encoder.done(), last=True)
    finally:
        ex.ctx.metrics.stream_ended()
        await served.aclose()
        ex.live.engine.report(served)


async def _send_whole(ex: _Exchange, encoder: StreamEncoder, events: list[Event]) -> None:
    """An answer already whole (a replay): every frame in one write."""
    frames: list[bytes] = []
    for event in events:
        if isinstance(event, Usage):
            ex.usage = event
        frames.append(encoder.encode(event))
    frames.append(encoder.done())
    ex.ttft_ms = (time.perf_counter() - ex.meta.started) * 1000
    await ex.frame(b"".join(frames), last=True)


async def _open_with_heartbeat(
    ex: _Exchange,
    encoder: StreamEncoder,
    chain: Chain,
    request: ChatRequest,
    scope: CacheScope | None,
) -> Served:
    """Run the chain; if it is slow to produce content, keep the client's line alive.

    A keepalive is not content (docs/design.md §5 rule 2): fallback goes on behind it. The
    heartbeat task starts only once the first interval has passed.
    """
    interval = ex.live.config.server.heartbeat_interval_ms / 1000
    beats: list[asyncio.Task[None]] = []
    timer = asyncio.get_running_loop().call_later(
        interval,
        lambda: beats.append(asyncio.ensure_future(_heartbeat(ex, encoder, interval))),
    )
    try:
        return await ex.live.engine.open(chain, request, ex.meta.request_id, scope, _gate(ex))
    finally:
        timer.cancel()
        for beat in beats:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)


async def _heartbeat(ex: _Exchange, encoder: StreamEncoder, interval: float) -> None:
    if not ex.started:
        await ex.start_sse(encoder)
    while True:
        await ex.frame(encoder.keepalive())
        await asyncio.sleep(interval)


def _gate(ex: _Exchange) -> HopGate | None:
    """This key's own gate on the chain's hops: its spent shares of providers' windows."""
    ctx, identity = ex.ctx, ex.meta.identity
    return None if identity is None else share_gate(identity, ctx.quota, ctx.window_use)


def _note_served(ex: _Exchange, served: Served) -> None:
    meta = ex.meta
    ex.served = served
    meta.provider = served.hop.name
    meta.model = served.hop.model
    meta.hops = served.hop.index
    meta.failures = served.failures
    meta.cache = served.source.outcome
