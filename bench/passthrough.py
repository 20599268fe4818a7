"""The reference the budget is measured against: the least a Python proxy can do.

It forwards the request body unchanged over one pooled aiohttp session and streams the
answer back (status, content type, chunks as they arrive). No parsing, no auth, no routing:
whatever OLP costs beyond this is OLP's own overhead.

    python -m bench.passthrough --port 9101 --upstream http://127.0.0.1:9100
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from bench._serve import serve
from bench.payloads import CHAT_PATH

_SESSION = web.AppKey("session", aiohttp.ClientSession)


def create_app(upstream: str) -> web.Application:
    target = upstream.rstrip("/") + CHAT_PATH

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        # limit=0: the pool never queues, so the client's concurrency reaches the upstream.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        async with aiohttp.ClientSession(
            connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60)
        ) as session:
            app[_SESSION] = session
            yield

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        try:
            async with request.app[_SESSION].post(target, data=body, headers=headers) as up:
                resp = web.StreamResponse(
                    status=up.status,
                    headers={"Content-Type": up.headers.get("Content-Type", "application/json")},
                )
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except aiohttp.ClientError as exc:
            return web.json_response({"error": {"message": f"upstream: {exc}"}}, status=502)

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post(CHAT_PATH, forward)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.passthrough", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9101)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9100")
    args = parser.parse_args()
    serve(create_app(args.upstream), args.host, args.port, "passthrough")


if __name__ == "__main__":
    main()
