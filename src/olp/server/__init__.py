"""The HTTP surface: `create_app(config)` returns a plain ASGI application."""

from __future__ import annotations

from olp.server.app import OLPApp, create_app

__all__ = ["OLPApp", "create_app"]
