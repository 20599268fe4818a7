"""What the cache's end-to-end tests share: a config, a clock, a client, a member key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai

from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}
QUESTION = [{"role": "user", "content": "What is 2+2?"}]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def config(up: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "providers": {
            "up": {"type": "openai-http", "base_url": up.openai_base_url, "models": ["m"]}
        },
        **extra,
    }


def client(server: ThreadServer, key: str = OWNER_TOKEN) -> openai.OpenAI:
    """An SDK client whose requests opt in to cached answers (they set no temperature)."""
    return openai.OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"x-olp-cache": "allow"},
    )


def ask(
    server: ThreadServer,
    *,
    stream: bool = False,
    key: str = OWNER_TOKEN,
    headers: dict[str, str] | None = None,
    content: str = "What is 2+2?",
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        timeout=20,
        headers={"authorization": f"Bearer {key}", **(headers or {})},
        # Deterministic: only such requests are answered from the cache by default.
        json={
            "model": "m",
            "stream": stream,
            "temperature": 0,
            "messages": [{"role": "user", "content": content}],
        },
    )


def member_key(home: Path, name: str) -> tuple[str, str]:
    store = KeyStore.open(keys_db_path(home))
    try:
        created = store.create(name, tier="member", limits=KeyLimits())
        return created.record.id, created.secret
    finally:
        store.close()
