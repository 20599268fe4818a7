"""Owner-only endpoints: the owner's key, and by default only from this machine."""

from __future__ import annotations

from olp.accounts import Identity
from olp.errors import Forbidden
from olp.server.asgi import Request
from olp.server.context import AppContext

__all__ = ["require_owner"]


def require_owner(ctx: AppContext, req: Request) -> Identity:
    """The caller's identity if it is the owner calling from an allowed address; else 403."""
    identity = ctx.auth.authenticate(ctx.token(req))
    if not identity.is_owner:
        raise Forbidden(
            f"{req.path} is for the owner: use an owner key (this key is a {identity.tier} key).",
            code="owner_required",
        )
    if ctx.config.auth.owner_endpoints_loopback_only and not req.is_loopback():
        raise Forbidden(
            f"{req.path} answers only on this machine (from {req.client_host}). Set "
            "auth.owner_endpoints_loopback_only to false in config.json to allow it.",
            code="owner_required",
        )
    return identity
