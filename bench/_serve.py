"""Run an aiohttp app on uvloop until SIGTERM or SIGINT (the fake upstream, the passthrough)."""

from __future__ import annotations

import asyncio
import signal

import uvloop
from aiohttp import web


def serve(app: web.Application, host: str, port: int, name: str) -> None:
    uvloop.run(_serve(app, host, port, name))


async def _serve(app: web.Application, host: str, port: int, name: str) -> None:
    # No access log: formatting a log line per request would be most of the server's work.
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    # The runner waits for readiness over HTTP; the line is for humans and for --port 0.
    print(f"{name} ready on http://{bound_host}:{bound_port}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
