"""Talking to OLP in front of a real CLI (`real_cli`), for the real-CLI end-to-end tests.

    with olp_server(tmp_path, real_cli_config("claude", real, env, beta)) as olp:
        pieces, finish, headers = stream_chat(olp)

The chain is `chat`: the real CLI as provider `real`, then `beta` (a FakeUpstream) as the
next hop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
import openai

from real_cli import RealCli

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer

__all__ = [
    "ANSWER",
    "SYSTEM",
    "TIMEOUTS",
    "detail",
    "post",
    "real_cli_config",
    "stream_chat",
]

TIMEOUTS = {"first_byte_ms": 60_000, "idle_ms": 60_000, "total_ms": 120_000}
SYSTEM = "You are terse. OLP-SYSTEM-MARKER"
ANSWER = "Streaming through the real CLI works."


def real_cli_config(
    cli: str,
    real: RealCli,
    env: dict[str, str],
    beta: FakeUpstream,
    *,
    timeouts: Mapping[str, int] | None = None,
    provider: Mapping[str, Any] | None = None,
    routing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`timeouts` override TIMEOUTS; `provider` and `routing` add to those sections."""
    return {
        "providers": {
            "real": {
                "type": f"{cli}-cli",
                "command": str(real.command),
                "env": {"PATH": real.path, **env},
                "timeouts": {**TIMEOUTS, **(timeouts or {})},
                **(provider or {}),
            },
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [
                    {"provider": "real", "model": real.model},
                    {"provider": "beta", "model": "b"},
                ]
            },
            **(routing or {}),
        },
        "cache": {"enabled": False},
        # A CLI starting on a loaded machine (the suite runs in parallel) can take longer
        # than the default 15 s heartbeat to say anything; the stream's headers would then
        # leave before any provider answered, naming none.
        "server": {"heartbeat_interval_ms": TIMEOUTS["first_byte_ms"]},
    }


def stream_chat(server: ThreadServer) -> tuple[list[str], str | None, httpx.Headers]:
    """A streamed chat (SYSTEM, then "Say it."): the content pieces, finish reason, headers."""
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say it."}],
        stream=True,
    )
    pieces, finish = [], None
    for chunk in raw.parse():
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    return [p for p in pieces if p], finish, raw.headers


def post(server: ThreadServer) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=150,
    )


def detail(resp: httpx.Response) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(resp.headers["x-olp-fallback-detail"])
    return value
