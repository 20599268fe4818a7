"""`GET /metrics`: Prometheus exposition for the owner.

Owner key (and the loopback rule of every owner endpoint), or — when
`auth.metrics_loopback_unauthenticated` is true — no key at all from this machine, so a
local Prometheus or node-exporter textfile job needs no secret in its config.
"""

from __future__ import annotations

from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.metrics_text import CONTENT_TYPE, render
from olp.server.owner import require_owner

__all__ = ["metrics_endpoint"]


async def metrics_endpoint(ctx: AppContext, req: Request, send: Send) -> None:
    if not (ctx.config.auth.metrics_loopback_unauthenticated and req.is_loopback()):
        require_owner(ctx, req)
    await send_bytes(send, 200, [(b"content-type", CONTENT_TYPE)], render(ctx))
