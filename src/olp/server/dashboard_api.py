"""`GET /v0/management/dashboard`: everything the dashboard shows, in one owner-only call.

Memory gives the live part (status, quota, traffic, cache); the ledger gives the 30-day
spend (a worker thread reads it) and the key store the keys whose usage is set against
their limits. The page polls this every few seconds, so nothing here is on a chat
request's path and nothing here is cached.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from olp.accounts.keyrecord import KeyRecord
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.spend_trend import spend_trend
from olp.accounts.usage_query import connect_reader
from olp.ir import Usage
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner
from olp.server.quota_api import quota_payload
from olp.server.share_gate import shares_json
from olp.server.status_api import status_payload

__all__ = ["SPEND_DAYS", "cache_panel", "dashboard_data", "key_rows"]

_JSON = (b"content-type", b"application/json")
# Rows still queued in memory are written first, so a request just made is counted.
_FLUSH_WAIT_S = 1.0
# The page's first load waits this long for the first provider health checks.
_FIRST_HEALTH_WAIT_S = 3.0
SPEND_DAYS = 30
# The owner token (OLP_OWNER_TOKEN) and the owner key file are not rows of the key store.
_OWNER = KeyRecord(id="owner", name="owner", tier="owner", created=0.0)


async def dashboard_data(ctx: AppContext, req: Request, send: Send) -> None:
    require_owner(ctx, req)
    await ctx.health_checks.started(ctx.providers, _FIRST_HEALTH_WAIT_S)
    await ctx.ledger.flush(_FLUSH_WAIT_S)
    now = time.time()
    spend, records = await asyncio.to_thread(
        _read, ctx.ledger.path, keys_db_path(ctx.config.home), now
    )
    payload = {
        "generated_at": now,
        "status": status_payload(ctx),
        "quota": quota_payload(ctx)["providers"],
        "traffic": ctx.metrics.traffic.report(now),
        "cache": cache_panel(ctx),
        "spend": spend,
        "keys": key_rows([_OWNER, *records], ctx, now),
    }
    await send_bytes(send, 200, [_JSON], orjson.dumps(payload))


def _read(ledger: Path, keys: Path, now: float) -> tuple[dict[str, Any], list[KeyRecord]]:
    conn = connect_reader(ledger)
    try:
        spend = spend_trend(conn, now, SPEND_DAYS)
    finally:
        conn.close()
    store = KeyStore.open(keys)
    try:
        return spend, store.list_keys(include_revoked=False)
    finally:
        store.close()


def key_rows(records: list[KeyRecord], ctx: AppContext, now: float) -> list[dict[str, Any]]:
    """Each active key, its limits, its usage now, the share of each limit it used, and how
    much of each provider window it has a share of it used."""
    rows = []
    for record in records:
        usage = ctx.limits.usage(record.id)
        lim = record.limits
        used = {
            "rpm": (usage.requests_last_minute, lim.rpm),
            "rpd": (usage.requests_today, lim.rpd),
            "rp7d": (usage.requests_7d, lim.rp7d),
            "rp30d": (usage.requests_30d, lim.rp30d),
            "tpd": (usage.tokens_today, lim.tpd),
            "usd_month": (round(usage.usd_month, 6), lim.usd_month),
            "concurrent": (usage.in_progress, lim.concurrent),
        }
        rows.append(
            {
                "id": record.id,
                "name": record.name,
                "tier": record.tier,
                "last_used": record.last_used,
                "expires_at": record.expires_at,
                "limits": {name: limit for name, (_, limit) in used.items()},
                "usage": {name: value for name, (value, _) in used.items()},
                # 0..1 (can pass 1 for the month's spend: the last request is not refused);
                # None where the key has no such limit.
                "utilisation": {
                    name: (round(value / limit, 4) if limit else None)
                    for name, (value, limit) in used.items()
                },
                "shares": shares_json(record.identity(), ctx.quota, ctx.window_use, now),
            }
        )
    return rows


def cache_panel(ctx: AppContext) -> dict[str, Any]:
    """The response cache's own figures plus what its answers saved since start."""
    stats = ctx.cache.stats()
    saved_requests = unpriced = 0
    saved_usd = 0.0
    for (provider, model), saved in ctx.metrics.saved.items():
        saved_requests += saved.requests
        usd = _saved_usd(ctx, provider, model, saved.usage, saved.cost_usd)
        if usd is None:
            unpriced += saved.requests
        else:
            saved_usd += usd
    return {
        "enabled": bool(stats["enabled"]),
        "store": stats["store"],
        "hits": stats["hits"],
        "misses": stats["misses"],
        "shared": stats["shared"],
        "bypasses": stats["bypasses"],
        "hit_rate": stats["hit_rate"],
        "entries": stats["entries"],
        "bytes": stats["bytes"],
        "in_flight": stats["in_flight"],
        "saved_requests": saved_requests,
        "saved_api_cost_usd": round(saved_usd, 6),
        "saved_unpriced_requests": unpriced,
    }


def _saved_usd(
    ctx: AppContext, provider: str, model: str, usage: Usage, reported: float | None
) -> float | None:
    if reported is not None and reported > 0:
        return reported  # the providers' own figures for those answers
    pconf = ctx.config.providers.get(provider)
    if pconf is None:
        return None
    return ctx.pricing.price_request(provider, pconf.type, model, usage).api_cost_usd
