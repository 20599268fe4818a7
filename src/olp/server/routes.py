"""The small routes: models, health."""

from __future__ import annotations

import orjson

from olp.accounts import allowed
from olp.errors import OLPError
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext

__all__ = ["health", "list_models"]

_JSON = (b"content-type", b"application/json")


async def list_models(ctx: AppContext, req: Request, send: Send) -> None:
    identity = ctx.auth.authenticate(ctx.token(req))
    data = []
    for model_id, owner in ctx.router.model_ids():
        if not allowed(identity.allowed_models, model_id):
            continue
        info = ctx.registry.model(ctx.registry.canonical(model_id) or model_id)
        created = info.created if info else int(ctx.started_at)
        data.append({"id": model_id, "object": "model", "created": created, "owned_by": owner})
    body = orjson.dumps({"object": "list", "data": data})
    await send_bytes(send, 200, [_JSON], body)


async def health(ctx: AppContext, req: Request, send: Send) -> None:
    """Public liveness; an owner token also gets each provider's state."""
    payload: dict[str, object] = {"ok": True, "version": ctx.version}
    token = ctx.token(req)
    if token is not None:
        try:
            identity = ctx.auth.authenticate(token)
        except OLPError:  # a bad token still gets the public answer
            identity = None
        if identity is not None and identity.is_owner:
            payload["providers"] = _provider_detail(ctx)
    await send_bytes(send, 200, [_JSON], orjson.dumps(payload))


def _provider_detail(ctx: AppContext) -> dict[str, object]:
    cooling: dict[str, list[dict[str, object]]] = {}
    for c in ctx.cooldowns.active():
        cooling.setdefault(c.provider, []).append(
            {"model": c.model, "until": c.until, "reason": c.reason}
        )
    detail: dict[str, object] = {}
    for name, pconf in ctx.config.providers.items():
        provider = ctx.providers.get(name)
        detail[name] = {
            "type": pconf.type,
            "enabled": provider is not None,
            "state": "cooling_down" if name in cooling else ("ok" if provider else "disabled"),
            "cooldowns": cooling.get(name, []),
        }
    return detail
