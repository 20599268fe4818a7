"""`GET /dashboard` and its assets: a static page shipped in the package.

The page holds no data: it fetches `/v0/management/dashboard` with the owner key the user
gives it (pasted once, or passed as `/dashboard#key=…` — a URL fragment never reaches a
server, a log or a Referer — and kept in the tab's sessionStorage). So serving the page
itself only needs the loopback rule of the owner endpoints; a request that does carry a
key gets that key checked like any owner endpoint, so a member key is refused here too.

Headers: a Content-Security-Policy that allows nothing but this origin (no CDN, no inline
script, no outside request even if a message shown on the page tried), no framing, no
Referer, no caching.
"""

from __future__ import annotations

from importlib import resources

from olp.errors import Forbidden
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner

__all__ = ["ASSETS", "dashboard_asset"]

# path -> (file under olp/server/dashboard/, content type)
ASSETS: dict[str, tuple[str, bytes]] = {
    "/dashboard": ("index.html", b"text/html; charset=utf-8"),
    "/dashboard/lib.js": ("lib.js", b"text/javascript; charset=utf-8"),
    "/dashboard/app.js": ("app.js", b"text/javascript; charset=utf-8"),
    "/dashboard/style.css": ("style.css", b"text/css; charset=utf-8"),
}
_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", _CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


async def dashboard_asset(ctx: AppContext, req: Request, send: Send) -> None:
    _allow(ctx, req)
    name, content_type = ASSETS[req.path.rstrip("/")]
    body = resources.files("olp.server").joinpath("dashboard", name).read_bytes()
    await send_bytes(send, 200, [(b"content-type", content_type), *_HEADERS], body)


def _allow(ctx: AppContext, req: Request) -> None:
    if ctx.token(req) is not None:
        require_owner(ctx, req)
    elif ctx.config.auth.owner_endpoints_loopback_only and not req.is_loopback():
        raise Forbidden(
            f"{req.path} answers only on this machine (from {req.client_host}). Set "
            "auth.owner_endpoints_loopback_only to false in config.json to allow it.",
            code="owner_required",
        )
