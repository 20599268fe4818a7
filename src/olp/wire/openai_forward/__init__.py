"""OpenAI's `/v1/embeddings` and legacy `/v1/completions` as a `Dialect`: routed through
chains, fallback, keys, limits and the ledger like chat, but not translated. The body
is checked only as far as routing needs (`model`, `stream`, the input being there); the
rest goes to a provider that serves the endpoint as it came (`ir.Forward`), and its
answer comes back as it came (`ir.RawBody`). Providers that do not serve the endpoint are
skipped as unsupported (subscription CLIs, anthropic-http)."""

from __future__ import annotations

from typing import Literal

from olp.errors import InvalidRequest, OLPError
from olp.ir import ChatRequest, ChatResponse, Event, Forward, RawBody
from olp.wire._json import load_object
from olp.wire.openai_chat._checks import as_bool, bounded, model_name
from olp.wire.openai_chat.encode import error_body

__all__ = ["OpenAIForward"]

Endpoint = Literal["embeddings", "completions"]
# What each endpoint cannot do without (OpenAI answers 400 without it too).
_REQUIRED: dict[Endpoint, str] = {"embeddings": "input", "completions": "prompt"}


class OpenAIForward:
    """One forwarded endpoint; answers are the upstream's own JSON or SSE frames."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint: Endpoint = endpoint
        self.name = f"openai_{endpoint}"

    def parse(self, body: bytes) -> ChatRequest:
        doc = load_object(body)
        model = model_name(doc.get("model"))
        required = _REQUIRED[self.endpoint]
        if doc.get(required) is None:
            raise InvalidRequest(f"{required}: required", param=required)
        stream = doc.get("stream")
        streaming = stream is not None and as_bool(stream, "stream")
        if streaming and self.endpoint == "embeddings":
            raise InvalidRequest("stream: embeddings are not streamed", param="stream")
        for key, value in doc.items():
            bounded(value, key)
        usage = doc.get("stream_options")
        include_usage = isinstance(usage, dict) and usage.get("include_usage") is True
        return ChatRequest(
            model=model,
            messages=(),
            stream=streaming,
            include_usage=include_usage,
            forward=Forward(self.endpoint, doc),
        )

    def response_body(
        self, response: ChatResponse, request: ChatRequest, response_id: str, created: int
    ) -> bytes:
        return response.raw or b"{}"

    def stream_encoder(self, request: ChatRequest, response_id: str, created: int) -> RawFrames:
        return RawFrames()

    def error_body(self, err: OLPError) -> bytes:
        return error_body(err)

    def response_id(self, request_id: str) -> str:
        return "cmpl-" + request_id.removeprefix("req_")


class RawFrames:
    """The upstream's SSE frames as they came; OpenAI's `[DONE]` and error frame at the end."""

    def start(self) -> bytes:
        return b""

    def encode(self, event: Event) -> bytes:
        return event.data if isinstance(event, RawBody) else b""

    def done(self) -> bytes:
        return b"data: [DONE]\n\n"

    def error_frame(self, err: OLPError) -> bytes:
        return b"data: " + error_body(err) + b"\n\n"

    def keepalive(self) -> bytes:
        return b": keepalive\n\n"
