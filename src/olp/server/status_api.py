"""`GET /v0/management/status`: uptime, providers, counters and what went wrong recently.

Everything comes from memory (the metrics, the quota book, the cooldowns, the last health
checks), so the answer is immediate; a stale health check is refreshed in the background
and shows up on the next call. Times are unix seconds, like the other management
endpoints; counters count since OLP started.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import orjson

from olp.providers.base import Provider, WarmStats
from olp.quota import ProviderQuota
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner
from olp.server.quota_api import pools_json
from olp.server.recent import scrub

__all__ = ["management_status", "provider_entry", "status_payload"]

_JSON = (b"content-type", b"application/json")


async def management_status(ctx: AppContext, req: Request, send: Send) -> None:
    require_owner(ctx, req)
    ctx.health_checks.refresh_if_stale(ctx.providers)
    await send_bytes(send, 200, [_JSON], orjson.dumps(status_payload(ctx)))


def status_payload(ctx: AppContext) -> dict[str, Any]:
    now = time.time()
    metrics = ctx.metrics
    providers = [provider_entry(ctx, name, now) for name in ctx.config.providers]
    cache = metrics.cache_outcomes()
    uptime = max(0.0, now - ctx.started_at)
    return {
        "ok": True,
        "version": ctx.version,
        "started_at": ctx.started_at,
        "uptime_s": round(uptime, 3),
        "uptime_human": _human(uptime),
        "generated_at": now,
        "providers": providers,
        "pools": pools_json(ctx.config, ctx.pools, ctx.providers, now),
        "counters": {
            "total_requests": metrics.total_requests(),
            "active_requests": metrics.active_requests,
            "active_streams": metrics.active_streams,
            "active_spawns": sum(p["active_spawns"] or 0 for p in providers),
            "errors": metrics.total_errors(),
            "fallbacks": metrics.fallbacks,
            "fallback_saves": sum(metrics.fallback_saves.values()),
            "cache_hits": cache["hit"],
            "cache_misses": cache["miss"],
            "cache_bypasses": cache["bypass"],
        },
        "config": _config_json(ctx),
        "recent_errors": metrics.recent.errors_json(),
        "recent_fallbacks": metrics.recent.fallbacks_json(),
    }


def provider_entry(ctx: AppContext, name: str, now: float) -> dict[str, Any]:
    """One configured provider as the status page, the dashboard and `/health` show it."""
    provider = ctx.providers.get(name)
    quota = ctx.quota.status(name)
    health = ctx.health_checks.results().get(name)
    latency, ttft = ctx.metrics.p50_ms(name)
    requests, errors = ctx.metrics.by_provider(name)
    active, limit = _spawns(provider)
    return {
        "name": name,
        "type": ctx.config.providers[name].type,
        "enabled": provider is not None,
        "state": _state(provider, quota, health),
        "quota_state": quota.state,
        "health": health,
        "active_spawns": active,
        "max_concurrent": limit,
        "warm": _warm(provider),
        "cooldowns": [
            {
                "model": c.model,
                "until": c.until,
                "remaining_s": round(max(0.0, c.until - now), 1),
                "reason": c.reason,
                "message": scrub(c.message),
            }
            for c in quota.cooldowns
        ],
        "latency_p50_ms": latency,
        "ttft_p50_ms": ttft,
        "requests": requests,
        "errors": errors,
        "fallback_saves": ctx.metrics.fallback_saves.get(name, 0),
    }


def _state(provider: Provider | None, quota: ProviderQuota, health: dict[str, Any] | None) -> str:
    """ok | cooling_down | soft_limited | unhealthy | disabled — the worst that applies."""
    if provider is None:
        return "disabled"
    if quota.state in ("cooling_down", "soft_limited"):
        return quota.state
    if health is not None and not health["ok"]:
        return "unhealthy"
    return "ok"


def _spawns(provider: Provider | None) -> tuple[int | None, int | None]:
    """(children running, limit) for CLI providers that expose their runner; else Nones.

    Duck-typed on purpose: the server must not depend on one provider's internals, and
    any provider with a `runner` that counts `active` children is shown.
    """
    if provider is None:
        return None, None
    runner = getattr(provider, "runner", None)
    active = getattr(runner, "active", None)
    if not isinstance(active, int):
        return None, provider.capabilities.max_concurrent
    limit = getattr(runner, "max_concurrent", None)
    return active, limit if isinstance(limit, int) else provider.capabilities.max_concurrent


def _warm(provider: Provider | None) -> dict[str, Any] | None:
    """The warm pool of a CLI provider that keeps one (duck-typed like `_spawns`)."""
    stats = getattr(getattr(provider, "runner", None), "warm", None)
    return dataclasses.asdict(stats) if isinstance(stats, WarmStats) else None


def _human(seconds: float) -> str:
    whole = int(seconds)
    days, whole = divmod(whole, 86_400)
    hours, whole = divmod(whole, 3600)
    minutes, secs = divmod(whole, 60)
    head = f"{days}d " if days else ""
    return f"{head}{hours}h {minutes}m {secs}s"


def _config_json(ctx: AppContext) -> dict[str, Any]:
    status = ctx.config_status
    return {
        "source": ctx.config.source,
        "path": str(ctx.config.config_path),
        "loaded_at": status.loaded_at,
        "reloads": status.reloads,
        "restart_needed": list(status.restart_needed),
        "reload_error": status.reload_error,
        "reload_error_at": status.reload_error_at,
    }
