"""How OLP runs under uvicorn: one place, shared by `olp start` and the test servers."""

from __future__ import annotations

import resource
import socket
from typing import Any

import uvicorn

from olp.config import Config
from olp.server.app import OLPApp
from olp.server.protocol import guarded_protocol

__all__ = ["OLPServer", "uvicorn_config"]

_UVICORN_LEVELS = {"error": "error", "warn": "warning", "info": "info", "debug": "debug"}


def uvicorn_config(app: OLPApp, config: Config, **overrides: Any) -> uvicorn.Config:
    options: dict[str, Any] = {
        "host": config.server.host,
        "port": config.server.port,
        "loop": "uvloop",
        # uvicorn's httptools protocol behind OLP's connection limits (server.protocol).
        "http": guarded_protocol(lambda: app.ctx.config.server, _max_waiting_connections()),
        "ws": "none",
        "lifespan": "on",
        # OLP sees the real peer: owner endpoints are loopback-only by default, and a
        # forwarded-for header must not be able to claim loopback.
        "proxy_headers": False,
        "access_log": False,
        "server_header": False,
        "log_level": _UVICORN_LEVELS[config.log_level],
        "timeout_graceful_shutdown": max(1, round(config.server.shutdown_grace_s)),
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)


class OLPServer(uvicorn.Server):
    """uvicorn's server, which tells the app once it listens (`OLPApp.on_listening`)."""

    def __init__(self, app: OLPApp, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._olp_app = app

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # (not when the lifespan failed or a socket would not open)
            self._olp_app.on_listening()


def _max_waiting_connections() -> int:
    """Half the file descriptors this process may open: the other half stays for the
    requests being served, their upstreams and OLP's own files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(16, soft // 2)
