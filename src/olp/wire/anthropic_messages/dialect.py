"""The Anthropic Messages wire as a `Dialect` (what `/v1/messages` speaks)."""

from __future__ import annotations

from olp.errors import OLPError
from olp.ir import ChatRequest, ChatResponse
from olp.wire.anthropic_messages.encode import MessageStreamEncoder, error_body, message_body
from olp.wire.anthropic_messages.parse import WIRE, parse_messages_request

__all__ = ["AnthropicMessages"]


class AnthropicMessages:
    """Messages API: `message` objects, its SSE event sequence, Anthropic's error shape.

    One per request: `beta` is the client's `anthropic-beta` header, which switches API
    features on and goes on to an Anthropic upstream with the request (less the OAuth
    betas of a Claude subscription login, which an API key upstream refuses).
    """

    name = WIRE

    def __init__(self, beta: str | None = None) -> None:
        betas = [b.strip() for b in (beta or "").split(",")]
        kept = ",".join(b for b in betas if b and not b.startswith("oauth-"))
        self._headers = {"anthropic-beta": kept} if kept else None

    def parse(self, body: bytes) -> ChatRequest:
        return parse_messages_request(body, headers=self._headers)

    def parse_count(self, body: bytes) -> ChatRequest:
        """A `count_tokens` body: the same request without `max_tokens` and `stream`."""
        return parse_messages_request(body, headers=self._headers, counting=True)

    def response_body(
        self, response: ChatResponse, request: ChatRequest, response_id: str, created: int
    ) -> bytes:
        return message_body(response, response_id, request)

    def stream_encoder(
        self, request: ChatRequest, response_id: str, created: int
    ) -> MessageStreamEncoder:
        return MessageStreamEncoder(response_id, request.model)

    def error_body(self, err: OLPError) -> bytes:
        return error_body(err)

    def response_id(self, request_id: str) -> str:
        return "msg_" + request_id.removeprefix("req_")
