"""`openai-http` for the endpoints OLP forwards without translating (pure): `/embeddings`
and the legacy `/completions` (fill-in-the-middle with `suffix`, what IDE autocomplete
sends). The client's body goes on as it came with the hop's model put in; the answer comes
back as it came (`RawBody`), with its usage read for the ledger and the key's limits."""

from __future__ import annotations

from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Event, Finish, RawBody, json_default
from olp.providers._lenient import obj
from olp.providers.openai_http.translate import usage_from
from olp.wire.sse import SSEMessage

__all__ = ["ForwardStreamParser", "forward_events", "forward_path", "forward_payload"]


def forward_path(request: ChatRequest) -> str:
    assert request.forward is not None  # callers check
    return "/" + request.forward.endpoint


def forward_payload(request: ChatRequest) -> bytes:
    assert request.forward is not None  # callers check
    return orjson.dumps({**request.forward.body, "model": request.model}, default=json_default)


def forward_events(provider: str, doc: Any) -> list[Event]:
    """A whole JSON answer: its usage, then the answer itself."""
    if not isinstance(doc, dict):
        raise ProviderError(
            Failure.UPSTREAM_ERROR,
            "malformed response from upstream: the answer is not a JSON object",
            provider=provider,
        )
    events: list[Event] = []
    usage = usage_from(doc.get("usage"))
    if usage is not None:
        events.append(usage)
    events += [RawBody(orjson.dumps(doc)), Finish("stop")]
    return events


class ForwardStreamParser:
    """A streamed completion: each SSE chunk passed on as a frame; `[DONE]` ends it (the
    client's `[DONE]` is written by OLP, after anything it has to add)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False

    def feed_message(self, message: SSEMessage) -> list[Event]:
        data = message.data
        if data.strip() == "[DONE]":
            self.done = True
            return [Finish("stop")]
        events: list[Event] = []
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        usage = usage_from(obj(chunk).get("usage")) if isinstance(chunk, dict) else None
        if usage is not None:
            events.append(usage)
        events.append(RawBody(b"data: " + data.encode() + b"\n\n"))
        return events
