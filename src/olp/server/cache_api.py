"""`GET /cache/stats` and `DELETE /cache`, and applying `olp cache clear` from the CLI."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qs

import orjson

from olp.cache.control import take_clear_requests
from olp.errors import InvalidRequest
from olp.observability import event_logger
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner

__all__ = ["CacheControlPoller", "cache_stats", "clear_cache"]

log = event_logger("olp.cache")
_JSON = (b"content-type", b"application/json")


async def cache_stats(ctx: AppContext, req: Request, send: Send) -> None:
    """The owner sees every namespace; any other key sees its own."""
    identity = ctx.auth.authenticate(ctx.token(req))
    if identity.is_owner:
        require_owner(ctx, req)  # the loopback rule for the full view
        stats = ctx.cache.stats()
    else:
        stats = {"namespace": identity.key_id, **ctx.cache.stats(identity.key_id)}
    body = orjson.dumps({"generated_at": time.time(), **stats})
    await send_bytes(send, 200, [_JSON], body)


async def clear_cache(ctx: AppContext, req: Request, send: Send) -> None:
    """Owner only: `?namespace=<key id>` clears one namespace, no parameter clears all."""
    require_owner(ctx, req)
    query = parse_qs(req.scope.get("query_string", b"").decode("latin-1"))
    namespaces = query.get("namespace", [])
    if len(namespaces) > 1 or (namespaces and not namespaces[0]):
        raise InvalidRequest(
            "namespace: give one key id, or none to clear everything", param="namespace"
        )
    namespace = namespaces[0] if namespaces else None
    cleared = await ctx.cache.aclear(namespace)
    log.info("cache_cleared", namespace=namespace or "*", entries=cleared)
    body = orjson.dumps({"cleared": cleared, "namespace": namespace})
    await send_bytes(send, 200, [_JSON], body)


class CacheControlPoller:
    """Applies `olp cache clear` requests left in cache.db by another process."""

    def __init__(self, ctx: AppContext, interval_s: float = 1.0) -> None:
        self.ctx = ctx
        self.interval_s = interval_s

    async def run(self) -> None:
        if not self.ctx.config.cache.enabled:
            return
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                requests = await asyncio.to_thread(take_clear_requests, self.ctx.config.home)
            except Exception:
                log.error("cache_control_failed", exc_info=True)
                continue
            for namespace in requests:
                cleared = self.ctx.cache.clear(namespace)
                log.info(
                    "cache_cleared",
                    namespace=namespace or "*",
                    entries=cleared,
                    by="olp cache clear",
                )
