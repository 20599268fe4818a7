"""The one request every target receives, so the three columns compare like with like."""

from __future__ import annotations

import orjson

MODEL = "bench-model"
TOKEN = "bench-token"
CHAT_PATH = "/v1/chat/completions"


def request_body(stream: bool) -> bytes:
    """The chat request; streaming asks for the usage chunk, as the OpenAI SDKs commonly do."""
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello"}],
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)
