"""The small routes: models, health."""

from __future__ import annotations

import time

import orjson

from olp.accounts import Identity
from olp.errors import ModelNotFound, OLPError
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.status_api import provider_entry

__all__ = ["MODEL_PREFIXES", "health", "list_models", "retrieve_model"]

# `GET <prefix><id>`: one model. An id may hold slashes (`provider/model`).
MODEL_PREFIXES = ("/v1/models/", "/models/")

_JSON = (b"content-type", b"application/json")


async def list_models(ctx: AppContext, req: Request, send: Send) -> None:
    identity = ctx.auth.authenticate(ctx.token(req))
    data = [
        _model_object(ctx, model_id, owner)
        for model_id, owner in ctx.router.model_ids()
        if _may_use(ctx, identity, model_id)
    ]
    body = orjson.dumps({"object": "list", "data": data})
    await send_bytes(send, 200, [_JSON], body)


async def retrieve_model(ctx: AppContext, req: Request, send: Send) -> None:
    """One model of the list (404 model_not_found for any other, or one the key may not use)."""
    identity = ctx.auth.authenticate(ctx.token(req))
    wanted = next(req.path[len(p) :] for p in MODEL_PREFIXES if req.path.startswith(p))
    for model_id, owner in ctx.router.model_ids():
        if model_id == wanted and _may_use(ctx, identity, model_id):
            body = orjson.dumps(_model_object(ctx, model_id, owner))
            await send_bytes(send, 200, [_JSON], body)
            return
    raise ModelNotFound(
        f"The model {wanted!r} does not exist or this key may not use it; "
        "GET /v1/models lists the models it may use.",
        param="model",
    )


def _model_object(ctx: AppContext, model_id: str, owner: str) -> dict[str, object]:
    info = ctx.registry.model(ctx.registry.canonical(model_id) or model_id)
    created = info.created if info else int(ctx.started_at)
    return {"id": model_id, "object": "model", "created": created, "owned_by": owner}


def _may_use(ctx: AppContext, identity: Identity, model_id: str) -> bool:
    """What a chat request for `model_id` with this key would not refuse as forbidden."""
    try:
        ctx.authorize(identity, ctx.router.resolve(model_id))
    except OLPError:
        return False
    return True


async def health(ctx: AppContext, req: Request, send: Send) -> None:
    """Public liveness; the owner (from where owner endpoints answer) also gets each
    provider's state, health check, spawns, cooldowns and median latencies."""
    payload: dict[str, object] = {"ok": True, "version": ctx.version}
    if _is_owner(ctx, req):
        # Waits for a stale health check (bounded): a script asking /health wants it now.
        await ctx.health_checks.fresh(ctx.providers)
        now = time.time()
        detail = {}
        for name in ctx.config.providers:
            entry = provider_entry(ctx, name, now)
            del entry["name"]
            detail[name] = entry
        payload["providers"] = detail
    await send_bytes(send, 200, [_JSON], orjson.dumps(payload))


def _is_owner(ctx: AppContext, req: Request) -> bool:
    token = ctx.token(req)
    if token is None:
        return False
    try:
        identity = ctx.auth.authenticate(token)
    except OLPError:  # a bad token still gets the public answer
        return False
    if ctx.config.auth.owner_endpoints_loopback_only and not req.is_loopback():
        return False
    return identity.is_owner
