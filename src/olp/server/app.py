"""`create_app(config)`: the composition root for HTTP. Builds everything, owns the lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from olp import __version__
from olp.accounts import Authenticator, OwnerKeyFile, hash_key
from olp.accounts.dbauth import DbAuthenticator
from olp.accounts.keystore import keys_db_path
from olp.accounts.ledger import Ledger
from olp.accounts.ledger_rows import LEDGER_FILE
from olp.accounts.limits import LimitKeeper
from olp.accounts.pricing import Pricing
from olp.accounts.shares import WINDOW_S
from olp.accounts.usage_query import read_limit_seeds, read_window_rows
from olp.cache import ResponseCache
from olp.config import Config
from olp.engine import FallbackEngine, PoolScheduler, Router
from olp.errors import MethodNotAllowed, NotFound, OLPError, ShuttingDown
from olp.observability import event_logger
from olp.providers.base import ProviderPlugin, QuotaSnapshot
from olp.providers.loader import build_providers, load_plugins
from olp.quota import Clock, Cooldowns, QuotaBook, QuotaStore
from olp.registry import Registry, load_registry
from olp.server.asgi import Receive, Request, Scope, Send, send_bytes
from olp.server.cache_api import CacheControlPoller, cache_stats, clear_cache
from olp.server.chat import serve
from olp.server.context import AppContext, Snapshot
from olp.server.cors import CorsMiddleware
from olp.server.dashboard_api import dashboard_data
from olp.server.dashboard_page import ASSETS as DASHBOARD_ASSETS
from olp.server.dashboard_page import dashboard_asset
from olp.server.management import usage_status
from olp.server.messages import count_tokens, messages
from olp.server.meta import header_value
from olp.server.metrics_api import metrics_endpoint
from olp.server.observers import limit_usage, record_usage, window_usage
from olp.server.quota_api import quota_status
from olp.server.quota_sync import QuotaSync
from olp.server.reload import ConfigReloader, warn_soft_triggers
from olp.server.routes import MODEL_PREFIXES, health, list_models, retrieve_model
from olp.server.status_api import management_status
from olp.wire.anthropic_messages import error_body as anthropic_error_body
from olp.wire.openai_chat import OpenAIChat, error_body
from olp.wire.openai_forward import OpenAIForward
from olp.wire.openai_responses import OpenAIResponses

__all__ = ["OLPApp", "create_app", "default_authenticator"]

log = event_logger("olp.server")

# How long the requests cut at shutdown may take to answer and record themselves.
_REQUESTS_END_S = 5.0

Handler = Callable[[AppContext, Request, Send], Awaitable[None]]
_chat_completions = serve(OpenAIChat())
_embeddings = serve(OpenAIForward("embeddings"))
_completions = serve(OpenAIForward("completions"))
_responses = serve(OpenAIResponses())
_ROUTES: dict[str, dict[str, Handler]] = {
    "/v1/chat/completions": {"POST": _chat_completions},
    "/chat/completions": {"POST": _chat_completions},
    "/v1/embeddings": {"POST": _embeddings},
    "/embeddings": {"POST": _embeddings},
    "/v1/completions": {"POST": _completions},
    "/completions": {"POST": _completions},
    "/v1/responses": {"POST": _responses},
    "/responses": {"POST": _responses},
    "/v1/messages": {"POST": messages},
    "/v1/messages/count_tokens": {"POST": count_tokens},
    "/v1/models": {"GET": list_models},
    "/models": {"GET": list_models},
    "/health": {"GET": health},
    "/v0/management/quota": {"GET": quota_status},
    "/cache/stats": {"GET": cache_stats},
    "/cache": {"DELETE": clear_cache},
    "/v0/management/usage": {"GET": usage_status},
    "/v0/management/status": {"GET": management_status},
    "/v0/management/dashboard": {"GET": dashboard_data},
    "/metrics": {"GET": metrics_endpoint},
    **{path: {"GET": dashboard_asset} for path in DASHBOARD_ASSETS},
}


_MODEL: dict[str, Handler] = {"GET": retrieve_model}


def default_authenticator(config: Config, clock: Clock = time.time) -> Authenticator:
    hashes = [h for h in (OwnerKeyFile(config.home).load_hash(),) if h]
    if config.owner_token:
        hashes.append(hash_key(config.owner_token))
    # Raises DatabaseError (naming the file and the fix) if the key store is unusable.
    return DbAuthenticator(
        keys_db_path(config.home),
        hashes,
        allow_anonymous=config.auth.allow_anonymous,
        clock=clock,  # (key expiry)
    )


def create_app(
    config: Config,
    *,
    plugins: Mapping[str, ProviderPlugin] | None = None,
    authenticator: Authenticator | None = None,
    registry: Registry | None = None,
    clock: Clock = time.time,
) -> OLPApp:
    """Build the ASGI app. Raises ConfigError if a provider cannot be built."""
    registry = registry or load_registry()
    plugins = load_plugins() if plugins is None else plugins
    providers = build_providers(config, plugins, registry)
    cooldowns = Cooldowns(clock)

    def signal(name: str) -> QuotaSnapshot | None:
        # Through the running snapshot: a reload's new providers report theirs.
        provider = ctx.providers.get(name)
        return provider.quota() if provider is not None else None

    quota = QuotaBook(cooldowns, config.routing.soft_triggers, signal, clock)
    pools = PoolScheduler(quota)
    engine = FallbackEngine(
        cooldowns,
        default_retry_after_s=config.routing.default_retry_after_s,
        max_cooldown_s=config.routing.max_cooldown_s,
        gates=[lambda hop: quota.soft_gate(hop.name)],
        listeners=[lambda a: quota.on_attempt(a.provider, reached=a.upstream)],
        arrange=pools.arrange,
    )
    sync = QuotaSync(quota, QuotaStore(config.home / "quota.db"))
    sync.load()
    warn_soft_triggers(config, providers)
    live = Snapshot(
        config, providers, Router(config, registry, providers), Pricing(registry, config), engine
    )
    ctx = AppContext(
        live=live,
        registry=registry,
        cooldowns=cooldowns,
        auth=authenticator or default_authenticator(config, clock),
        limits=LimitKeeper(clock),
        quota=quota,
        pools=pools,
        ledger=Ledger.open(config.home, config.ledger.retention_days),
        cache=ResponseCache(config.cache, config.home, clock),
        version=__version__,
        plugins=plugins,
    )
    _wire_observers(ctx, clock)
    return OLPApp(ctx, sync)


def _wire_observers(ctx: AppContext, clock: Clock) -> None:
    """Who hears about each finished request and each hop: limits, ledger, metrics."""
    config, engine = ctx.config, ctx.engine
    # Limits hold across restarts: today's and this month's usage per key, from the ledger.
    now = clock()
    ctx.limits.seed(read_limit_seeds(config.home / LEDGER_FILE, now))
    ctx.window_use.seed(read_window_rows(config.home / LEDGER_FILE, now - WINDOW_S, now))
    ctx.observers.append(window_usage(ctx.window_use))
    record_usage(ctx, config.ledger.enabled)  # `"enabled": false`: no usage rows at all
    ctx.observers.append(limit_usage(ctx.limits, ctx))
    engine.listeners.append(ctx.metrics.on_attempt)
    ctx.observers.append(ctx.metrics.observe)  # O(1): counters, rings, minute buckets


class OLPApp:
    """A plain ASGI application: a dict of routes and a lifespan, nothing in between."""

    def __init__(self, ctx: AppContext, quota_sync: QuotaSync) -> None:
        self.ctx = ctx
        self.quota_sync = quota_sync
        self._background: list[asyncio.Task[None]] = []
        self._requests: set[asyncio.Task[Any]] = set()  # in flight, for a clean shutdown
        self._reloader: ConfigReloader | None = None
        origins = ctx.config.server.cors_origins  # (a restart applies a change)
        self._serve_http = CorsMiddleware(self._http, origins) if origins else self._http

    def watch_config(self, load: Callable[[], Config], loaded: Config) -> None:
        """Reload config.json when it changes or on SIGHUP (`olp start`; see server.reload).

        `load` reads the configuration as at start; `loaded` is what it gave then.
        """
        self._reloader = ConfigReloader(self.ctx, load, loaded)

    def on_listening(self) -> None:
        """The server listens (`server.serve.OLPServer`): slow one-off work the providers
        can do ahead of their first request (an optional `preload()`, such as the MCP SDK a
        CLI's client tools need, a second to import) starts now, in a thread, so that
        neither the start nor any request waits for it."""
        preloads: list[Callable[[], None]] = [
            preload
            for provider in self.ctx.providers.values()
            if (preload := getattr(provider, "preload", None)) is not None
        ]
        if preloads:
            # A daemon: a stop never waits for an import to finish.
            threading.Thread(
                target=_run_preloads, args=(preloads,), name="olp-preload", daemon=True
            ).start()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._serve_http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        req = Request(scope, receive)
        task = asyncio.current_task()
        if task is not None:
            self._requests.add(task)
        try:
            handler = _route(req.method, req.path)
            await handler(self.ctx, req, send)
        except OLPError as err:
            await _send_error(send, err, _error_body_for(req.path))
        except asyncio.CancelledError:
            # The server stopped past server.shutdown_grace_s (chat ends its own requests).
            if task is not None:
                task.uncancel()
            stopping = ShuttingDown("OLP is shutting down; retry in a few seconds.")
            await _send_error(send, stopping, _error_body_for(req.path))
        except Exception:
            log.error("unhandled_error", path=req.path, exc_info=True)
            internal = OLPError("Internal server error; see the OLP log.")
            await _send_error(send, internal, _error_body_for(req.path))
        finally:
            self._requests.discard(task)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                log.info("started", version=__version__, providers=sorted(self.ctx.providers))
                self.quota_sync.start()
                if isinstance(self.ctx.auth, DbAuthenticator):
                    self._background.append(asyncio.create_task(self.ctx.auth.run_background()))
                await self.ctx.cache.start()
                if self.ctx.config.cache.redis_url is None:  # a shared store polls Redis
                    poller = CacheControlPoller(self.ctx)
                    self._background.append(asyncio.create_task(poller.run()))
                if self._reloader is not None:
                    self._background.append(asyncio.create_task(self._reloader.run()))
                    _on_sighup(self._reloader.on_signal)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        if self._requests:
            # Requests the server cut at shutdown are still answering their clients and
            # recording their rows: the providers and the ledger must outlive them.
            await asyncio.wait(set(self._requests), timeout=_REQUESTS_END_S)
        await self.ctx.health_checks.aclose()  # before the providers it calls are closed
        await self.quota_sync.aclose()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._reloader is not None:
            _on_sighup(None)
            await self._reloader.aclose()  # closes the providers a reload retired
        if isinstance(self.ctx.auth, DbAuthenticator):
            await self.ctx.auth.aclose()  # writes the last-used times still in memory
        results = await asyncio.gather(
            *(p.aclose() for p in self.ctx.providers.values()), return_exceptions=True
        )
        for name, result in zip(self.ctx.providers, results, strict=True):
            if isinstance(result, Exception):
                log.warning("provider_close_failed", provider=name, error=repr(result))
        await self.ctx.cache.aclose()  # flights were cancelled with the providers' streams
        # Last: every row recorded until now (also while providers closed) is written.
        await self.ctx.ledger.aclose()


def _run_preloads(preloads: list[Callable[[], None]]) -> None:
    for preload in preloads:
        try:
            preload()
        except Exception:  # the request that needs it fails with the reason, if it recurs
            log.warning("preload_failed", exc_info=True)


def _on_sighup(handler: Callable[[], None] | None) -> None:
    """Route SIGHUP to `handler` (None: back to the default); only the main thread can."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        if handler is None:
            loop.remove_signal_handler(signal.SIGHUP)
        else:
            loop.add_signal_handler(signal.SIGHUP, handler)


def _route(method: str, path: str) -> Handler:
    methods = _ROUTES.get(path.rstrip("/") or "/")
    if methods is None and path.startswith(MODEL_PREFIXES) and not path.endswith("/"):
        methods = _MODEL
    if methods is None:
        raise NotFound(
            f"Route {method} {path} not found. OLP serves /v1/chat/completions, "
            "/v1/messages, /v1/responses, /v1/embeddings, /v1/completions, /v1/models and "
            "/health."
        )
    handler = methods.get(method)
    if handler is None:
        allow = tuple(methods)
        raise MethodNotAllowed(
            f"{method} is not allowed on {path}; use {', '.join(allow)}.", allow=allow
        )
    return handler


def _error_body_for(path: str) -> Callable[[OLPError], bytes]:
    """Anthropic's error shape under its API's paths (its SDK reads the error's type
    there), OpenAI's everywhere else."""
    return anthropic_error_body if path.startswith("/v1/messages") else error_body


async def _send_error(
    send: Send, err: OLPError, body: Callable[[OLPError], bytes] = error_body
) -> None:
    headers = [(b"content-type", b"application/json")]
    if err.retry_after is not None:
        headers.append((b"retry-after", header_value(str(max(1, math.ceil(err.retry_after))))))
    if isinstance(err, MethodNotAllowed):
        headers.append((b"allow", header_value(", ".join(err.allow))))
    try:
        await send_bytes(send, err.http_status, headers, body(err))
    except RuntimeError:
        # The response had already started; the connection is the only thing left to close.
        log.warning("error_after_response_started", code=err.code)
