"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages wire.

`/v1/messages` is the one request pipeline (`olp.server.chat.handle`) speaking
`wire.anthropic_messages`; count_tokens checks the key and the model like it, then
answers an estimate (`wire.anthropic_messages.count`) without calling a provider.
"""

from __future__ import annotations

import orjson

from olp.errors import OLPError
from olp.observability import event_logger
from olp.server.asgi import ClientGone, Request, Send, send_bytes
from olp.server.chat import handle, read_json_body
from olp.server.context import AppContext
from olp.server.meta import ResponseMeta
from olp.wire.anthropic_messages import AnthropicMessages, estimate_input_tokens

__all__ = ["count_tokens", "messages"]

log = event_logger("olp.server")

_JSON = (b"content-type", b"application/json")


def _dialect(req: Request) -> AnthropicMessages:
    beta = req.header(b"anthropic-beta")
    return AnthropicMessages(beta.decode("latin-1") if beta else None)


async def messages(ctx: AppContext, req: Request, send: Send) -> None:
    await handle(ctx, req, send, _dialect(req))


async def count_tokens(ctx: AppContext, req: Request, send: Send) -> None:
    """`{"input_tokens": N}` for a Messages request the key could send to that model."""
    dialect = _dialect(req)
    meta = ResponseMeta()
    auth = ctx.config.auth
    try:
        identity = meta.identity = ctx.auth.authenticate(ctx.token(req))
        request = dialect.parse_count(await read_json_body(ctx.live, req))
        meta.model = request.model
        ctx.authorize(identity, ctx.router.resolve(request.model))  # 404 / 403 as on create
        body = orjson.dumps({"input_tokens": estimate_input_tokens(request)})
        await send_bytes(send, 200, [_JSON, *meta.headers(auth)], body)
    except OLPError as err:
        headers = [_JSON, *meta.headers(auth, err)]
        await send_bytes(send, err.http_status, headers, dialect.error_body(err))
    except ClientGone:
        log.info("client_disconnected", request_id=meta.request_id)
