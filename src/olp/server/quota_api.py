"""`GET /v0/management/quota`: each provider's quota state, figures and their sources."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson

from olp.accounts.keyrecord import KeyRecord
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.config import Config, PoolConfig
from olp.engine import PoolScheduler
from olp.quota import Figure, ProviderQuota
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner
from olp.server.share_gate import shares_json

__all__ = ["pools_json", "provider_quota_json", "quota_payload", "quota_status"]


async def quota_status(ctx: AppContext, req: Request, send: Send) -> None:
    require_owner(ctx, req)
    payload = quota_payload(ctx)
    records = await asyncio.to_thread(_keys_with_shares, keys_db_path(ctx.config.home))
    now = payload["generated_at"]
    payload["shares"] = [
        {"key_id": r.id, "key_name": r.name, **share}
        for r in records
        for share in shares_json(r.identity(), ctx.quota, ctx.window_use, now)
    ]
    body = orjson.dumps(payload)
    await send_bytes(send, 200, [(b"content-type", b"application/json")], body)


def quota_payload(ctx: AppContext) -> dict[str, Any]:
    providers = []
    for name, pconf in ctx.config.providers.items():
        entry = provider_quota_json(ctx.quota.status(name))
        entry["type"] = pconf.type
        entry["enabled"] = name in ctx.providers
        providers.append(entry)
    now = time.time()
    pools = pools_json(ctx.config, ctx.pools, ctx.providers, now)
    return {"generated_at": now, "providers": providers, "pools": pools}


def _keys_with_shares(path: Path) -> list[KeyRecord]:
    store = KeyStore.open(path)
    try:
        return [r for r in store.list_keys(include_revoked=False) if r.shares]
    finally:
        store.close()


def pools_json(
    config: Config, scheduler: PoolScheduler, enabled: Collection[str], now: float
) -> list[dict[str, Any]]:
    """Each configured pool: its members' windows and which one the next request takes."""
    return [_pool_json(pool, scheduler, enabled, now) for pool in configured_pools(config)]


def configured_pools(config: Config) -> list[PoolConfig]:
    pools: dict[PoolConfig, None] = {}
    for hops in config.routing.chains.values():
        for hop in hops:
            if hop.pool is not None:
                pools.setdefault(hop.pool)
    return list(pools)


def _pool_json(
    pool: PoolConfig, scheduler: PoolScheduler, enabled: Collection[str], now: float
) -> dict[str, Any]:
    members = [name for name in pool.members if name in enabled]
    return {
        "pool": pool.label,
        "chain": pool.chain,
        "pick": pool.pick,
        "next": scheduler.next_member(pool, members),
        "members": [_member_json(scheduler, name, name in enabled, now) for name in pool.members],
    }


def _member_json(scheduler: PoolScheduler, name: str, enabled: bool, now: float) -> dict[str, Any]:
    state = scheduler.member(name)
    window = state.window
    return {
        "provider": name,
        "enabled": enabled,
        "blocked": state.blocked,
        "heard_from": state.heard_from,
        "window": None
        if window is None
        else {
            "utilisation": window.utilisation,
            "reset_at": window.reset_at,
            "resets_in_s": round(window.reset_at - now, 1),
            "source": window.source,
            "seen_at": window.seen_at,
        },
    }


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
