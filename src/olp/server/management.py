"""`GET /v0/management/usage`: the ledger grouped by key, provider, model or day (owner only).

Query parameters: `since` (default 7d; 30m, 24h, 7d, today, 2026-11-01, ISO time) and `by`
(key|provider|model|day, default key). The answer is what `olp usage --format json` prints:
`{generated_at, since, by, rows: [...], totals: {...}}`, times in unix seconds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs

import orjson

from olp.accounts.usage_query import (
    GROUPINGS,
    GroupBy,
    connect_reader,
    parse_since,
    usage_report,
)
from olp.errors import InvalidRequest
from olp.server.asgi import Request, Send, send_bytes
from olp.server.context import AppContext
from olp.server.owner import require_owner

__all__ = ["usage_status"]

_JSON = (b"content-type", b"application/json")
_DEFAULT_SINCE = "7d"
# How long to wait for rows still queued in memory, so a request just made is counted.
_FLUSH_WAIT_S = 2.0


async def usage_status(ctx: AppContext, req: Request, send: Send) -> None:
    require_owner(ctx, req)
    now = time.time()
    since, by = _params(req, now)
    await ctx.ledger.flush(_FLUSH_WAIT_S)
    report = await asyncio.to_thread(_report, ctx.ledger.path, since, by, now)
    await send_bytes(send, 200, [_JSON], orjson.dumps(report))


def _params(req: Request, now: float) -> tuple[float, GroupBy]:
    query = parse_qs(req.scope.get("query_string", b"").decode("latin-1"))
    by = query.get("by", ["key"])[-1]
    if by not in GROUPINGS:
        raise InvalidRequest(f"by must be one of {', '.join(GROUPINGS)}; got {by!r}", param="by")
    try:
        since = parse_since(query.get("since", [_DEFAULT_SINCE])[-1], now)
    except ValueError as exc:
        raise InvalidRequest(f"since: {exc}", param="since") from None
    return since, cast(GroupBy, by)


def _report(path: Path, since: float, by: GroupBy, now: float) -> dict[str, Any]:
    conn = connect_reader(path)
    try:
        return usage_report(conn, since, by, now)
    finally:
        conn.close()
