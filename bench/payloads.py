"""The one request every target receives, so the columns compare like with like."""

from __future__ import annotations

import orjson

MODEL = "bench-model"
TOKEN = "bench-token"
CHAT_PATH = "/v1/chat/completions"


def request_body(stream: bool, seed: int | None = None) -> bytes:
    """The chat request; streaming asks for the usage chunk, as the OpenAI SDKs commonly do.

    `seed` is part of OLP's cache key (src/olp/cache/keys.py), so bodies with different
    seeds are different cache entries: the cache-miss rows send a new seed every request.
    """
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello"}],
    }
    if seed is not None:
        body["seed"] = seed
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)
