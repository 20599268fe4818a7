"""Helpers for the dashboard, management and metrics tests: a live OLP with two fake
upstreams.

Chain `chat`: alpha first, beta second. A test that makes alpha answer 429 with
`Retry-After: 600` gets a fallback to beta and a cooling alpha.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ProcessServer, ThreadServer

OWNER = {"authorization": f"Bearer {OWNER_TOKEN}"}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def two_hop_config(alpha: FakeUpstream, beta: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "providers": {
            "alpha": {"type": "openai-http", "base_url": alpha.openai_base_url},
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [{"provider": "alpha", "model": "a1"}, {"provider": "beta", "model": "b1"}],
                "beta-only": [{"provider": "beta", "model": "b1"}],
            }
        },
        **extra,
    }


def chat(
    server: ThreadServer | ProcessServer,
    headers: dict[str, str] = OWNER,
    model: str = "chat",
    *,
    content: str | None = None,
    stream: bool = False,
) -> httpx.Response:
    """One chat request. Each gets different content unless told, so none is a cache hit
    (deterministic, at temperature 0, so that a repeated one is)."""
    text = content if content is not None else f"hi {uuid.uuid4().hex}"
    body: dict[str, Any] = {
        "model": model,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
    }
    if stream:
        body["stream"] = True
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", headers=headers, json=body, timeout=15
    )
    resp.read()
    return resp


def get(
    server: ThreadServer | ProcessServer, path: str, headers: dict[str, str] | None = OWNER
) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers=headers or {}, timeout=15)
