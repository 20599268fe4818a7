"""`GET /v0/management/quota`: each provider's quota state, figures and their sources."""

from __future__ import annotations

import time
from typing import Any

import orjson

from olp.quota import Figure, ProviderQuota
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner

__all__ = ["quota_payload", "quota_status"]


async def quota_status(ctx: AppContext, req: Request, send: Send) -> None:
    require_owner(ctx, req)
    body = orjson.dumps(quota_payload(ctx))
    await send_bytes(send, 200, [(b"content-type", b"application/json")], body)


def quota_payload(ctx: AppContext) -> dict[str, Any]:
    providers = []
    for name, pconf in ctx.config.providers.items():
        entry = provider_quota_json(ctx.quota.status(name))
        entry["type"] = pconf.type
        entry["enabled"] = name in ctx.providers
        providers.append(entry)
    return {"generated_at": time.time(), "providers": providers}


def provider_quota_json(q: ProviderQuota) -> dict[str, Any]:
    return {
        "provider": q.provider,
        "state": q.state,
        "requests_today": q.requests_today,
        "five_hour_requests": q.five_hour_requests,
        "five_hour_utilisation": _figure(q.five_hour_utilisation),
        "credit_pool_utilisation": _figure(q.credit_pool_utilisation),
        "reset_at": q.reset_at,
        "signal_seen_at": q.signal_seen_at,
        "cooldowns": [
            {"model": c.model, "until": c.until, "reason": c.reason, "message": c.message}
            for c in q.cooldowns
        ],
        "soft_triggers": dict(q.thresholds),
        "fired": list(q.fired),
        "sources": {
            "requests_today": "counter",
            "five_hour_requests": "counter",
            "five_hour_utilisation": q.five_hour_utilisation.source,
            "credit_pool_utilisation": q.credit_pool_utilisation.source,
        },
    }


def _figure(figure: Figure) -> dict[str, Any]:
    return {"value": figure.value, "source": figure.source}
